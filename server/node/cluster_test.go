package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pusher/pusher-http-go/v5"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// clusterNode starts a node of the cluster on rs, with the test app and
// the admin token, and whatever changes give the configuration.
func clusterNode(t *testing.T, rs *testredis.Server, prefix, id string, changes ...func(*config.Config)) (*Node, string) {
	t.Helper()
	cfg := config.Config{
		DB:         filepath.Join(t.TempDir(), "herald.db"),
		AppID:      "77",
		AppKey:     "go-sdk-key",
		AppSecret:  "go-sdk-secret",
		RedisURL:   rs.URL(),
		NodeID:     id,
		AdminToken: testAdminToken,
	}
	for _, change := range changes {
		change(&cfg)
	}
	n, url := serveNodeWith(t, cfg, Options{ClusterPrefix: prefix, ClusterHeartbeat: 100 * time.Millisecond, ClusterNodeTTL: time.Second})
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

// The console's live list on one node shows what another node saw — a
// trigger it received and a client event of its client — each naming that
// node; with no console open anywhere, nothing goes to Redis for it.
func TestClusterConsoleShowsEveryNode(t *testing.T) {
	rs := testredis.Start(t)
	prefix := fmt.Sprintf("console%d:", time.Now().UnixNano())
	_, addrA := clusterNode(t, rs, prefix, "a")
	b, addrB := clusterNode(t, rs, prefix, "b")
	sdkB := goClient(addrB, "go-sdk-key", "go-sdk-secret")

	if err := sdkB.Trigger("news", "unwatched", map[string]int{"id": 1}); err != nil {
		t.Fatal(err)
	}
	if st := b.relay.Stats(); st.Published != 0 || st.Sent != 0 || st.Dropped != 0 {
		t.Fatalf("relay with no console open: %+v, want nothing published", st)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines := consoleStream(t, ctx, addrA)
	wait.Until(t, "node b learns that node a watches app 77", func() bool { return b.relay.Wanted("77") })

	if err := sdkB.Trigger("news", "from-b", map[string]int{"id": 2}); err != nil {
		t.Fatal(err)
	}
	c, err := b.Hub().Connect("77", hub.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(hub.CloseReason{Code: 4200, Message: "test over"})
	if err := b.Hub().PublishClientEvent(hub.Message{AppID: "77", Channel: "private-chat", Event: "client-typing", Data: "{}", ExcludeSocketID: c.SocketID()}); err != nil {
		t.Fatal(err)
	}
	// The stream is read on a goroutine, so that a missing event fails
	// the wait rather than hanging the test.
	var mu sync.Mutex
	var got []string
	go func() {
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				mu.Lock()
				got = append(got, data)
				mu.Unlock()
			}
		}
	}()
	stream := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(got, "\n")
	}
	wantTrigger := `"kind":"trigger","channel":"news","event":"from-b","data":"{\"id\":2}","node":"b"}`
	wantClient := `"kind":"client_event","channel":"private-chat","event":"client-typing","data":"{}","socket_id":"` + c.SocketID() + `","node":"b"}`
	wait.Until(t, "node a's stream to carry node b's trigger and client event", func() bool {
		all := stream()
		return strings.Contains(all, wantTrigger) && strings.Contains(all, wantClient)
	})
	if all := stream(); strings.Contains(all, "unwatched") {
		t.Fatalf("node a's stream carried the event triggered before it opened:\n%s", all)
	}
	// Node b sent those two and nothing else: not the event triggered
	// while no console was open.
	wait.Until(t, "node b to count what it sent", func() bool { return b.relay.Stats().Sent >= 2 })
	if st := b.relay.Stats(); st.Sent != 2 || st.Dropped != 0 {
		t.Fatalf("node b's relay: %+v, want 2 events sent", st)
	}
	res, err := http.Get("http://" + addrB + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	metrics, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(metrics), `herald_cluster_console_events_total{outcome="sent"} 2`) {
		t.Fatal("node b's metrics do not count the 2 console events it sent")
	}
}
