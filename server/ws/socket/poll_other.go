//go:build !linux

package socket

import "errors"

// Poller is epoll's on Linux; elsewhere there is none, and each connection
// waits for input on a goroutine of its own.
type Poller struct{}

var errPollerDone = errors.New("socket: no input poller")

// NewPoller returns nil: there is no poller here.
func NewPoller(<-chan struct{}, *Pool) *Poller { return nil }

// Park fails: there is no poller here.
func (*Poller) Park(*Handle) error { return errPollerDone }

// Closed reports false: nothing is ever parked here.
func (*Poller) Closed(*Handle) bool { return false }
