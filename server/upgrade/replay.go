package upgrade

import (
	"errors"
	"net"
	"syscall"
)

// replayConn is a connection handed to the http.Server with the bytes read
// from it here put back in front: its reads return them first. net/http
// reads one request at a time, never concurrently, so they need no lock.
type replayConn struct {
	net.Conn
	h       head
	pending []byte
}

func newReplayConn(c net.Conn, h head) *replayConn {
	rc := &replayConn{Conn: c, h: h, pending: *h.buf}
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
