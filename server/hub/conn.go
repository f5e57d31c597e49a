package hub

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"sync"
)

// DefaultMaxQueueBytes bounds the frames waiting to be written to one
// connection. A consumer that falls this far behind is closed with 4100 rather
// than slowing the publisher or the other subscribers.
const DefaultMaxQueueBytes = 1 << 20

// Writer is a connection's transport as the hub sees it: what moves the
// connection's queued frames to its client. The transport passes one to
// Connect (server/ws's session is one).
//
// The hub calls Wake when frames or a close reason wait and no writer runs.
// Wake must start a writer without blocking, on another goroutine; that
// writer takes the queue with Conn.Drain until Drain reports it idle, and
// then ends, or ends earlier once it has sent the close reason or its socket
// failed; either way it calls Conn.WriterDone as it ends. Until Drain has
// reported idle the hub wakes no other writer, so one writer at a time takes
// the frames; an idle connection has none.
//
// Overflow is called once, when the queue overflowed; the connection is
// closing with 4100 by then, and its writer has been woken to say so.
//
// Both are called outside the connection's own lock but possibly under the
// registry's (fan-out runs under a channel's lock): they must return at
// once and never call back into the hub.
type Writer interface {
	Wake()
	Overflow()
}

// Conn is one client connection as the registry sees it: an identity, the
// channels it is subscribed to and a byte-bounded queue of encoded frames that
// exactly one writer drains.
type Conn struct {
	socketID string
	app      *appState

	// subMu serialises this connection's subscription changes, sign-in and
	// removal (see the lock order in hub.go). It guards channels, userID,
	// watchlist and removed.
	subMu     sync.Mutex
	channels  subscriptions
	userID    string   // set by SignIn
	watchlist []string // user ids watched, set by SignIn
	removed   bool
	// signInPending: in cluster mode, SignIn's answer waits for the
	// cluster (CompleteSignIn), with signInFirst the frames to queue first.
	signInPending bool
	signInFirst   [][]byte

	// outMu guards the outbound queue and the close state.
	outMu       sync.Mutex
	out         [][]byte
	outBytes    int
	maxOutBytes int
	closing     *CloseReason
	// writer is woken whenever there is something to write (or a close to
	// send) and no writer runs (see Writer); nil for a connection whose
	// owner takes the queue itself (Take).
	writer  Writer
	writers sync.WaitGroup // writers woken and not yet done; Add happens under outMu, with the claim
	writing bool           // a writer is running
	spare   [][]byte       // the writer's frame buffer, kept between writer runs
}

// subscription is one channel of a connection, with the presence user it
// joined as (empty for other kinds).
type subscription struct {
	ch     *channel
	userID string
	cl     *clusterSub // in cluster mode only
}

// clusterSub is what a subscription needs in cluster mode: info is the
// presence user_info (the Join's, made again when the node rebuilds its
// record); pending, that the cluster has not answered the Join yet (ch is
// nil until it does); resend, that a repeated subscribe waits for its
// answer; refusal, the frame to queue if the presence channel turns out
// full (until the answer).
type clusterSub struct {
	info    json.RawMessage
	token   uint64 // Join.Token
	refusal []byte
	pending bool
	resend  bool
	// recovery is the subscription's Recovery until the cluster answers.
	recovery *Recovery
}

// pending reports a subscription the cluster has not answered yet.
func (s *subscription) pending() bool { return s.cl != nil && s.cl.pending }

// newConn returns app's connection socketID, of the options opts (their
// defaults filled).
func newConn(app *appState, socketID string, opts ConnectOptions) *Conn {
	return &Conn{
		socketID:    socketID,
		app:         app,
		maxOutBytes: opts.MaxQueueBytes,
		writer:      opts.Writer,
	}
}

// SocketID is the connection's socket_id.
func (c *Conn) SocketID() string { return c.socketID }

// AppID is the id of the app the connection belongs to.
func (c *Conn) AppID() string { return c.app.id }

// Subscription reports whether c is subscribed to the channel and, on a
// presence channel, as which user.
func (c *Conn) Subscription(name string) (userID string, ok bool) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	sub := c.channels.get(name)
	if sub == nil || sub.pending() {
		return "", false
	}
	return sub.userID, true
}

