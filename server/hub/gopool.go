package hub

import (
	"sync/atomic"
	"time"
)

// goPool runs short-lived work (a connection's write loop until it has
// nothing more to write, or the handling of a parked connection's input) on
// reused goroutines. A fresh goroutine starts with a small stack and grows
// it, copying it each time, on its way down the WebSocket read or write
// path; at ten thousand connections a second that copying was a sixth of the
// connect path's CPU. A goroutine that has done such work before has the
// stack already. A goroutine whose work ends waits a while for more; at most
// maxIdle wait, so a burst leaves no crowd behind, and none after linger.
type goPool struct {
	work    chan func() // unbuffered: a send succeeds only to a waiting goroutine
	idle    atomic.Int32
	spawned atomic.Int64 // goroutines started, for tests
	maxIdle int32
	linger  time.Duration
}

func newGoPool(maxIdle int, linger time.Duration) *goPool {
	return &goPool{work: make(chan func()), maxIdle: int32(maxIdle), linger: linger}
}

// Go runs f on a waiting goroutine, or on a new one.
func (p *goPool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		p.spawned.Add(1)
		go p.serve(f)
	}
}

func (p *goPool) serve(f func()) {
	var t *time.Timer
	for {
		f()
		if p.idle.Add(1) > p.maxIdle {
			p.idle.Add(-1)
			return
		}
		if t == nil {
			t = time.NewTimer(p.linger)
		} else {
			t.Reset(p.linger)
		}
		select {
		case f = <-p.work:
			p.idle.Add(-1)
		case <-t.C:
			p.idle.Add(-1)
			return
		}
	}
}

// The pool's bounds: the goroutines a busy server reuses, gone a second
// after traffic stops (an idle connection holds none). The cap is above the
// subscribers one broadcast usually reaches, because a broadcast starts a
// writer for each of them at once: with 1,024, a 10,000-subscriber channel
// started 9,000 goroutines per event and grew each one's stack, 13 % of the
// server's CPU at two events a second. Waiting goroutines cost a few KiB of
// stack each, and only for the second after such a burst.
const (
	maxIdleGoroutines = 16384
	goroutineLinger   = time.Second
)
