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
// The head's deadline runs from accept, whichever side reads the head. The
// connection comes with readHead's deadline still set, and the first read
// deadline net/http sets (from ReadHeaderTimeout, or ReadTimeout without
// one, set before it reads the first head) is held to it, so that a head
// dribbled in just inside HeaderTimeout here does not get a second timeout
// there. An http.Server with neither timeout sets no deadline before the
// head: readHead's holds, and net/http's first, after the head, is zero and
// taken as it is. Later deadlines (the body's, keep-alive's) are net/http's.
type replayConn struct {
	net.Conn
	h            head
	pending      []byte
	headDeadline time.Time // zero once net/http has set its first deadline
}

func newReplayConn(c net.Conn, h head) *replayConn {
	rc := &replayConn{Conn: c, h: h, pending: *h.buf, headDeadline: h.deadline}
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

// SetReadDeadline implements net.Conn, holding the first deadline to the
// head's.
func (rc *replayConn) SetReadDeadline(t time.Time) error {
	if d := rc.headDeadline; !d.IsZero() {
		rc.headDeadline = time.Time{}
		if t.After(d) {
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
