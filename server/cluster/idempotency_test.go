package cluster

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/idempotency/idempotencytest"
)

// The node's store of Idempotency-Key headers, on each topology: on a
// list of shards it is the first shard's, on a Redis Cluster each app's
// keys are where their hash tag puts them.
func TestIdempotencyStore(t *testing.T) {
	onEachTopology(t, func(t *testing.T, cluster startCluster) {
		c := cluster(1)[0].c
		var n atomic.Int64
		idempotencytest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
			s := c.Idempotency(o)
			s.prefix += fmt.Sprintf("idem-test-%d:", n.Add(1)) // one Redis serves every test
			return s
		})
	})
}

// In Redis, as Redis counts time: a claimed key expires after the lock
// (1 min), a completed one after the TTL (24 h) from its first request,
// the app's index and sizes with its newest key.
func TestIdempotencyStoreExpiresInRedis(t *testing.T) {
	rdb := redisClient(t)
	s := NewIdempotencyStore(rdb, "idem-ttl:", idempotency.Options{})
	g := idempotency.NewGuard(s, idempotency.Options{})
	ctx := t.Context()
	fp := idempotency.Sum([]byte("body"))
	checkTTL := func(key string, want time.Duration) {
		t.Helper()
		ttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil || ttl > want || ttl < want-time.Minute/2 {
			t.Fatalf("%s expires in %v (%v), want %v", key, ttl, err, want)
		}
	}
	out, c, _, err := g.Begin(ctx, "app", "k", fp)
	if err != nil || out != idempotency.Proceed {
		t.Fatalf("Begin: %v, %v", out, err)
	}
	checkTTL(s.entry("app", "k"), idempotency.DefaultLock)
	if err := g.Finish(ctx, c, idempotency.Response{Status: 200, Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{s.entry("app", "k"), s.index("app"), s.sizes("app")} {
		checkTTL(key, idempotency.DefaultTTL)
	}
}
