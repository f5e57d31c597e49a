package cluster

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/eventlog/eventlogtest"
	"github.com/heraldrt/herald/server/internal/testredis"
)

// redisClient is a client of a fresh Redis, both gone when t ends.
func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	rs := testredis.Start(t)
	opts, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func TestEventLogStore(t *testing.T) {
	rdb := redisClient(t)
	var n atomic.Int64
	eventlogtest.Run(t, func(t *testing.T, l eventlog.Limits) eventlog.Store {
		// A prefix per test: one Redis serves them all.
		return NewEventLogStore(func(string) redis.Cmdable { return rdb }, fmt.Sprintf("hist-test-%d:", n.Add(1)), l)
	})
}

// A channel's stream that outlived the app's counts (they expired first,
// under a TTL shortened since) is dropped at the next append instead of
// held uncounted, or refusing the append when its ids ran ahead.
func TestEventLogStoreDropsAStreamItsCountsLost(t *testing.T) {
	rdb := redisClient(t)
	s := NewEventLogStore(func(string) redis.Cmdable { return rdb }, "orphan:", eventlog.Limits{})
	p := eventlog.Policy{Events: 10, TTL: time.Hour}
	now := time.Now()
	later := []eventlog.Entry{{Channel: "news", Name: "ev", Data: "ahead"}}
	if err := s.Append(t.Context(), "app", p, later, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(t.Context(), s.key("app"), s.key("app")+":lru", s.key("app")+":sizes").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(t.Context(), "app", p, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "now"}}, now); err != nil {
		t.Fatalf("append after the counts went: %v", err)
	}
	page, err := s.Read(t.Context(), "app", "news", p, eventlog.Query{}, now)
	if err != nil || len(page.Events) != 1 || page.Events[0].Data != "now" {
		t.Fatalf("read %+v, %v; want only the new event", page, err)
	}
	if st := s.Stats(); len(st.Apps) != 1 || st.Apps[0].Events != 1 {
		t.Fatalf("held %+v, want 1 event", st.Apps)
	}
}

// The cluster's own store of channel histories passes the stores' suite on
// each topology: on three shards each app's history is on its shard, and on
// a Redis Cluster its keys and script share the app's slot.
func TestClusterEventLogOnEachTopology(t *testing.T) {
	onEachTopology(t, func(t *testing.T, start startCluster) {
		eventlogtest.Run(t, func(t *testing.T, l eventlog.Limits) eventlog.Store {
			return start(1)[0].c.EventLog(l)
		})
	})
}