// SubscriptionCount is the number of channels c is subscribed to.
func (c *Conn) SubscriptionCount() int {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	return c.channels.len()
}

// UserID is the user the connection signed in as, or "".
func (c *Conn) UserID() string {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	return c.userID
}

// Send queues a frame for the writer without blocking. It reports false when
// the connection is closing or when the frame would push the queue over its
// byte bound; the connection is then closed with 4100 (over capacity).
func (c *Conn) Send(frame []byte) bool { return c.send(frame, nil) }

// send queues frame, then next unless nil, under one lock: both or neither.
func (c *Conn) send(frame, next []byte) bool {
	c.outMu.Lock()
	if c.closing != nil {
		c.outMu.Unlock()
		return false
	}
	if c.outBytes+len(frame)+len(next) > c.maxOutBytes {
		c.closing = &CloseOverCapacity
		wake := c.claimWriterLocked()
		c.outMu.Unlock()
		if wake {
			c.writer.Wake()
		}
		if c.writer != nil {
			c.writer.Overflow()
		}
		return false
	}
	c.out = append(c.out, frame)
	if next != nil {
		c.out = append(c.out, next)
	}
	c.outBytes += len(frame) + len(next)
	wake := c.claimWriterLocked()
	c.outMu.Unlock()
	if wake {
		c.writer.Wake()
	}
	return true
}

// claimWriterLocked reports whether the caller must wake the writer, marking
// one as running. The caller holds outMu.
func (c *Conn) claimWriterLocked() bool {
	if c.writing || c.writer == nil {
		return false
	}
	c.writing = true
	// Counted before outMu is released, so that whoever next sees writing
	// set can wait for this writer.
	c.writers.Add(1)
	return true
}

// Close asks the connection's writer to send reason and close. Frames already
// queued are dropped; the first reason wins.
func (c *Conn) Close(reason CloseReason) {
	c.outMu.Lock()
	if c.closing == nil {
		c.closing = &reason
	}
	wake := c.claimWriterLocked()
	c.outMu.Unlock()
	if wake {
		c.writer.Wake()
	}
}

// Drain is the writer's Take: the queued frames (appended to buf, or to the
// buffer the writer handed back last time when buf is nil), or the close
// reason, or idle true when there is nothing left, in which case the writer
// must end (the next Send wakes a new one). After a close reason no writer
// is woken again.
func (c *Conn) Drain(buf [][]byte) (frames [][]byte, reason *CloseReason, idle bool) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if buf == nil {
		buf, c.spare = c.spare, nil
	}
	if c.closing != nil {
		c.out, c.outBytes = nil, 0
		return buf, c.closing, false
	}
	if len(c.out) == 0 {
		c.writing = false
		c.spare = buf[:0]
		return nil, nil, true
	}
	buf = append(buf, c.out...)
	clear(c.out)
	c.out, c.outBytes = c.out[:0], 0
	return buf, nil, false
}

// WriterDone is called by the writer Wake started, as it ends.
func (c *Conn) WriterDone() { c.writers.Done() }

// WaitWriter waits until every writer Wake started has ended. Close the
// connection first, or a later Send may wake another.
func (c *Conn) WaitWriter() { c.writers.Wait() }

// Take returns every queued frame (appended to buf) and, once the
// connection is closing, the reason. It is for consumers without a Writer —
// tests and tools that attach connections to the registry directly;
// transport connections are drained by their own writer.
func (c *Conn) Take(buf [][]byte) ([][]byte, *CloseReason) {
	frames, reason, _ := c.Drain(buf)
	return frames, reason
}

// CloseCode is the code the connection was closed with (0 when the client
// went away first, or while it is open).
func (c *Conn) CloseCode() int {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.closing == nil {
		return 0
	}
	return c.closing.Code
}

// NewSocketID returns a fresh socket_id: two random integers joined by a dot,
// from a CSPRNG so one client cannot guess another's id and exclude it.
func NewSocketID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (Go 1.24 and later)
	hi := binary.BigEndian.Uint32(b[:4])
	lo := binary.BigEndian.Uint32(b[4:])
	buf := make([]byte, 0, 21)
	buf = strconv.AppendUint(buf, uint64(hi), 10)
	buf = append(buf, '.')
	buf = strconv.AppendUint(buf, uint64(lo), 10)
	return string(buf)
}
