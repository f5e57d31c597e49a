package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/cluster/redisconn"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// A node takes another Redis server for one only when it is one (its
// run_id differs): not at its first connection, not when it connects again
// to the same server, not for the Sentinels a redis-sentinel:// URL asks
// first; and once when the server behind the address restarts.
func TestAnotherRedisServerIsNoticedWhenItIsOne(t *testing.T) {
	const another = "another Redis server answers than before"
	start := func(t *testing.T, rs *testredis.Server, tune ...func(*Options)) (*node, func() int) {
		core, logs := observer.New(zapcore.WarnLevel)
		n := startLoggedNode(t, rs, fmt.Sprintf("w%d:", time.Now().UnixNano()), "a", zap.New(core), tune...)
		wait.Until(t, "the node is in the cluster", func() bool { return n.c.Stats().Up })
		return n, func() int { return logs.FilterMessageSnippet(another).Len() }
	}
	publish := func(t *testing.T, n *node) {
		t.Helper()
		wait.Until(t, "a publish goes through", func() bool {
			return n.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "e", Data: "{}"}) == nil
		})
	}

	t.Run("one Redis", func(t *testing.T) {
		rs := testredis.Start(t)
		n, noticed := start(t, rs)
		publish(t, n)
		// Every connection of the node is closed: it connects again, to
		// the same server.
		// (Counted on one connection of the test's, which the kill skips.)
		rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), PoolSize: 1})
		defer rdb.Close()
		connections := func() string {
			return redisconn.InfoValue(rdb.Info(t.Context(), "stats").Val(), "total_connections_received")
		}
		before := connections()
		if err := rdb.ClientKillByFilter(t.Context(), "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
			t.Fatal(err)
		}
		wait.Until(t, "the node connects again", func() bool { return connections() != before })
		publish(t, n)
		if got := noticed(); got != 0 {
			t.Fatalf("the node took the same server for another %d times", got)
		}
		rs.Restart()
		wait.Until(t, "the node notices the restart", func() bool { return noticed() > 0 })
		publish(t, n)
		if got := noticed(); got != 1 {
			t.Fatalf("one restart noticed %d times", got)
		}
	})

	t.Run("Sentinel", func(t *testing.T) {
		primary, sentinel := sentinelSetup(t)
		n, noticed := start(t, primary, withURL("redis-sentinel://"+sentinel.Addr()+"/herald"))
		publish(t, n)
		if got := noticed(); got != 0 {
			t.Fatalf("the node took its Sentinel or primary for another server %d times", got)
		}
	})
}

// A Redis that refuses INFO to the node's user (an ACL of -info) still
// lets the node join and publish: the server watch, which asks INFO of
// each new connection, is skipped rather than failing the connection.
func TestARedisRefusingInfoLetsTheNodeJoin(t *testing.T) {
	rs := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.Do(t.Context(), "ACL", "SETUSER", "herald", "on", ">s3cret", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	url := "redis://herald:s3cret@" + rs.Addr() + "/0"
	refused := commandStats(t, rs, "info", "rejected_calls")
	ns := cluster(t, rs, 2, withURL(url))
	wait.Until(t, "both nodes in the cluster", func() bool { return ns[0].c.Stats().Up && ns[1].c.Stats().Up })
	sub := ns[1].connect("app")
	sub.subscribe("news", nil)
	sub.wait("news", "pusher_internal:subscription_succeeded")
	if err := ns[0].hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "hello", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	sub.wait("news", "hello")
	// The nodes did ask, and were refused.
	if got := commandStats(t, rs, "info", "rejected_calls"); got <= refused {
		t.Fatalf("INFO refused %d times, want the nodes' connections refused it", got-refused)
	}
}
