package cluster

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/idempotency/idempotencytest"
)

// The node's store of Idempotency-Key headers, on each topology: over
// shards and a Redis Cluster each scope's keys are on its shard.
func TestIdempotencyStore(t *testing.T) {
	onEachTopology(t, func(t *testing.T, cluster startCluster) {
		c := cluster(1)[0].c
		var n atomic.Int64
		idempotencytest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
			s := c.Idempotency(o)
			// One Redis serves every test: each its own keys, where the
			// cluster's store puts them (over shards, on the scope's shard).
			place, own := s.place, fmt.Sprintf("idem-test-%d:", n.Add(1))
			s.place = func(scope string) (redis.Scripter, string) {
				rdb, prefix := place(scope)
				return rdb, prefix + own
			}
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

// Over shards a scope's (an app's) Idempotency-Key headers are on the
// shard its id hashes to, as a channel's keys are on the channel's: the
// scopes spread over the shards, each whole on one.
func TestIdempotencyKeysAreOnTheirScopesShard(t *testing.T) {
	servers, url := shardList(t, 3)
	n := cluster(t, servers[0], 1, withURL(url))[0]
	s := n.c.Idempotency(idempotency.Options{})
	ms := members(n.c)
	on := map[int]bool{}
	for i := 0; len(on) < len(ms); i++ {
		scope := fmt.Sprint("app-", i)
		k := shardOf(scope, "", len(ms))
		if on[k] {
			continue
		}
		on[k] = true
		now := time.Now()
		c := idempotency.Claim{Scope: scope, Key: "k", Token: "t", Expires: now.Add(time.Hour)}
		if _, err := s.Begin(t.Context(), c, idempotency.Fingerprint{}, now); err != nil {
			t.Fatal(err)
		}
		for j, m := range ms {
			got, err := m.rdb.Exists(t.Context(), m.p+"idem:{"+scope+"}").Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(0); j == k {
				want = 1
				if got != want {
					t.Fatalf("%s: not on its shard %d", scope, k)
				}
			} else if got != want {
				t.Fatalf("%s (shard %d) is on shard %d too", scope, k, j)
			}
		}
	}
}
