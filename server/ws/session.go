package ws

import (
	"bufio"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/ws/socket"
)

// session is one WebSocket connection: the client's peer (the registry's
// Conn, its timers and protocol state) plus the socket and its writer. It is
// the Conn's hub.Writer.
type session struct {
	peer
	ws   *websocket.Conn
	sock *socket.Conn  // what ws reads and writes
	br   *bufio.Reader // ws's read buffer, over sock

	// readGate orders the reader's look at the read buffers (inputPending)
	// before a close handshake, in which the library reads them from the
	// writer's goroutine; handshaking is set, under it, once that starts.
	readGate    sync.Mutex
	handshaking bool

	// The connection's registration with the input poller.
	poll socket.Handle

	// writeStarted is when the write in progress began (unix nanoseconds),
	// 0 between writes. Writes carry no context of their own, because a
	// deadline per write costs a timer on the fan-out hot path; the
	// handler's watchdog closes a socket whose write is stuck instead.
	writeStarted atomic.Int64

	writeLoopFn func() // writeLoop, made once: Wake runs it on a pooled goroutine
}

// finish cleans up once the socket has failed or closed: it returns when the
// writer is done, and the connection is gone.
func (sess *session) finish() {
	defer sess.s.remove(sess)
	sess.leave()
	sess.conn.WaitWriter()
	_ = sess.ws.CloseNow()
	sess.s.stats.connClosed(sess.conn.CloseCode())
}

// overflowGrace is how long a writer stuck on a full socket gets to finish
// its write after the queue overflowed, so that the 4100 close can still be
// sent to a client that is slow but reading.
const overflowGrace = time.Second

// Wake starts the connection's writer, writeLoop, on a pooled goroutine
// (hub.Writer).
func (sess *session) Wake() { sess.s.pool.Go(sess.writeLoopFn) }

// Overflow runs once when the connection's queue overflows (hub.Writer). If
// the writer is still stuck on the full socket after the grace period, the
// socket is dropped without ceremony.
func (sess *session) Overflow() {
	sess.s.slowClosed.Add(1)
	time.AfterFunc(overflowGrace, func() {
		if sess.writeStarted.Load() != 0 {
			_ = sess.ws.CloseNow()
		}
	})
}

// writeLoop is the connection's only writer, woken when there is something
// to write: it drains the queue onto the socket and exits when the queue is
// empty; once the connection is closing, it sends the reason and closes.
func (sess *session) writeLoop() {
	defer sess.conn.WriterDone()
	var frames [][]byte // Drain lends the connection's buffer
	for {
		var reason *hub.CloseReason
		var idle bool
		frames, reason, idle = sess.conn.Drain(frames)
		if idle {
			return
		}
		sess.s.stats.framesDelivered(len(frames))
		// Several frames leave together (socket.Conn's cork).
		corked := len(frames) > 1
		if corked {
			sess.sock.Cork()
		}
		for i, f := range frames {
			if err := sess.write(f); err != nil {
				// The library refuses writes once it has sent a close
				// frame itself (for a protocol error its reader found,
				// say): that frame may be held by the cork, so it goes out
				// before the socket is dropped.
				if corked {
					_ = sess.uncork()
				}
				_ = sess.ws.CloseNow()
				clear(frames)
				return
			}
			frames[i] = nil
		}
		frames = frames[:0]
		if corked {
			if err := sess.uncork(); err != nil {
				_ = sess.ws.CloseNow()
				return
			}
		}
		if reason == nil {
			continue
		}
		if reason.Code != 0 {
			_ = sess.write(errorFrame(reason.Code, reason.Message))
			sess.closeHandshake(websocket.StatusCode(reason.Code), reason.Message)
		} else {
			_ = sess.ws.CloseNow()
		}
		return
	}
}

// closeHandshake sends a close frame and waits for the client's. The library
// reads the answer on this goroutine unless the reader is inside the library
// already; either way the reader then sees the socket closed and cleans up.
func (sess *session) closeHandshake(code websocket.StatusCode, reason string) {
	sess.readGate.Lock()
	sess.handshaking = true
	sess.readGate.Unlock()
	_ = sess.ws.Close(code, reason)
}

func (sess *session) write(frame []byte) error {
	sess.writeStarted.Store(time.Now().UnixNano())
	err := sess.ws.Write(context.Background(), websocket.MessageText, frame)
	sess.writeStarted.Store(0)
	return err
}

// uncork sends the frames the socket held while corked, timed like write.
func (sess *session) uncork() error {
	sess.writeStarted.Store(time.Now().UnixNano())
	err := sess.sock.Uncork()
	sess.writeStarted.Store(0)
	return err
}

