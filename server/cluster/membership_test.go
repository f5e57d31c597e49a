package cluster

import (
	"testing"

	"github.com/heraldrt/herald/server/internal/testredis"
)

// A node's record lock is released by its unlock, at once: the next lock
// of it is taken, not refused as held.
func TestUnlockReleasesTheRecordLock(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "locks:", "n1")
	for i := range 2 {
		unlock, err := n.c.lock(t.Context(), "other", false)
		if err != nil {
			t.Fatalf("lock %d: %v", i+1, err)
		}
		if _, err := n.c.lock(t.Context(), "other", false); err != errLocked {
			t.Fatalf("a lock held: %v, want errLocked", err)
		}
		unlock()
	}
}
