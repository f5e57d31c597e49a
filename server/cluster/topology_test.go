package cluster

import (
	"testing"

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