// Resume handles the connection's input until none is buffered (readable:
// the poller saw the socket readable), then parks the connection with the
// poller and returns; the poller calls it again, on a pooled goroutine, when
// there is input. Once the socket is done it finishes the connection.
func (sess *session) Resume(readable bool) {
	woken := readable
	for {
		if !woken && !sess.inputPending() {
			switch err := sess.s.poller.Park(&sess.poll); {
			case err == nil:
				return
			case errors.Is(err, socket.ErrClosed):
				sess.finish()
				return
			default: // the poller cannot take it
				go sess.waitAlone()
				return
			}
		}
		woken = false
		if !sess.readMessages(true) {
			sess.finish()
			return
		}
	}
}

// socketClosing runs when the WebSocket library closes the socket. A parked
// connection has no goroutine to see that, so it is finished from here.
func (sess *session) socketClosing() {
	if sess.s.poller != nil && sess.s.poller.Closed(&sess.poll) {
		go sess.finish()
	}
}

// waitAlone serves the connection on a goroutine of its own, when there is
// no poller to park it with.
func (sess *session) waitAlone() {
	sess.readLoop()
	sess.finish()
}

// readLoop handles client messages until the socket fails or closes.
//
// Without the poller, it runs on the connection's long-lived goroutine, which
// spends nearly all its life waiting, so it must stay small: handling a message (JSON, channel
// authorization, subscribing, encoding answers) would grow its stack to
// several KiB, kept for the connection's life as Go shrinks a stack only when
// three quarters of it are unused. So this goroutine only waits for input,
// without reading it, and each burst of input is handled on a short-lived
// goroutine that ends once nothing more is buffered.
func (sess *session) readLoop() {
	for {
		if !sess.inputPending() {
			switch err := socket.WaitReadable(sess.sock.Conn); {
			case errors.Is(err, socket.ErrNoWait):
				sess.readMessages(false) // read (and wait) on this goroutine
				return
			case err != nil:
				return
			}
		}
		more := make(chan bool, 1)
		go func() { more <- sess.readMessages(true) }()
		if !<-more {
			return
		}
	}
}

// readMessages reads and handles client messages. With untilDrained it
// returns true once no more input is buffered (it may still wait inside the
// library for the rest of a frame); otherwise, or on a failed or closed
// socket, it returns false once the socket is done.
//
// Handling a message runs code a client's input steers (the poller's pooled
// goroutines, or the connection's own): a panic there is recovered, logged
// and counted, and only this connection is closed, with 1011; the false
// returned has the caller finish it.
func (sess *session) readMessages(untilDrained bool) (more bool) {
	if sess.s.panics.Do(sess.s.log, "WebSocket message", func() { more = sess.readInput(untilDrained) }) {
		sess.closeAfterPanic()
		return false
	}
	return more
}

// readInput is readMessages' work.
func (sess *session) readInput(untilDrained bool) bool {
	for {
		typ, r, err := sess.ws.Reader(context.Background())
		if err != nil {
			return false
		}
		sess.touch()
		buf, tooBig, err := readMessage(r, sess.s.opts.MaxMessageBytes)
		if err != nil {
			return false
		}
		switch {
		case typ != websocket.MessageText:
			sess.sendError(0, "Binary frames are not supported; send JSON text.")
		case tooBig:
			sess.sendError(0, tooLargeMessage(sess.s.opts.MaxMessageBytes))
		case !utf8.Valid(buf):
			// RFC 6455 §8.1: a text message that is not UTF-8 fails the
			// connection, with 1007. Nothing more of it is read.
			sess.conn.Close(hub.CloseInvalidUTF8)
			return false
		default:
			sess.handle(buf)
		}
		if untilDrained && !sess.inputPending() {
			return true
		}
	}
}

// inputPending reports whether bytes already read from the socket wait to be
// handled. Once a close handshake has started, the library reads them, so
// they are not looked at (and not reported).
func (sess *session) inputPending() bool {
	sess.readGate.Lock()
	defer sess.readGate.Unlock()
	return !sess.handshaking && (sess.br.Buffered() > 0 || sess.sock.Buffered())
}

// tooLargeMessage is the pusher:error of a client message over limit bytes.
func tooLargeMessage(limit int) string {
	return "Message too large: the limit is " + itoa(limit) + " bytes."
}

// readMessage reads one message of at most max bytes. A larger one is read
// to its end and discarded, so the connection stays usable; tooBig reports it.
func readMessage(r io.Reader, max int) (msg []byte, tooBig bool, err error) {
	msg, err = io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, false, err
	}
	if len(msg) <= max {
		return msg, false, nil
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, false, err
	}
	return nil, true, nil
}
