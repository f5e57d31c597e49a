//go:build !unix

package hub

import (
	"errors"
	"net"
)

// errNoWait means the connection cannot be waited on without reading it.
var errNoWait = errors.New("hub: cannot wait for input on this connection")

// waitReadable is not available here: the reader blocks in its read instead.
func waitReadable(net.Conn) error { return errNoWait }
