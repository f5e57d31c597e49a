package socket

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs short-lived work (a connection's write loop until it has
// nothing more to write, or the handling of a parked connection's input) on
// reused goroutines. A fresh goroutine starts with a small stack and grows
// it, copying it each time, on its way down the WebSocket read or write
// path; at ten thousand connections a second that copying was a sixth of the
// connect path's CPU. A goroutine that has done such work before has the
// stack already. A goroutine whose work ends waits a while for more; at most
// maxIdle wait, so a burst leaves no crowd behind, and none after linger.
//
// The waiting goroutines form a stack: work goes to the one that finished
// last (its stack and caches are warm), and the ones at the bottom, unused
// for linger, are let go by a timer that runs only while any wait. Each has a
// channel of its own, so that handing over work is one send nobody else
// contends for, and waiting is a plain receive, not a select with a timer
// reset per piece of work (a fan-out hands over one piece per delivery).
type Pool struct {
	maxIdle int
	linger  time.Duration

	mu    sync.Mutex
	idle  []*poolWorker // waiting, the longest waiting first
	sweep *time.Timer   // runs letGo; set whenever idle is not empty, nil before the first wait

	spawned atomic.Int64 // goroutines started, for tests
}

// poolWorker is one waiting goroutine: work receives its next function, or
// nil when it is let go.
type poolWorker struct {
	work  chan func()
	since time.Time // when it began to wait
}

// NewPool returns a pool that keeps at most maxIdle goroutines waiting for
// work, each for at most linger.
func NewPool(maxIdle int, linger time.Duration) *Pool {
	return &Pool{maxIdle: maxIdle, linger: linger}
}

// Go runs f on a waiting goroutine, or on a new one.
func (p *Pool) Go(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.work <- f // buffered, and w is taken off the stack: never blocks
		return
	}
	p.mu.Unlock()
	p.spawned.Add(1)
	go p.serve(f)
}

func (p *Pool) serve(f func()) {
	w := &poolWorker{work: make(chan func(), 1)}
	for f != nil {
		f()
		if !p.wait(w) {
			return
		}
		f = <-w.work
	}
}

// wait puts w on the stack of waiting goroutines, unless maxIdle wait.
func (p *Pool) wait(w *poolWorker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= p.maxIdle {
		return false
	}
	w.since = time.Now()
	p.idle = append(p.idle, w)
	// The first to wait sets the timer; while others wait, letGo keeps it
	// set. (A timer still set when the stack emptied only makes letGo run
	// once for nothing.)
	if len(p.idle) == 1 {
		if p.sweep == nil {
			p.sweep = time.AfterFunc(p.linger, p.letGo)
		} else {
			p.sweep.Reset(p.linger)
		}
	}
	return true
}

// letGo ends the goroutines that have waited linger, and sets the timer
// again for the next one to reach it.
func (p *Pool) letGo() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	n := 0
	for n < len(p.idle) && now.Sub(p.idle[n].since) >= p.linger {
		p.idle[n].work <- nil
		n++
	}
	rest := copy(p.idle, p.idle[n:])
	clear(p.idle[rest:])
	p.idle = p.idle[:rest]
	if rest > 0 {
		p.sweep.Reset(p.linger - now.Sub(p.idle[0].since))
	}
}

// waiting is the number of goroutines waiting for work.
func (p *Pool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}
