//go:build unix

package socket

import (
	"errors"
	"net"
	"syscall"
)

// ErrNoWait means the connection cannot be waited on without reading it.
var ErrNoWait = errors.New("socket: cannot wait for input on this connection")

// WaitReadable blocks until c has input (or is closed, or has failed)
// without consuming any of it: the goroutine waiting holds only the few
// frames of the runtime's network poller, however deep the code that later
// reads the input. Input already in user-space buffers is the caller's to
// check.
func WaitReadable(c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return ErrNoWait
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return ErrNoWait
	}
	var b [1]byte
	return rc.Read(func(fd uintptr) bool {
		for {
			// A peek consumes nothing. EAGAIN means nothing to read yet:
			// returning false parks until the poller reports the socket
			// readable. Data, end of stream or an error all end the wait;
			// the reader then sees them.
			_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
			if err != syscall.EINTR {
				return err != syscall.EAGAIN
			}
		}
	})
}
