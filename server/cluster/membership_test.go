package cluster

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
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

// A heartbeat that finds the node's record and the cluster's generation as
// the node left them asks for no rebuild: over many heartbeats the node
// rebuilds its record only the once it joined.
func TestSteadyHeartbeatsRebuildNothing(t *testing.T) {
	rs := testredis.Start(t)
	// A record that outlives any stall of a busy machine: it cannot expire
	// between two heartbeats here.
	n := startNode(t, rs, "steady:", "n1", func(o *Options) { o.Heartbeat, o.NodeTTL = 20*time.Millisecond, time.Minute })
	wait.Until(t, "the node joined", func() bool { return n.c.Stats().Up && n.c.Stats().Resyncs == 1 })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	// Each heartbeat renews the record's time to live: count renewals.
	beats, last := 0, time.Duration(0)
	wait.Until(t, "ten heartbeats", func() bool {
		ttl, err := rdb.PTTL(t.Context(), "steady:node:n1").Result()
		if err == nil && ttl > last {
			beats++
		}
		last = ttl
		return beats > 10
	})
	if got := n.c.Stats().Resyncs; got != 1 {
		t.Fatalf("%d rebuilds over ten steady heartbeats, want the one at the start", got)
	}
}

// A Redis that answers reads but refuses writes (out of memory) is an
// outage: the node's heartbeat cannot be renewed, so the node is not up
// until Redis takes writes again.
func TestRedisRefusingWritesIsAnOutage(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "oom:", "n1")
	wait.Until(t, "the node is up", func() bool { return n.c.Stats().Up })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := rdb.ConfigSet(t.Context(), kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(t, "the node is down", func() bool { return !n.c.Stats().Up })
	if err := rdb.ConfigSet(t.Context(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the node is up again", func() bool { return n.c.Stats().Up })
}
