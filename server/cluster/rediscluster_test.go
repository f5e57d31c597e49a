package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// The shards over a Redis Cluster: each one's keys in one slot (keySlot
// agrees with Redis), the slots in equal parts of the range, so the
// sixteen shards spread over three primaries five or six each; a node's
// membership of every shard is on the primary of its slot, and so is the
// readiness check of each shard.
func TestShardsSpreadOverARedisCluster(t *testing.T) {
	rc := testredis.StartCluster(t, 3)
	ns := cluster(t, rc.Nodes[0], 1, withURL(rc.URL()))
	c := ns[0].c
	if len(c.shards) != ClusterShards {
		t.Fatalf("%d shards, want %d", len(c.shards), ClusterShards)
	}
	rdb := c.rdb.(*redis.ClusterClient)
	perPrimary := map[string]int{}
	for i, s := range c.shards {
		want, err := rdb.ClusterKeySlot(t.Context(), s.key("node:", c.id)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(strings.Trim(s.p[len(c.p):], "{}:")); int64(got) != want {
			t.Fatalf("shard %d (%s): keySlot %d, Redis says %d", i+1, s.p, got, want)
		}
		if lo, hi := int64(i*clusterSlots/ClusterShards), int64((i+1)*clusterSlots/ClusterShards); want < lo || want >= hi {
			t.Fatalf("shard %d's slot %d is outside [%d, %d)", i+1, want, lo, hi)
		}
		primary, err := rdb.MasterForKey(t.Context(), s.key("node:", c.id))
		if err != nil {
			t.Fatal(err)
		}
		// The heartbeat is on the primary of the shard's slot, as plain
		// (not cluster-routed) EXISTS there shows.
		if n, err := primary.Exists(t.Context(), s.key("node:", c.id)).Result(); err != nil || n != 1 {
			t.Fatalf("shard %d: the heartbeat on %s: %d %v", i+1, primary.Options().Addr, n, err)
		}
		perPrimary[primary.Options().Addr]++
	}
	if len(perPrimary) != 3 {
		t.Fatalf("shards per primary %v, want all three used", perPrimary)
	}
	for addr, n := range perPrimary {
		if n < 5 || n > 6 {
			t.Fatalf("shards per primary %v: %s holds %d", perPrimary, addr, n)
		}
	}
	for _, k := range []string{"", "a", "herald", "123456789", "s0.0", "{x}"} {
		want, err := rdb.ClusterKeySlot(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if k == "{x}" {
			k = "x"
		}
		if got := keySlot(k); int64(got) != want {
			t.Fatalf("keySlot(%q) %d, Redis says %d", k, got, want)
		}
	}

	// Readiness asks each shard's own primary: with one primary gone, the
	// shards it served, and only they, are not ready.
	ctx := t.Context()
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	gone := rc.Nodes[1].Addr()
	var want []string
	for i, s := range c.shards {
		if primary, err := rdb.MasterForKey(ctx, s.p); err == nil && primary.Options().Addr == gone {
			want = append(want, fmt.Sprintf("shard %d:", i+1))
		}
	}
	rc.Nodes[1].Stop()
	err := c.Ready(ctx)
	if err == nil {
		t.Fatal("ready with a primary gone")
	}
	var got []string
	for _, line := range strings.Split(err.Error(), "\n") {
		got = append(got, line[:strings.IndexByte(line, ':')+1])
	}
	if !slices.Equal(got, want) {
		t.Fatalf("not ready: %v\nwant the shards of %s: %v", err, gone, want)
	}
}

// A malformed redis-cluster:// URL, one mixed with others, a Redis that is
// not a Redis Cluster or one that does not serve every slot stop the start,
// naming the setting and never printing the password; an unreachable one
// does not (the node joins when it answers).
func TestBadRedisClusterSettingsStopTheStart(t *testing.T) {
	plain := testredis.Start(t)
	unjoined := testredis.StartClusterNode(t)
	for _, url := range []string{
		"redis-cluster://:s3cret@" + plain.Addr(),
		"redis-cluster://:s3cret@" + unjoined.Addr(),
		"redis-cluster://" + unjoined.Addr(),
		"redis-cluster://:s3cret@127.0.0.1:6379,redis://:s3cret@127.0.0.1:6380",
		"redis://:s3cret@127.0.0.1:6380,redis-cluster://:s3cret@127.0.0.1:6379",
		"redis-cluster://:s3cret@127.0.0.1:6379/0",
		"redis-cluster://:s3cret@127.0.0.1:6379?x=1",
		"redis-cluster://:s3cret@127.0.0.1:6379,nohost",
		"redis-cluster://user:s3cret@127.0.0.1:6379",
		"redis-cluster://",
	} {
		_, err := New(zap.NewNop(), hub.New(zap.NewNop()), Options{URL: url})
		if err == nil {
			t.Fatalf("%s: accepted", url)
		}
		if !strings.HasPrefix(err.Error(), "HERALD_REDIS_URL") || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("%s: %v", url, err)
		}
		if url == "redis-cluster://"+unjoined.Addr() && !strings.Contains(err.Error(), "serves 0 of the 16384 slots") {
			t.Fatalf("%s: %v, want the slots named", url, err)
		}
	}
	down := testredis.StartClusterNode(t)
	down.Stop()
	c, err := New(zap.NewNop(), hub.New(zap.NewNop()), Options{URL: "redis-cluster://:s3cret@" + down.Addr()})
	if err != nil {
		t.Fatalf("an unreachable Redis Cluster: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// A node on a Redis Cluster names each of its shards in what it logs, 1 to
// ClusterShards; and it keeps a connection free for its calls while every
// shard's reader waits in a blocking read (here of two hours, with an
// hour's heartbeat), five or six to a Redis node.
func TestARedisClusterNodeNamesItsShardsAndHasRoomForCalls(t *testing.T) {
	rc := testredis.StartCluster(t, 3)
	core, logs := observer.New(zapcore.InfoLevel)
	n := startLoggedNode(t, nil, "rc:", "n1", zap.New(core), withURL(rc.URL()), func(o *Options) { o.Heartbeat, o.NodeTTL = time.Hour, 2*time.Hour })
	wait.Until(t, "every shard's reader in a blocking read", func() bool {
		var blocked int64
		for _, rs := range rc.Nodes {
			blocked += infoField(t, rs, "clients", "blocked_clients")
		}
		return n.c.Stats().Up && blocked == ClusterShards
	})
	if _, err := n.c.Channels("app", ""); err != nil {
		t.Fatalf("a query while every reader waits: %v", err)
	}
	want := make([]int, ClusterShards)
	for i := range want {
		want[i] = i + 1
	}
	if named := shardsNamed(logs); !slices.Equal(named, want) {
		t.Fatalf("shards named in the logs %v, want 1 to %d", named, ClusterShards)
	}
}

// The hosts of a seeds URL and its password, which is all before the
// last @ and may hold one; and the URL as it is shown, without it.
func TestSeedsURLsAndTheirPasswords(t *testing.T) {
	for _, c := range []struct{ hosts, password, shown string }{
		{":s3cret@h1:1,h2:2", "s3cret", "h1:1,h2:2"},
		{":p@ss@h1:1", "p@ss", "h1:1"},
		{"@h1:1", "", "h1:1"},
		{"h1:1", "", "h1:1"},
	} {
		password, addrs, err := seedHosts(c.hosts, "redis-cluster", "a host")
		if err != nil || password != c.password || strings.Join(addrs, ",") != c.shown {
			t.Errorf("seedHosts(%q): %q %v %v, want %q and %s", c.hosts, password, addrs, err, c.password, c.shown)
		}
		for _, scheme := range []string{"redis-cluster://", "redis-sentinel://"} {
			if got := redactURL(scheme + c.hosts + "/m"); got != scheme+c.shown+"/m" {
				t.Errorf("redactURL(%q) = %q, want %q", scheme+c.hosts+"/m", got, scheme+c.shown+"/m")
			}
		}
	}
}

// Shard i's hash tag over a Redis Cluster is the first "s<i>.<k>" (k from
// 0) whose slot is in the i-th of the equal parts of the slots. The tags
// are part of what Redis holds, so every version must choose the same.
func TestShardTagsAreTheFirstOfTheirPartOfTheSlots(t *testing.T) {
	for _, n := range []int{1, 3, ClusterShards} {
		for i, tag := range shardTags(n) {
			var k int
			if _, err := fmt.Sscanf(tag, "s"+strconv.Itoa(i)+".%d", &k); err != nil || k < 0 || tag != fmt.Sprintf("s%d.%d", i, k) {
				t.Fatalf("%d shards: shard %d's tag is %q, want s%d.<k>, k from 0", n, i, tag, i)
			}
			lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n
			for j := 0; j <= k; j++ {
				slot := int(keySlot(fmt.Sprintf("s%d.%d", i, j)))
				if in := slot >= lo && slot < hi; in != (j == k) {
					t.Fatalf("%d shards: shard %d's tag is %q, but s%d.%d's slot %d is in [%d, %d): %v", n, i, tag, i, j, slot, lo, hi, in)
				}
			}
		}
	}
}
