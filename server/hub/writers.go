package hub

import (
	"sync/atomic"
	"time"
)

// writerPool runs connections' write loops (each a func that returns when
// the connection has nothing more to write) on reused goroutines. A fresh
// goroutine starts with a small stack and grows it (copying it) on its way
// down the WebSocket write path, which costs microseconds per delivery; a
// goroutine that has written before has the stack already. A goroutine whose
// write loop ends waits a while for another connection to write to; at most
// maxIdle wait, so a burst leaves no crowd behind, and none after linger.
type writerPool struct {
	work    chan func() // unbuffered: a send succeeds only to a waiting writer
	idle    atomic.Int32
	spawned atomic.Int64 // writers started, for tests
	maxIdle int32
	linger  time.Duration
}

func newWriterPool(maxIdle int, linger time.Duration) *writerPool {
	return &writerPool{work: make(chan func()), maxIdle: int32(maxIdle), linger: linger}
}

// start runs loop on a waiting writer, or on a new one.
func (p *writerPool) start(loop func()) {
	select {
	case p.work <- loop:
	default:
		p.spawned.Add(1)
		go p.run(loop)
	}
}

func (p *writerPool) run(loop func()) {
	var t *time.Timer
	for {
		loop()
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
		case loop = <-p.work:
			p.idle.Add(-1)
		case <-t.C:
			p.idle.Add(-1)
			return
		}
	}
}

// The writer pool's bounds: the goroutines a busy server reuses, gone a
// second after traffic stops (an idle connection holds none).
const (
	maxIdleWriters = 1024
	writerLinger   = time.Second
)
