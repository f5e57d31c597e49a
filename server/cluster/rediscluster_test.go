package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
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

// The shards over a Redis Cluster: each one's keys in one slot (keySlot
// agrees with Redis), the slots in equal parts of the range, so the
// sixteen shards spread over three primaries five or six each; a node's
// membership of every shard is on the primary of its slot, and so is the
// readiness check of each shard.
func TestShardsSpreadOverARedisCluster(t *testing.T) {
	rc := testredis.StartCluster(t, 3)
	ns := cluster(t, rc.Nodes[0], 1, withURL(rc.URL()))
	c := ns[0].c.(*router)
	if len(c.members) != ClusterShards {
		t.Fatalf("%d shards, want %d", len(c.members), ClusterShards)
	}
	rdb := c.shared.(*redis.ClusterClient)
	perPrimary := map[string]int{}
	for i, s := range c.members {
		want, err := rdb.ClusterKeySlot(t.Context(), s.key("node:", c.ID())).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisconn.KeySlot(strings.Trim(s.p[len(c.p):], "{}:")); int64(got) != want {
			t.Fatalf("shard %d (%s): keySlot %d, Redis says %d", i+1, s.p, got, want)
		}
		if lo, hi := int64(i*redisconn.ClusterSlots/ClusterShards), int64((i+1)*redisconn.ClusterSlots/ClusterShards); want < lo || want >= hi {
			t.Fatalf("shard %d's slot %d is outside [%d, %d)", i+1, want, lo, hi)
		}
		primary, err := rdb.MasterForKey(t.Context(), s.key("node:", c.ID()))
		if err != nil {
			t.Fatal(err)
		}
		// The heartbeat is on the primary of the shard's slot, as plain
		// (not cluster-routed) EXISTS there shows.
		if n, err := primary.Exists(t.Context(), s.key("node:", c.ID())).Result(); err != nil || n != 1 {
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
		if got := redisconn.KeySlot(k); int64(got) != want {
			t.Fatalf("redisconn.KeySlot(%q) %d, Redis says %d", k, got, want)
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
	for i, s := range c.members {
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

// A Redis that is not a Redis Cluster, or one that does not serve every
// slot, stops the start, naming the setting and never printing the
// password; an unreachable one does not (the node joins when it answers).
// (The forms of a redis-cluster:// URL are redisconn's TestParseEveryForm.)
func TestBadRedisClusterSettingsStopTheStart(t *testing.T) {
	plain := testredis.Start(t)
	unjoined := testredis.StartClusterNode(t)
	for _, url := range []string{
		"redis-cluster://:s3cret@" + plain.Addr(),
		"redis-cluster://:s3cret@" + unjoined.Addr(),
		"redis-cluster://" + unjoined.Addr(),
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

// fakeClusterNode is a server speaking RESP that answers CLUSTER INFO with
// info, AUTH with OK and every other command with an error, as Redis
// answers a command it does not know: for the states a Redis Cluster's node reports that a test
// cannot easily put real ones in.
func fakeClusterNode(t testing.TB, info string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					args, err := readCommand(r)
					if err != nil {
						return
					}
					reply := "-ERR unknown command\r\n"
					switch {
					case len(args) == 2 && strings.EqualFold(args[0], "cluster") && strings.EqualFold(args[1], "info"):
						reply = fmt.Sprintf("$%d\r\n%s\r\n", len(info), info)
					case len(args) > 0 && strings.EqualFold(args[0], "auth"):
						reply = "+OK\r\n"
					}
					if _, err := conn.Write([]byte(reply)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// readCommand reads one command a client sends: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		if line, err = r.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// clusterInfo is a CLUSTER INFO reply of a node that says state of the
// cluster, assigned slots bound to a node and failed of them in FAIL.
func clusterInfo(state string, assigned, failed int) string {
	return fmt.Sprintf("cluster_state:%s\r\ncluster_slots_assigned:%d\r\ncluster_slots_ok:%d\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:%d\r\ncluster_known_nodes:3\r\ncluster_size:3\r\n",
		state, assigned, assigned-failed, failed)
}

// The start stops unless the Redis Cluster both says cluster_state:ok and
// serves every slot: a node that serves part of the slots and says ok
// (cluster-require-full-coverage no) stops it, and so does one that has
// every slot bound but says fail (as the others say with a primary down).
// The first seed that answers decides, after those that do not.
func TestARedisClusterServingPartOfTheSlotsStopsTheStart(t *testing.T) {
	half := testredis.StartClusterNode(t)
	rdb := redis.NewClient(&redis.Options{Addr: half.Addr()})
	defer rdb.Close()
	for _, cmd := range [][]any{
		{"CONFIG", "SET", "cluster-require-full-coverage", "no"},
		{"CLUSTER", "ADDSLOTSRANGE", 0, redisconn.ClusterSlots/2 - 1},
	} {
		if err := rdb.Do(t.Context(), cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(t, "the half-served Redis Cluster says it is ok", func() bool {
		return strings.Contains(rdb.ClusterInfo(t.Context()).Val(), "cluster_state:ok")
	})
	down := testredis.StartClusterNode(t)
	down.Stop()
	failing := fakeClusterNode(t, clusterInfo("fail", redisconn.ClusterSlots, redisconn.ClusterSlots/3))
	for _, c := range []struct {
		seeds, want string // want: what the error says; empty, accepted
	}{
		{half.Addr(), "serves 8192 of the 16384 slots (cluster_state:ok)"},
		{failing, "serves 16384 of the 16384 slots (cluster_state:fail)"},
		{down.Addr() + "," + failing, "serves 16384 of the 16384 slots (cluster_state:fail)"},
		{fakeClusterNode(t, clusterInfo("ok", redisconn.ClusterSlots, 0)) + "," + failing, ""},
	} {
		c1, err := New(zap.NewNop(), hub.New(zap.NewNop()), Options{URL: "redis-cluster://:s3cret@" + c.seeds})
		switch {
		case c.want == "" && err != nil:
			t.Fatalf("%s: %v", c.seeds, err)
		case c.want == "":
			c1.Close()
		case err == nil:
			c1.Close()
			t.Fatalf("%s: accepted, want %q", c.seeds, c.want)
		case !strings.HasPrefix(err.Error(), "HERALD_REDIS_URL") || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret"):
			t.Fatalf("%s: %v, want it to say %q", c.seeds, err, c.want)
		}
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
	wait.Until(t, "every shard's reader listening", func() bool {
		var listening int
		for _, rs := range rc.Nodes {
			listening += listeners(t, rs)
		}
		return n.c.Stats().Up && listening == ClusterShards
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
			lo, hi := i*redisconn.ClusterSlots/n, (i+1)*redisconn.ClusterSlots/n
			for j := 0; j <= k; j++ {
				slot := int(redisconn.KeySlot(fmt.Sprintf("s%d.%d", i, j)))
				if in := slot >= lo && slot < hi; in != (j == k) {
					t.Fatalf("%d shards: shard %d's tag is %q, but s%d.%d's slot %d is in [%d, %d): %v", n, i, tag, i, j, slot, lo, hi, in)
				}
			}
		}
	}
}
