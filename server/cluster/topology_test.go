package cluster

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/cluster/redisconn"
	"github.com/heraldrt/herald/server/internal/testredis"
)

// topology is a kind of Redis a test cluster can run on.
type topology struct {
	name string
	// start starts a fresh one for t and returns its servers and its
	// HERALD_REDIS_URL.
	start func(t testing.TB) ([]*testredis.Server, string)
}

// topologies are the kinds of Redis the cluster's main tests run on: one
// Redis, three shards, and a Redis Cluster of three primaries (its sixteen
// shards over them).
var topologies = []topology{
	{"one Redis", func(t testing.TB) ([]*testredis.Server, string) {
		rs := testredis.Start(t)
		return []*testredis.Server{rs}, rs.URL()
	}},
	{"3 shards", func(t testing.TB) ([]*testredis.Server, string) {
		return shardList(t, 3)
	}},
	{"Redis Cluster", func(t testing.TB) ([]*testredis.Server, string) {
		rc := testredis.StartCluster(t, 3)
		return rc.Nodes, rc.URL()
	}},
}

// startCluster starts n nodes of a fresh cluster, as cluster does, on a
// topology's Redis.
type startCluster func(n int, tune ...func(*Options)) []*node

// onEachTopology runs test on each topology, as a subtest named after it,
// with a fresh Redis of that kind. The three run side by side: most of
// their time is spent waiting (a Redis Cluster takes two seconds to start),
// so the package's tests take half as long.
func onEachTopology(t *testing.T, test func(t *testing.T, cluster startCluster)) {
	for _, tp := range topologies {
		t.Run(tp.name, func(t *testing.T) {
			t.Parallel()
			servers, url := tp.start(t)
			test(t, func(n int, tune ...func(*Options)) []*node {
				return cluster(t, servers[0], n, append([]func(*Options){withURL(url)}, tune...)...)
			})
		})
	}
}

// setACL changes the rules of rs's default user, the one the nodes use.
func setACL(t *testing.T, rs *testredis.Server, rules ...string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	args := []any{"ACL", "SETUSER", "default"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := rdb.Do(t.Context(), args...).Err(); err != nil {
		t.Fatal(err)
	}
}

// commandStats is one figure (calls, rejected_calls …) of a command in
// rs's INFO commandstats, 0 when the command was never run.
func commandStats(t *testing.T, rs *testredis.Server, command, figure string) int64 {
	t.Helper()
	for _, line := range strings.Split(redisInfo(t, rs, "commandstats"), "\n") {
		fields, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(kv, figure+"="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

// redisInfo is a section of rs's INFO.
func redisInfo(tb testing.TB, rs *testredis.Server, section string) string {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	info, err := rdb.Info(tb.Context(), section).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return info
}

// infoField is a number of rs's INFO section (blocked_clients of
// "clients", total_commands_processed of "stats" …), 0 when it is not
// there.
func infoField(tb testing.TB, rs *testredis.Server, section, field string) int64 {
	tb.Helper()
	n, _ := strconv.ParseInt(redisconn.InfoValue(redisInfo(tb, rs, section), field), 10, 64)
	return n
}

// listeners is how many of rs's clients listen on channels (pub/sub): a
// node's reader each, once in place.
func listeners(tb testing.TB, rs *testredis.Server) int {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	list, err := rdb.ClientList(tb.Context()).Result()
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(list) {
		for f := range strings.FieldsSeq(line) {
			if flags, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(flags, "P") {
				n++
			}
		}
	}
	return n
}

// shardsNamed are the shard numbers of a node's "Redis answers" logs, one
// per shard that found Redis answering, in order.
func shardsNamed(logs *observer.ObservedLogs) []int {
	var named []int
	for _, e := range logs.FilterMessage("Redis answers: in the cluster").All() {
		if shard, ok := e.ContextMap()["shard"].(int64); ok {
			named = append(named, int(shard))
		}
	}
	slices.Sort(named)
	return named
}
