package socket

import "errors"

// A Parker is a connection that waits for input with a Poller.
type Parker interface {
	// Resume handles the connection's input and parks it again. The poller
	// calls it on its pool with readable set when the socket has input, and
	// on a goroutine of its own with readable unset for each connection
	// still parked when it stops (which then finds it cannot park again).
	Resume(readable bool)
}

// Handle is one connection's registration with a Poller, kept in the
// connection (the poller holds its address while the connection is parked,
// so it must not be copied once in use). Its state is guarded by the
// poller's lock.
type Handle struct {
	owner  Parker
	fd     int32
	tag    int32 // registration tag, to tell stale events
	added  bool  // in the epoll set
	closed bool  // the socket is being closed: never park again
}

// NewHandle returns the registration of the connection owner, whose socket
// descriptor is fd (see FD); a connection whose fd is -1 cannot be parked.
func NewHandle(fd int32, owner Parker) Handle { return Handle{owner: owner, fd: fd} }

// Parkable reports whether the connection has a descriptor to park.
func (h *Handle) Parkable() bool { return h.fd >= 0 }

func (h *Handle) resumeReadable() { h.owner.Resume(true) }

// ErrClosed: the connection's socket was closed; it is to be finished.
var ErrClosed = errors.New("socket: socket closed")
