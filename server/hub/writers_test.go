package hub

import (
	"sync"
	"testing"
	"time"
)

// A writer whose loop ended runs the next loop started while it waits, at
// most maxIdle writers wait, and they are gone after linger.
func TestWriterPoolReusesAndLetsGo(t *testing.T) {
	p := newWriterPool(2, 200*time.Millisecond)
	var wg sync.WaitGroup

	// One loop at a time: the first writer runs them all.
	for range 5 {
		wg.Add(1)
		p.start(func() { wg.Done() })
		wg.Wait()
		waitUntil(t, "a writer waiting", func() bool { return p.idle.Load() == 1 })
	}
	if n := p.spawned.Load(); n != 1 {
		t.Fatalf("sequential loops started %d writers, want 1 reused", n)
	}

	// A burst of loops that block: each needs its own writer; afterwards
	// only maxIdle of them wait.
	release := make(chan struct{})
	for range 10 {
		wg.Add(1)
		p.start(func() { defer wg.Done(); <-release })
	}
	close(release)
	wg.Wait()
	if n := p.spawned.Load(); n < 10 {
		t.Fatalf("10 blocking loops ran on %d writers", n)
	}
	waitUntil(t, "two writers waiting", func() bool { return p.idle.Load() == 2 })
	time.Sleep(50 * time.Millisecond)
	if n := p.idle.Load(); n != 2 {
		t.Fatalf("%d writers waiting, want maxIdle 2", n)
	}
	waitUntil(t, "the waiting writers gone after linger", func() bool { return p.idle.Load() == 0 })
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
