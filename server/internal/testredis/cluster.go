package testredis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a running Redis Cluster of primaries without replicas, every
// slot served.
type Cluster struct {
	// Nodes are its redis-servers, in the order of their slot ranges.
	Nodes []*Server
}

// StartCluster starts n redis-servers in cluster mode (each with its own
// free bus port) and makes them one Redis Cluster with redis-cli --cluster
// create, which gives each an equal run of slots; it returns once every
// node says the cluster is ok. Skipped (failed under CI=true) as Start is
// when redis-server or redis-cli is missing.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-cli is not installed; CI must install it (Debian package redis-tools, which redis-server depends on)")
		}
		t.Skip("redis-cli is not installed (Debian package redis-tools): skipping the Redis Cluster test")
	}
	c := &Cluster{}
	args := []string{"--cluster", "create"}
	for range n {
		s := StartClusterNode(t)
		c.Nodes = append(c.Nodes, s)
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range c.Nodes {
		for {
			state, err := s.clusterState()
			if state == "ok" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Redis Cluster node %s: cluster_state %q, %v", s.Addr(), state, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// StartClusterNode starts a redis-server in cluster mode, on free ports
// (its own and its cluster bus's), in no cluster yet: it serves no slot.
func StartClusterNode(t testing.TB) *Server {
	t.Helper()
	return startServer(t, nil, func(s *Server) { s.busPort = -1 }) // -1: chosen with the port
}

// URL is the cluster's redis-cluster:// URL, every node a seed.
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return "redis-cluster://" + strings.Join(addrs, ",")
}

// clusterState is the cluster_state field of the node's CLUSTER INFO.
func (s *Server) clusterState() (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no cluster_state in CLUSTER INFO")
}
