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
	// maxRunning bounds the goroutines alive (0: no bound); work beyond it
	// waits in queue for one to finish, unless none has taken any for
	// stallAfter (see Bound).
	maxRunning int
	stallAfter time.Duration

	mu      sync.Mutex
	idle    []*poolWorker // waiting, the longest waiting first
	sweep   *time.Timer   // runs letGo; set whenever idle is not empty, nil before the first wait
	running int           // goroutines started and not ended
	queue   []func()      // work waiting for a goroutine, oldest first (bounded pools only)
	taken   uint64        // work taken from queue so far
	// The stall check runs every stallAfter while work is queued; stallMark
	// is taken as it last saw it.
	stall      *time.Timer
	stallArmed bool
	stallMark  uint64

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

// Bound caps the goroutines the pool runs at once at maxRunning; call it
// before the pool is used. Work started while all of them are busy waits in
// a queue, and each takes queued work when its own is done.
//
// Without a bound a burst starts a goroutine for each piece of work that
// finds none waiting: a broadcast to 10,000 parked connections started
// thousands of writers at once, each with a stack of several KiB, which the
// runtime keeps as free heap long after they ended (resident memory grew by
// 4–5 KiB per connection after one such event). A socket write to a client
// that reads does not block, so a few hundred goroutines keep both cores
// busy. One that does block (a client that stopped reading, a close
// handshake waiting for its answer) must not hold up the rest: a check runs
// every stallAfter while work is queued, and when none was taken since its
// last run every goroutine is stuck, and one more is started beyond the
// bound to take the oldest (so within two stallAfter); it ends once the
// queue is empty.
func (p *Pool) Bound(maxRunning int, stallAfter time.Duration) {
	p.maxRunning, p.stallAfter = maxRunning, stallAfter
}

// Go runs f on a waiting goroutine, or on a new one, or, when the pool is
// bounded and at its bound, queues it. It never blocks.
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
	if p.maxRunning > 0 && p.running >= p.maxRunning {
		p.queue = append(p.queue, f)
		p.armStallLocked()
		p.mu.Unlock()
		return
	}
	p.running++
	p.mu.Unlock()
	p.spawned.Add(1)
	go p.serve(f)
}

func (p *Pool) serve(f func()) {
	w := &poolWorker{work: make(chan func(), 1)}
	for f != nil {
		f()
		f = p.next(w)
	}
}

// next is a goroutine's next work once its own is done: the oldest queued,
// or what it is handed after waiting; nil when it is to end.
func (p *Pool) next(w *poolWorker) func() {
	p.mu.Lock()
	if len(p.queue) > 0 {
		f := p.popLocked()
		p.mu.Unlock()
		return f
	}
	if len(p.idle) >= p.maxIdle || p.maxRunning > 0 && p.running > p.maxRunning {
		p.running--
		p.mu.Unlock()
		return nil
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
	p.mu.Unlock()
	return <-w.work
}

// popLocked takes the oldest queued work. The caller holds mu.
func (p *Pool) popLocked() func() {
	f := p.queue[0]
	p.queue[0] = nil
	p.queue = p.queue[1:]
	if len(p.queue) == 0 {
		p.queue = nil // the next burst starts a fresh array; this one goes
	}
	p.taken++
	return f
}

// armStallLocked starts the stall check unless it runs. The caller holds mu.
func (p *Pool) armStallLocked() {
	if p.stallArmed {
		return
	}
	p.stallArmed, p.stallMark = true, p.taken
	if p.stall == nil {
		p.stall = time.AfterFunc(p.stallAfter, p.checkStall)
	} else {
		p.stall.Reset(p.stallAfter)
	}
}

// checkStall runs every stallAfter while work is queued: when none was
// taken since the last run, it starts one more goroutine with the oldest.
func (p *Pool) checkStall() {
	p.mu.Lock()
	if len(p.queue) == 0 {
		p.stallArmed = false
		p.mu.Unlock()
		return
	}
	var f func()
	if p.taken == p.stallMark {
		f = p.popLocked()
		p.running++
	}
	p.stallMark = p.taken
	p.stall.Reset(p.stallAfter)
	p.mu.Unlock()
	if f != nil {
		p.spawned.Add(1)
		go p.serve(f)
	}
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
	p.running -= n
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
