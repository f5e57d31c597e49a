package ws

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/heraldrt/herald/server/hub"
)

// xhrSession is one client of the HTTP fallback: a peer whose frames leave
// in the responses of the client's receiving requests (xhr_streaming or
// xhr), one attached at a time, and whose messages arrive in xhr_send
// requests. It is its Conn's hub.Writer, without a goroutine of its own:
// Wake only records that the hub handed it the writer's part (a claim), and
// the attached receiver, or the next one, takes the frames with Conn.Drain.
// Between receivers the frames wait in the Conn's queue, bounded like a
// WebSocket's (4100 past Options.MaxQueueBytes); a session without a
// receiver for Options.DisconnectDelay is finished, and leaves its channels
// as a dropped WebSocket does.
type xhrSession struct {
	peer
	id string // "<key>/<server>/<session>", its key in Handler.xhr

	// in serialises the handling of the client's messages: xhr_send
	// requests may overlap, and a peer handles one message at a time.
	in sync.Mutex

	// drain is held by whoever calls Conn.Drain: the receiver or finish.
	drain  sync.Mutex
	frames [][]byte // Drain's buffer; under drain

	// mu guards what follows; it is taken on its own or under drain, and
	// nothing is called on the hub under it.
	mu       sync.Mutex
	claims   int          // Wakes not yet given back with Conn.WriterDone
	recv     *xhrReceiver // the attached receiving request, or nil
	goneGen  int          // the disconnect timer armed last; a stale one does nothing
	finished bool
	wake     chan struct{} // cap 1: frames, a close or the end wait for the receiver
}

// xhrReceiver is one attached receiving request; done closes as it detaches.
type xhrReceiver struct{ done chan struct{} }

// takeoverWait is how long a receiving request waits for the one attached
// before it to detach. pusher-js reopens its stream (after 256 Ki
// characters) by aborting the request and making a new one at once, which
// can arrive before the server has seen the old connection close; SockJS
// would refuse it (2010) and pusher-js would drop the connection.
const takeoverWait = time.Second

// Why a receiving request is not attached.
var (
	errReceiverBusy = errors.New("another request receives for this session")
	errSessionEnded = errors.New("the session has ended")
)

func newXHRSession(s *Handler, id string) *xhrSession {
	return &xhrSession{peer: peer{s: s}, id: id, wake: make(chan struct{}, 1)}
}

// Wake records the writer's part the hub hands over (hub.Writer) and tells
// the receiver, if one is attached.
func (x *xhrSession) Wake() {
	x.mu.Lock()
	x.claims++
	x.mu.Unlock()
	x.signal()
}

// Overflow counts the session as a slow consumer (hub.Writer): its queue
// overflowed, and it is closing with 4100.
func (x *xhrSession) Overflow() { x.s.slowClosed.Add(1) }

func (x *xhrSession) signal() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// attach makes the request the session's receiver: after the one attached
// detaches (takeoverWait at most) and while the session has not ended. A
// request cancelled meanwhile gets its context's error.
func (x *xhrSession) attach(ctx context.Context) (*xhrReceiver, error) {
	r := &xhrReceiver{done: make(chan struct{})}
	x.mu.Lock()
	for x.recv != nil && !x.finished {
		old := x.recv.done
		x.mu.Unlock()
		t := time.NewTimer(takeoverWait)
		select {
		case <-old:
			t.Stop()
		case <-t.C:
			return nil, errReceiverBusy
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		x.mu.Lock()
	}
	defer x.mu.Unlock()
	if x.finished {
		return nil, errSessionEnded
	}
	x.recv = r // the disconnect timer, if one runs, finds it and does nothing
	return r, nil
}

// detach ends r's part; the session is finished if no receiver attaches
// within the disconnect delay.
func (x *xhrSession) detach(r *xhrReceiver) {
	x.mu.Lock()
	if x.recv == r {
		x.recv = nil
		x.armLocked()
	}
	x.mu.Unlock()
	close(r.done)
}

// armLocked starts the disconnect timer, which finishes the session unless
// a receiver attaches first. The caller holds mu.
func (x *xhrSession) armLocked() {
	if x.finished {
		return
	}
	x.goneGen++
	gen := x.goneGen
	time.AfterFunc(x.s.opts.DisconnectDelay, func() { x.expire(gen) })
}

// expire finishes the session when the disconnect timer armed as gen is
// still the last one and no receiver came.
func (x *xhrSession) expire(gen int) {
	x.mu.Lock()
	stale := x.goneGen != gen || x.recv != nil
	x.mu.Unlock()
	if !stale {
		x.finish()
	}
}

// ended reports whether the session is finished.
func (x *xhrSession) ended() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.finished
}

// take appends to dst what waits for the client: the frames queued, as one
// a[...] line, or, once the session is closing, the reason (code 0: none to
// send) after its pusher:error, as the WebSocket sends it. Without a claim
// there is nothing to take.
func (x *xhrSession) take(dst []byte) (out []byte, reason *hub.CloseReason) {
	x.drain.Lock()
	defer x.drain.Unlock()
	for {
		x.mu.Lock()
		claimed := x.claims > 0
		x.mu.Unlock()
		if !claimed {
			return dst, nil
		}
		frames, reason, idle := x.conn.Drain(x.frames)
		if idle || reason != nil {
			// The claim is given back: Drain reported idle, or the close
			// reason is taken and no writer is woken again.
			x.mu.Lock()
			x.claims--
			x.mu.Unlock()
			x.conn.WriterDone()
			x.frames = frames[:0]
			if reason == nil {
				continue // a Wake since may have claimed again
			}
			if reason.Code != 0 {
				dst = appendClose(dst, *reason)
			}
			return dst, reason
		}
		x.s.stats.framesDelivered(len(frames))
		dst = appendMessages(dst, frames)
		clear(frames)
		x.frames = frames[:0]
		// The claim stays: frames queued meanwhile wait for the next take
		// (the hub wakes no writer while one holds the part).
		return dst, nil
	}
}

// finish ends the session once: out of the handler's set, out of the
// registry (its channels see it go), the writer's part given back.
func (x *xhrSession) finish() {
	x.mu.Lock()
	if x.finished {
		x.mu.Unlock()
		return
	}
	x.finished = true
	x.mu.Unlock()
	x.signal() // an attached receiver ends
	defer x.s.removeXHR(x)
	x.leave()
	// Closed now: a claim left (or the one Close just made) takes the
	// reason and is given back.
	for {
		if _, reason := x.take(nil); reason == nil {
			break
		}
	}
	x.conn.WaitWriter()
	x.s.stats.connClosed(x.conn.CloseCode())
}
