package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pusher/pusher-http-go/v5"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// clusterNode starts a node of the cluster on rs, with the test app.
func clusterNode(t *testing.T, rs *testredis.Server, prefix, id string) (*Node, string) {
	t.Helper()
	n, url := serveNode(t, config.Config{
		DB:        filepath.Join(t.TempDir(), "herald.db"),
		AppID:     "77",
		AppKey:    "go-sdk-key",
		AppSecret: "go-sdk-secret",
		RedisURL:  rs.URL(),
		NodeID:    id,
	}, WithClusterKeys(prefix), WithClusterHeartbeat(100*time.Millisecond, time.Second))
	return n, strings.TrimPrefix(url, "http://")
}

// Two nodes on one Redis: the Go server SDK triggers on one and a
// subscriber of the other gets it; /readyz and /metrics report Redis; with
// Redis gone the trigger is refused with 503 cluster_unavailable and the
// node is unready, and both recover when it is back.
func TestClusterNodesServeOneApp(t *testing.T) {
	rs := testredis.Start(t)
	prefix := fmt.Sprintf("node%d:", time.Now().UnixNano())
	_, addrA := clusterNode(t, rs, prefix, "a")
	b, addrB := clusterNode(t, rs, prefix, "b")

	c, err := b.Hub().Connect("77", hub.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Hub().Subscribe(c, "orders", hub.SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	received := ""
	take := func() string {
		raw, _ := c.Take(nil)
		for _, f := range raw {
			received += string(f) + "\n"
		}
		return received
	}
	wait.Until(t, "the subscription succeeds", func() bool { return strings.Contains(take(), "subscription_succeeded") })

	sdk := goClient(addrA, "go-sdk-key", "go-sdk-secret")
	if err := sdk.Trigger("orders", "created", map[string]int{"id": 1}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "node b's subscriber gets the event node a accepted", func() bool {
		return strings.Contains(take(), `"event":"created","channel":"orders","data":"{\"id\":1}"`)
	})
	info, err := sdk.Channel("orders", pusher.ChannelParams{})
	if err != nil || !info.Occupied {
		t.Fatalf("node a's answer about a channel of node b: %+v %v", info, err)
	}

	get := func(addr, path string) (int, string) {
		t.Helper()
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	if code, body := get(addrA, "/readyz"); code != http.StatusOK || !strings.Contains(body, `"redis":"ok"`) {
		t.Fatalf("readyz: %d %s", code, body)
	}
	wait.Until(t, "node a's metrics count both nodes", func() bool {
		_, body := get(addrA, "/metrics")
		return strings.Contains(body, "herald_cluster_up 1") && strings.Contains(body, "herald_cluster_nodes 2")
	})

	rs.Stop()
	wait.Until(t, "node a sees Redis down", func() bool {
		_, body := get(addrA, "/metrics")
		return strings.Contains(body, "herald_cluster_up 0")
	})
	err = sdk.Trigger("orders", "lost", map[string]int{"id": 2})
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "cluster_unavailable") {
		t.Fatalf("trigger with Redis down: %v, want 503 cluster_unavailable", err)
	}
	var body struct {
		Checks map[string]string `json:"checks"`
	}
	code, raw := get(addrB, "/readyz")
	if json.Unmarshal([]byte(raw), &body); code != http.StatusServiceUnavailable || body.Checks["redis"] == "ok" || body.Checks["database"] != "ok" {
		t.Fatalf("readyz with Redis down: %d %s, want 503 naming redis", code, raw)
	}

	rs.Restart()
	wait.Until(t, "the trigger is accepted again", func() bool {
		return sdk.Trigger("orders", "back", map[string]int{"id": 3}) == nil
	})
	wait.Until(t, "node b's subscriber gets it", func() bool { return strings.Contains(take(), `"event":"back"`) })
	if strings.Contains(take(), `"event":"lost"`) {
		t.Fatal("the refused trigger was delivered")
	}
}
