package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

const testAdminToken = "test-admin-token-0123456789"

// startOpsNode runs a node with app 77 and the admin token until the test ends.
func startOpsNode(t *testing.T, mutate func(*config.Config)) string {
	t.Helper()
	cfg := config.Config{
		DB: filepath.Join(t.TempDir(), "herald.db"), AppID: "77", AppKey: "go-sdk-key", AppSecret: "go-sdk-secret",
		AdminToken: testAdminToken,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	_, url := serveNode(t, cfg)
	return strings.TrimPrefix(url, "http://")
}

// scrape reads the metrics at url into families.
func scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, res.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value returns the value of the series of family name with the labels
// (name=value pairs), or -1 when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func TestMetrics(t *testing.T) {
	addr := startOpsNode(t, nil)
	metricsURL := "http://" + addr + "/metrics"
	ctx := context.Background()

	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/app/go-sdk-key?protocol=7", nil)
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	read() // connection_established
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:subscribe","data":{"channel":"news"}}`)); err != nil {
		t.Fatal(err)
	}
	if got := read(); !strings.Contains(got, "subscription_succeeded") {
		t.Fatalf("got %s", got)
	}
	if err := goClient(addr, "go-sdk-key", "go-sdk-secret").Trigger("news", "flash", "hi"); err != nil {
		t.Fatal(err)
	}
	for got := read(); !strings.Contains(got, `"flash"`); got = read() {
		// subscription_count comes first on this app
	}
	// A refused connection: unknown key.
	bad, _, err := websocket.Dial(ctx, "ws://"+addr+"/app/nope?protocol=7", nil)
	if err == nil {
		_, _, _ = bad.Read(ctx)
		bad.CloseNow()
	}

	// An admin call reads the app in a SQLite transaction.
	req, _ := http.NewRequest("GET", "http://"+addr+"/admin/v1/apps/77", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("admin get app: %d", res.StatusCode)
	}

	fams := scrape(t, metricsURL)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"herald_connections", []string{"app_id", "77"}, 1},
		{"herald_channels", []string{"app_id", "77"}, 1},
		{"herald_subscriptions", []string{"app_id", "77"}, 1},
		{"herald_presence_members", []string{"app_id", "77"}, 0},
		{"herald_connections_opened_total", []string{"transport", "ws"}, 1},
		{"herald_connections_rejected_total", []string{"code", "4001"}, 1},
		{"herald_events_triggered_total", []string{"app_id", "77"}, 1},
		{"herald_client_events_total", nil, 0},
		{"herald_slow_consumers_closed_total", nil, 0},
		{"herald_webhook_outbox_depth", nil, 0},
		{"herald_webhook_requests_total", []string{"outcome", "failed"}, 0},
		{"herald_http_request_duration_seconds", []string{"route", "/apps/:app_id/events", "method", "POST", "status", "200"}, 1},
		{"herald_panics_total", []string{"part", "ws"}, 0},
		{"herald_panics_total", []string{"part", "push"}, 0},
		{"herald_panics_total", []string{"part", "hub_observer"}, 0},
		{"herald_rate_limited_total", []string{"limit", "ws_subscribe"}, 0},
	} {
		if got := value(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// connection_established, subscription_succeeded, the event.
	if got := value(fams, "herald_frames_delivered_total"); got < 3 {
		t.Errorf("herald_frames_delivered_total = %v, want at least 3", got)
	}
	if got := value(fams, "herald_sqlite_transaction_duration_seconds", "kind", "read"); got < 1 {
		t.Errorf("no SQLite read transactions recorded: %v", got)
	}
	if _, ok := fams["herald_http_request_duration_seconds"]; ok && value(fams, "herald_http_request_duration_seconds", "route", "/app/:key") != -1 {
		t.Error("the WebSocket route is timed")
	}

	ws.Close(websocket.StatusNormalClosure, "")
	wait.Until(t, "the connection to close", func() bool {
		f := scrape(t, metricsURL)
		return value(f, "herald_connections", "app_id", "77") == 0 && value(f, "herald_connections_closed_total", "code", "0") == 1
	})
}

func TestMetricsOwnListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()
	addr := startOpsNode(t, func(c *config.Config) { c.MetricsAddr = metricsAddr })
	// Serve, which opens the metrics listener, runs in its own goroutine.
	wait.Until(t, "the metrics listener", func() bool {
		res, err := http.Get("http://" + metricsAddr + "/metrics")
		if err == nil {
			res.Body.Close()
		}
		return err == nil
	})
	if fams := scrape(t, "http://"+metricsAddr+"/metrics"); value(fams, "herald_connections_opened_total") != 0 {
		t.Fatal("no herald metrics on the metrics listener")
	}
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("/metrics on the main port: %d, want 404", res.StatusCode)
	}
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	addr := startOpsNode(t, func(c *config.Config) { c.AdminToken = "" })
	for _, path := range []string{"/admin/v1/apps", "/console", "/console/events?app=77"} {
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"error":"not_found"`) {
			t.Errorf("GET %s without HERALD_ADMIN_TOKEN: %d %s, want 404 with the error body", path, res.StatusCode, body)
		}
	}
}

// TestConsoleStream: the console's event stream carries HTTP triggers and
// channel events of the app it watches, and refuses requests without the token.
func TestConsoleStream(t *testing.T) {
	addr := startOpsNode(t, nil)
	// Neither no credentials nor the token in the URL open it.
	for _, query := range []string{"", "&token=" + testAdminToken} {
		res, err := http.Get("http://" + addr + "/console/events?app=77" + query)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("stream with %q: %d, want 401", query, res.StatusCode)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines := consoleStream(t, ctx, addr) // past the opening comment: the watcher is registered
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/app/go-sdk-key?protocol=7", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:subscribe","data":{"channel":"news"}}`)); err != nil {
		t.Fatal(err)
	}
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "subscription_succeeded") {
			break
		}
	}
	if err := goClient(addr, "go-sdk-key", "go-sdk-secret").Trigger("news", "flash", map[string]string{"msg": "hello"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for lines.Scan() {
		line := lines.Text()
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			got = append(got, data)
			if strings.Contains(data, `"kind":"trigger"`) {
				break
			}
		}
	}
	all := strings.Join(got, "\n")
	if !strings.Contains(all, `"kind":"channel_occupied","channel":"news"`) ||
		!strings.Contains(all, `"kind":"trigger","channel":"news","event":"flash","data":"{\"msg\":\"hello\"}"`) {
		t.Fatalf("stream carried:\n%s", all)
	}
}

