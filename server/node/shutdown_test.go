package node

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/testredis"
)

// closeLog records the closers a node runs, in order.
type closeLog []string

// record is Options.closed: it adds each closer's name as the node runs it.
func (l *closeLog) record(name string) { *l = append(*l, name) }

// gracefulOrder is the order in which Shutdown closes a node's parts; the
// cluster only in cluster mode.
var gracefulOrder = []string{
	"console and metrics listener", // its streams would hold up the HTTP shutdown
	"http fallback sessions",       // their 4200 goes out on requests, which need the listener
	"http server",
	"upgrades",
	"websockets",
	"cluster", // after the sockets, before the hub: a publisher into it
	"hub",     // delivers what is queued, to the webhook sender among others
	"webhooks",
	"push delivery",
	"background loops", // they read the database
	"database",
}

// without is order less the closers named.
func without(order []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(order), func(s string) bool { return slices.Contains(names, s) })
}

// Shutdown closes every part start-up opened, in the graceful order, each
// once: a second Shutdown (the test's cleanup) closes nothing again.
func TestShutdownClosesInOrderOnce(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cluster bool
		admin   bool // an admin token: the console's relay over the cluster
	}{
		{"single node", false, true},
		{"cluster node", true, true},
		{"cluster node without the console", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Config{DB: filepath.Join(t.TempDir(), "herald.db")}
			if tt.admin {
				cfg.AdminToken = testAdminToken
			}
			want := without(gracefulOrder, "cluster")
			if tt.cluster {
				cfg.RedisURL = testredis.Start(t).URL()
				want = gracefulOrder
			}
			var closed closeLog
			var first []string // what the first Shutdown closed
			// Registered before the node's cleanup, so it runs after that
			// second Shutdown.
			t.Cleanup(func() {
				if len(closed) > len(first) {
					t.Errorf("a second Shutdown closed %q again", closed[len(first):])
				}
			})
			n, _ := serveNodeWith(t, cfg, Options{ClusterPrefix: fmt.Sprintf("shutdown%d:", time.Now().UnixNano()), closed: closed.record})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := n.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			first = slices.Clone(closed)
			if !slices.Equal(closed, want) {
				t.Fatalf("Shutdown closed %q; want %q", closed, want)
			}
		})
	}
}

// A start that fails closes what it had opened, last first, and nothing
// it had not: here the routes fail on a bad trusted proxy, after the
// WebSocket handler and before the upgrade server.
func TestFailedStartClosesWhatStarted(t *testing.T) {
	var closed closeLog
	cfg := config.Config{DB: filepath.Join(t.TempDir(), "herald.db"), TrustedProxies: []string{"proxy.example"}}
	if _, err := New(context.Background(), cfg, zap.NewNop(), Options{closed: closed.record}); err == nil {
		t.Fatal("the start did not fail")
	}
	want := without(gracefulOrder, "console and metrics listener", "http fallback sessions", "http server", "upgrades", "cluster")
	if !slices.Equal(closed, want) {
		t.Fatalf("the failed start closed %q; want %q", closed, want)
	}
}
