//go:build !linux

package hub

import "errors"

// inputPoller is epoll's on Linux; elsewhere there is none, and each
// connection waits for input on a goroutine of its own.
type inputPoller struct{}

var errPollerDone = errors.New("hub: no input poller")

func newInputPoller(chan struct{}, *goPool) *inputPoller { return nil }

func (*inputPoller) park(*session) error { return errPollerDone }

func (*inputPoller) closed(*session) bool { return false }
