package upgrade

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// replayConn is a connection handed to the http.Server with the bytes read
// from it here put back in front: its reads return them first. net/http
// reads one request at a time, never concurrently, so they need no lock.
//
// The first request's deadlines run from accept, whichever side reads it.
// net/http sets two read deadlines before it hands that request to its
// handler, both from the moment it starts reading the head: the head's
// (ReadHeaderTimeout, or ReadTimeout without one) and, once it has the head,
// the whole request's (ReadTimeout), which bounds the body. Here it starts
// only after the hand-over, which may come up to HeaderTimeout after accept:
// so the first is held to the head's deadline from accept (readHead's), and
// the second to accept plus Options.ReadTimeout. Without that a head
// dribbled in just inside HeaderTimeout here got a second timeout there, and
// a stalled body was cut 39 s after accept, not 30. A deadline net/http sets
// as zero (an http.Server without those timeouts) is taken as it is, as are
// its later ones (the background read's, keep-alive's, a lifted deadline).
type replayConn struct {
	net.Conn
	h       head
	pending []byte
	// held are the deadlines from accept that net/http's first read
	// deadlines are held to, in the order it sets them; each is dropped
	// once used.
	held []time.Time
}

func newReplayConn(c net.Conn, h head, accepted time.Time, readTimeout time.Duration) *replayConn {
	rc := &replayConn{Conn: c, h: h, pending: *h.buf, held: []time.Time{h.deadline, {}}}
	if readTimeout > 0 {
		rc.held[1] = accepted.Add(readTimeout)
	}
	if len(rc.pending) == 0 {
		rc.h.release()
	}
	return rc
}

// Read implements net.Conn.
func (rc *replayConn) Read(p []byte) (int, error) {
	if len(rc.pending) == 0 {
		return rc.Conn.Read(p)
	}
	n := copy(p, rc.pending)
	rc.pending = rc.pending[n:]
	if len(rc.pending) == 0 {
		rc.h.release()
	}
	return n, nil
}

// SetReadDeadline implements net.Conn, holding net/http's first deadlines
// to the ones from accept.
func (rc *replayConn) SetReadDeadline(t time.Time) error {
	if len(rc.held) > 0 {
		d := rc.held[0]
		rc.held = rc.held[1:]
		if !d.IsZero() && t.After(d) {
			t = d
		}
	}
	return rc.Conn.SetReadDeadline(t)
}

// SetDeadline implements net.Conn; its read half is SetReadDeadline's.
func (rc *replayConn) SetDeadline(t time.Time) error {
	if err := rc.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return rc.SetReadDeadline(t)
}

// CloseWrite serves net/http's closing of a connection after an error
// answer.
func (rc *replayConn) CloseWrite() error {
	if cw, ok := rc.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// SyscallConn gives the descriptor, so that a WebSocket that net/http
// upgraded after all (its head was too long for here) can still be parked
// with the poller. By then the bytes put back have been read.
func (rc *replayConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := rc.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
