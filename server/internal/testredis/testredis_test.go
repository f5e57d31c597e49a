package testredis

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/internal/testcert"
)

// ping connects to url as a cluster node would, trusting caFile's
// certificates when it is set.
func ping(t *testing.T, url, caFile string) error {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	if caFile != "" {
		pemData, err := os.ReadFile(caFile)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pemData)
		opts.TLSConfig.RootCAs = roots
	}
	opts.MaxRetries = -1
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	return rdb.Ping(context.Background()).Err()
}

func TestStartServesPlainRedis(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.URL(), "redis://127.0.0.1:") || s.CAFile() != "" {
		t.Fatalf("URL %q, CAFile %q: want redis:// and no CA", s.URL(), s.CAFile())
	}
	if err := ping(t, s.URL(), ""); err != nil {
		t.Fatal(err)
	}
}

// A TLS server answers rediss:// clients that trust its CA, before and
// after a restart, and no others.
func TestStartTLSServesRedissOnly(t *testing.T) {
	files := TLS(testcert.ServerFiles(t))
	s := StartTLS(t, files)
	if want := "rediss://" + s.Addr() + "/0"; s.URL() != want {
		t.Fatalf("URL %q, want %q", s.URL(), want)
	}
	if s.CAFile() != files.CAFile {
		t.Fatalf("CAFile %q, want %q", s.CAFile(), files.CAFile)
	}
	if err := ping(t, s.URL(), s.CAFile()); err != nil {
		t.Fatal(err)
	}
	if err := ping(t, s.URL(), ""); !errors.As(err, &x509.UnknownAuthorityError{}) {
		t.Fatalf("a client that does not trust the CA: %v, want an unknown authority", err)
	}
	if err := ping(t, "redis://"+s.Addr()+"/0", ""); err == nil {
		t.Fatal("the TLS server answered a plain connection")
	}
	s.Restart()
	if err := ping(t, s.URL(), s.CAFile()); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}

// A started Redis Cluster serves every slot over its nodes, and a key
// written through one client is read through another.
func TestStartClusterServesEverySlot(t *testing.T) {
	c := StartCluster(t, 3)
	if want := "redis-cluster://" + c.Nodes[0].Addr() + "," + c.Nodes[1].Addr() + "," + c.Nodes[2].Addr(); c.URL() != want {
		t.Fatalf("URL %q, want %q", c.URL(), want)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{c.Nodes[0].Addr()}})
	defer rdb.Close()
	shards, err := rdb.ClusterShards(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	served, owners := int64(0), map[string]bool{}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			served += r.End - r.Start + 1
		}
		if len(sh.Slots) > 0 {
			owners[sh.Nodes[0].ID] = true
		}
	}
	if served != 16384 || len(owners) != 3 {
		t.Fatalf("%d slots served by %d nodes, want 16384 by 3", served, len(owners))
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if err := rdb.Set(t.Context(), k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	other := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{c.Nodes[2].Addr()}})
	defer other.Close()
	for _, k := range []string{"a", "b", "c", "d"} {
		if v, err := other.Get(t.Context(), k).Result(); err != nil || v != k {
			t.Fatalf("GET %s: %q %v", k, v, err)
		}
	}
	if state, err := StartClusterNode(t).clusterState(); state != "fail" {
		t.Fatalf("a node in no cluster: cluster_state %q %v, want fail", state, err)
	}
}