// Without an admin token nothing can read the console's history or relayed
// events: the node keeps no recorder and, in a cluster, no console relay,
// so triggers and samples pay nothing for them.
func TestNoConsoleWithoutToken(t *testing.T) {
	rs := testredis.Start(t)
	for _, token := range []string{"", testAdminToken} {
		n, _ := serveNodeWith(t, config.Config{
			DB: filepath.Join(t.TempDir(), "herald.db"), AppID: "77", AppKey: "go-sdk-key", AppSecret: "go-sdk-secret",
			AdminToken: token, RedisURL: rs.URL(), NodeID: "a",
		}, Options{ClusterPrefix: fmt.Sprintf("noconsole%d:", time.Now().UnixNano())})
		if got, want := n.ops.traffic != nil, token != ""; got != want {
			t.Errorf("admin token %q: history recorder kept = %v, want %v", token, got, want)
		}
		if got, want := n.relay != nil, token != ""; got != want {
			t.Errorf("admin token %q: console relay made = %v, want %v", token, got, want)
		}
	}
}

// A change made through the admin API takes effect on the node that answered
// it before the answer, not at its next look at the database (made an hour
// here): the rotated-out secret of an app and of an instance are refused at
// once, and the new ones work.
func TestAdminChangesTakeEffectOnTheNodeAtOnce(t *testing.T) {
	const instance = "6c1a2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	_, url := serveNodeWith(t, config.Config{
		DB: filepath.Join(t.TempDir(), "herald.db"), AppID: "77", AppKey: "go-sdk-key", AppSecret: "go-sdk-secret",
		InstanceID: instance, InstanceSecretKey: "instance-secret-before", AdminToken: testAdminToken,
	}, Options{DirectoryReload: time.Hour})
	rotate := func(path string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/admin/v1/"+path+"/rotate-secret", nil)
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 {
			t.Fatalf("rotate %s: %d %v", path, res.StatusCode, err)
		}
		return out
	}
	addr := strings.TrimPrefix(url, "http://")

	newSecret, _ := rotate("apps/77")["secret"].(string)
	if err := goClient(addr, "go-sdk-key", "go-sdk-secret").Trigger("news", "e", "{}"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a trigger signed with the rotated-out app secret: %v, want 401", err)
	}
	if err := goClient(addr, "go-sdk-key", newSecret).Trigger("news", "e", "{}"); err != nil {
		t.Fatalf("a trigger signed with the new app secret: %v", err)
	}

	newKey, _ := rotate("instances/" + instance)["secretKey"].(string)
	publish := func(key string) int {
		req, _ := http.NewRequest("POST", url+"/publish_api/v1/instances/"+instance+"/publishes/interests",
			strings.NewReader(`{"interests":["news"],"fcm":{"notification":{"title":"t"}}}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := publish("instance-secret-before"); got != http.StatusUnauthorized {
		t.Fatalf("a publish with the rotated-out instance key: %d, want 401", got)
	}
	if got := publish(newKey); got != http.StatusOK {
		t.Fatalf("a publish with the new instance key: %d, want 200", got)
	}
}
