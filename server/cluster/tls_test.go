package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testcert"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// tlsRedis starts a redis-server that speaks TLS only, with a certificate
// for 127.0.0.1 signed by a CA of the test's own, which no system trusts.
func tlsRedis(t *testing.T) *testredis.Server {
	t.Helper()
	return testredis.StartTLS(t, testredis.TLS(testcert.ServerFiles(t)))
}

// Two nodes on a rediss:// Redis whose certificate a private CA signed,
// given that CA (HERALD_REDIS_CA_FILE): an event published on one reaches
// a subscriber of the other.
func TestNodesShareARedisOverTLSWithAPrivateCA(t *testing.T) {
	rs := tlsRedis(t)
	if !strings.HasPrefix(rs.URL(), "rediss://") {
		t.Fatalf("URL %q, want rediss://", rs.URL())
	}
	prefix := fmt.Sprintf("tls%d:", time.Now().UnixNano())
	withCA := func(o *Options) { o.CAFile = rs.CAFile() }
	a := startNode(t, rs, prefix, "a", withCA)
	b := startNode(t, rs, prefix, "b", withCA)

	wait.Until(t, "both nodes are in the cluster", func() bool { return a.c.Stats().Up && b.c.Stats().Up })
	cl := b.connect("app")
	cl.subscribe("news", nil)
	cl.wait("news", "pusher_internal:subscription_succeeded")
	if err := a.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "over-tls", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	if got := cl.wait("news", "over-tls"); got.Data != "{}" {
		t.Fatalf("node b's subscriber got %+v", got)
	}

	// The connection checks the certificate against the URL's host, at TLS
	// 1.2 or newer.
	tc := a.m().rdb.(*redis.Client).Options().TLSConfig
	if tc == nil {
		t.Fatal("the Redis client of a rediss:// URL has no TLS config")
	}
	if tc.ServerName != "127.0.0.1" || tc.MinVersion < tls.VersionTLS12 || tc.InsecureSkipVerify || tc.RootCAs == nil {
		t.Fatalf("TLS config of the Redis client: ServerName %q, MinVersion %#x, InsecureSkipVerify %v, RootCAs set %v",
			tc.ServerName, tc.MinVersion, tc.InsecureSkipVerify, tc.RootCAs != nil)
	}
}

// A node given the rediss:// URL but not the CA never joins: every try
// fails the certificate check, and publishes are refused meanwhile.
func TestNodeWithoutTheCADoesNotJoinOverTLS(t *testing.T) {
	rs := tlsRedis(t)
	prefix := fmt.Sprintf("tls%d:", time.Now().UnixNano())
	// The node reaches Redis through a proxy that counts its connections:
	// each is a try of a heartbeat (or of the pool's own redial).
	px := newDialCounter(t, rs.Addr())
	viaProxy := func(o *Options) { o.URL = "rediss://" + px.addr() + "/0" }
	n := startNode(t, rs, prefix, "no-ca", viaProxy)

	// Start ran the first heartbeat, which failed; the later ones fail too.
	if n.c.Stats().Up {
		t.Fatal("the node joined the cluster without trusting the CA of Redis's certificate")
	}
	tried := px.count()
	if tried == 0 {
		t.Fatal("the node's first heartbeat did not reach Redis")
	}
	wait.Until(t, "the node tries Redis three more times", func() bool {
		if n.c.Stats().Up {
			t.Fatal("the node joined the cluster without trusting the CA of Redis's certificate")
		}
		return px.count() >= tried+3
	})
	if err := n.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "lost", Data: "{}"}); !errors.Is(err, hub.ErrUnavailable) {
		t.Fatalf("publish: %v, want ErrUnavailable", err)
	}
	// It is the certificate check that fails: the same proxy serves a node
	// given the CA.
	err := n.c.Ready(context.Background())
	if unknown := (x509.UnknownAuthorityError{}); !errors.As(err, &unknown) {
		t.Fatalf("Redis's readiness: %v, want an unknown certificate authority", err)
	}
	withCA := startNode(t, rs, prefix, "with-ca", viaProxy, func(o *Options) { o.CAFile = rs.CAFile() })
	wait.Until(t, "the node given the CA joins through the same proxy", func() bool { return withCA.c.Stats().Up })
	if n.c.Stats().Up {
		t.Fatal("the node without the CA joined the cluster")
	}
}

// dialCounter forwards TCP connections to a server and counts them.
type dialCounter struct {
	ln    net.Listener
	n     atomic.Int64
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func newDialCounter(t *testing.T, target string) *dialCounter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dialCounter{ln: ln, conns: make(map[net.Conn]bool)}
	t.Cleanup(func() {
		ln.Close()
		d.mu.Lock()
		defer d.mu.Unlock()
		for c := range d.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.n.Add(1)
			go d.forward(c, target)
		}
	}()
	return d
}

func (d *dialCounter) addr() string { return d.ln.Addr().String() }

func (d *dialCounter) count() int64 { return d.n.Load() }

func (d *dialCounter) forward(c net.Conn, target string) {
	up, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	d.mu.Lock()
	d.conns[c], d.conns[up] = true, true
	d.mu.Unlock()
	go func() { io.Copy(up, c); up.Close() }()
	io.Copy(c, up)
	c.Close()
	d.mu.Lock()
	delete(d.conns, c)
	delete(d.conns, up)
	d.mu.Unlock()
}
