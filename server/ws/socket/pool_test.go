package socket

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/heraldrt/herald/server/internal/wait"
)

// Each waiting goroutine is let go once it has waited linger, counted from
// when it began to wait, not a linger after the one before it went. Fake
// time (testing/synctest): the instants are exact.
func TestGoPoolLetsEachGoAfterItsOwnLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const linger = time.Second
		p := NewPool(4, linger)
		first, second := make(chan struct{}), make(chan struct{})
		p.Go(func() { <-first })
		p.Go(func() { <-second })
		close(first)
		synctest.Wait()
		time.Sleep(linger / 2)
		close(second) // waits from linger/2 on
		synctest.Wait()
		if n := p.waiting(); n != 2 {
			t.Fatalf("%d goroutines waiting, want 2", n)
		}
		time.Sleep(linger * 3 / 4) // 1.25 linger
		synctest.Wait()
		if n := p.waiting(); n != 1 {
			t.Fatalf("at 1.25 linger: %d goroutines waiting, want 1 (the first let go)", n)
		}
		time.Sleep(linger / 2) // 1.75 linger: the second has waited 1.25 linger
		synctest.Wait()
		if n := p.waiting(); n != 0 {
			t.Fatalf("at 1.75 linger: %d goroutines waiting, want 0", n)
		}
	})
}

// A goroutine whose work ended runs the next work started while it waits,
// at most maxIdle goroutines wait, and they are gone after linger.
func TestGoPoolReusesAndLetsGo(t *testing.T) {
	// Fake time (testing/synctest): a loaded machine cannot stretch the gap
	// between two pieces of work past linger.
	synctest.Test(t, func(t *testing.T) {
		const linger = 200 * time.Millisecond
		p := NewPool(2, linger)
		var wg sync.WaitGroup

		// One piece of work at a time: the first goroutine runs them all.
		for range 5 {
			wg.Add(1)
			p.Go(func() { wg.Done() })
			wg.Wait()
			synctest.Wait()
			if n := p.waiting(); n != 1 {
				t.Fatalf("%d goroutines waiting after a piece of work, want 1", n)
			}
		}
		if n := p.spawned.Load(); n != 1 {
			t.Fatalf("sequential tasks started %d goroutines, want 1 reused", n)
		}

		// A burst of work that blocks: each needs its own goroutine;
		// afterwards only maxIdle of them wait, until linger.
		runBlockingBurst(p, 10)
		if n := p.spawned.Load(); n < 10 {
			t.Fatalf("10 blocking tasks ran on %d goroutines", n)
		}
		synctest.Wait()
		time.Sleep(linger - time.Millisecond)
		synctest.Wait()
		if n := p.waiting(); n != 2 {
			t.Fatalf("%d goroutines waiting just before linger, want maxIdle 2", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := p.waiting(); n != 0 {
			t.Fatalf("%d goroutines waiting after linger, want 0", n)
		}
	})
}

// Work goes to the goroutine that finished last, so under light traffic the
// others reach linger and end while that one keeps serving.
func TestGoPoolLetsTheLongestWaitingGo(t *testing.T) {
	p := NewPool(4, 500*time.Millisecond)
	runBlockingBurst(p, 3)
	wait.Until(t, "three goroutines waiting", func() bool { return p.waiting() == 3 })

	// One piece of work at a time, more often than linger, for over a linger.
	var wg sync.WaitGroup
	for range 60 {
		wg.Add(1)
		p.Go(func() { wg.Done() })
		wg.Wait()
		time.Sleep(10 * time.Millisecond)
	}
	wait.Until(t, "one goroutine waiting", func() bool { return p.waiting() == 1 })
	if n := p.spawned.Load(); n != 3 {
		t.Fatalf("%d goroutines started, want the 3 of the burst", n)
	}
	wait.Until(t, "none waiting after linger", func() bool { return p.waiting() == 0 })
}

// runBlockingBurst runs n pieces of work that all wait until the last has
// started, so each needs a goroutine of its own, and returns when all ended.
func runBlockingBurst(p *Pool, n int) {
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	release := make(chan struct{})
	for range n {
		p.Go(func() { defer done.Done(); started.Done(); <-release })
	}
	started.Wait()
	close(release)
	done.Wait()
}

// A bounded pool runs a burst on at most its bound of goroutines, the rest
// queued; when all of them block, one more starts within two stallAfter to
// take the queued work, and ends once the queue is empty.
func TestBoundedPoolQueuesAndGetsPastStuckWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stall = 2 * time.Millisecond
		p := NewPool(8, time.Second)
		p.Bound(2, stall)

		// A burst of 100 quick pieces: two goroutines do them all.
		var wg sync.WaitGroup
		wg.Add(100)
		for range 100 {
			p.Go(func() { wg.Done() })
		}
		wg.Wait()
		if n := p.spawned.Load(); n != 2 {
			t.Fatalf("a burst of 100 on a pool bound to 2 started %d goroutines", n)
		}

		// Both goroutines stuck: queued work waits stallAfter, then runs on
		// a third.
		release := make(chan struct{})
		var stuck sync.WaitGroup
		stuck.Add(2)
		for range 2 {
			p.Go(func() { stuck.Done(); <-release })
		}
		stuck.Wait()
		ran := make(chan time.Time, 1)
		queuedAt := time.Now()
		p.Go(func() { ran <- time.Now() })
		synctest.Wait()
		if len(ran) != 0 {
			t.Fatal("queued work ran while every goroutine was busy, before stallAfter")
		}
		// The check runs every stallAfter; it sees no work taken at its
		// first or second run after the work was queued.
		if d := (<-ran).Sub(queuedAt); d < stall || d > 2*stall {
			t.Fatalf("queued work ran after %v, want between stallAfter %v and twice that", d, stall)
		}
		if n := p.spawned.Load(); n != 3 {
			t.Fatalf("%d goroutines started, want 3 (one past the bound)", n)
		}
		synctest.Wait()
		if n := p.waiting(); n != 0 {
			t.Fatalf("%d goroutines waiting; the one past the bound must end, the stuck ones are busy", n)
		}
		close(release)
		synctest.Wait()
		if n := p.waiting(); n != 2 {
			t.Fatalf("%d goroutines waiting once released, want the 2 of the bound", n)
		}
		time.Sleep(time.Second) // linger: they end
		synctest.Wait()
	})
}
