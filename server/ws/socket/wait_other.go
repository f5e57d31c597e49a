//go:build !unix

package socket

import (
	"errors"
	"net"
)

// ErrNoWait means the connection cannot be waited on without reading it.
var ErrNoWait = errors.New("socket: cannot wait for input on this connection")

// WaitReadable is not available here: the reader blocks in its read instead.
func WaitReadable(net.Conn) error { return ErrNoWait }
