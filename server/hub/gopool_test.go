package hub

import (
	"sync"
	"testing"
	"time"
)

// A goroutine whose work ended runs the next work started while it waits,
// at most maxIdle goroutines wait, and they are gone after linger.
func TestGoPoolReusesAndLetsGo(t *testing.T) {
	p := newGoPool(2, 200*time.Millisecond)
	var wg sync.WaitGroup

	// One piece of work at a time: the first goroutine runs them all.
	for range 5 {
		wg.Add(1)
		p.Go(func() { wg.Done() })
		wg.Wait()
		waitUntil(t, "a goroutine waiting", func() bool { return p.waiting() == 1 })
	}
	if n := p.spawned.Load(); n != 1 {
		t.Fatalf("sequential tasks started %d goroutines, want 1 reused", n)
	}

	// A burst of work that blocks: each needs its own goroutine; afterwards
	// only maxIdle of them wait.
	release := make(chan struct{})
	for range 10 {
		wg.Add(1)
		p.Go(func() { defer wg.Done(); <-release })
	}
	close(release)
	wg.Wait()
	if n := p.spawned.Load(); n < 10 {
		t.Fatalf("10 blocking tasks ran on %d goroutines", n)
	}
	waitUntil(t, "two goroutines waiting", func() bool { return p.waiting() == 2 })
	time.Sleep(50 * time.Millisecond)
	if n := p.waiting(); n != 2 {
		t.Fatalf("%d goroutines waiting, want maxIdle 2", n)
	}
	waitUntil(t, "the waiting goroutines gone after linger", func() bool { return p.waiting() == 0 })
}

// Work goes to the goroutine that finished last, so under light traffic the
// others reach linger and end while that one keeps serving.
func TestGoPoolLetsTheLongestWaitingGo(t *testing.T) {
	p := newGoPool(4, 500*time.Millisecond)
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 3 {
		wg.Add(1)
		p.Go(func() { defer wg.Done(); <-release })
	}
	close(release)
	wg.Wait()
	waitUntil(t, "three goroutines waiting", func() bool { return p.waiting() == 3 })

	// One piece of work at a time, more often than linger, for three lingers.
	for range 60 {
		wg.Add(1)
		p.Go(func() { wg.Done() })
		wg.Wait()
		time.Sleep(10 * time.Millisecond)
	}
	waitUntil(t, "one goroutine waiting", func() bool { return p.waiting() == 1 })
	if n := p.spawned.Load(); n != 3 {
		t.Fatalf("%d goroutines started, want the 3 of the burst", n)
	}
	waitUntil(t, "none waiting after linger", func() bool { return p.waiting() == 0 })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
