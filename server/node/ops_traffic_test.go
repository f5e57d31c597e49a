package node

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pushnotifications "github.com/pusher/push-notifications-go"

	"github.com/heraldrt/herald/server/console/traffic"
	"github.com/heraldrt/herald/server/internal/wait"
)

// The console's traffic charts as the node wires them: a trigger to a subscriber
// shows in the app's triggered and delivered series, its connection in
// connections, webhook attempts in webhooksSent and webhooksFailed, and a
// publish's deliveries in each of the instance's outcome series.
func TestConsoleTraffic(t *testing.T) {
	var hookRequests atomic.Int64
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hookRequests.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError) // one failed attempt, then its retry is delivered
		}
	}))
	t.Cleanup(hooks.Close)
	gw := startGateways(t)
	cfg := pushConfig(t, gw, filepath.Join(t.TempDir(), "herald.db"))
	cfg.AppID, cfg.AppKey, cfg.AppSecret, cfg.AdminToken = "77", "go-sdk-key", "go-sdk-secret", testAdminToken
	cfg.AppWebhookURL = hooks.URL
	opts := gw.pushOptions()
	opts.MaxAttempts = 2 // a token unavailable twice: retried, then failed
	// The recorder's own ticks never come; the test samples at times of
	// its own, a second apart, so that a series' points add up to its count.
	n, base := serveNodeWith(t, cfg, Options{Push: opts, Traffic: traffic.Options{Interval: time.Hour}})
	rec := n.ops.traffic
	// sums adds up each series' last points: a second apart, they add up
	// to its count.
	appSums, instanceSums := make([]float32, len(traffic.AppSeriesNames)), make([]float32, len(traffic.InstanceSeriesNames))
	var connections float32
	now := time.Now()
	sample := func() {
		now = now.Add(time.Second)
		rec.Sample(now)
		a, in := rec.Get(traffic.App, "77"), rec.Get(traffic.Instance, beamsInstance)
		last := len(a.Times) - 1
		for s := range appSums {
			appSums[s] += a.Series[s][last]
		}
		for s := range instanceSums {
			instanceSums[s] += in.Series[s][last]
		}
		connections = a.Series[traffic.AppConnections][last]
	}
	sample() // the first readings of the running totals

	sub := subscriber(t, n.Hub(), "", "news") // channel_occupied: the webhook
	if err := goClient(strings.TrimPrefix(base, "http://"), "go-sdk-key", "go-sdk-secret").Trigger("news", "flash", "hi"); err != nil {
		t.Fatal(err)
	}
	if got := frames(t, n.Hub(), sub); got == "" {
		t.Fatal("the subscriber got nothing")
	}

	register(t, base, "apns", "aa01", "news")
	register(t, base, "apns", "dead01", "news")
	register(t, base, "apns", "d0d001", "news")
	gw.apns.Dead("dead01")
	gw.apns.Unavailable(2, "d0d001")
	beams, err := pushnotifications.New(beamsInstance, beamsSecret, pushnotifications.WithCustomBaseURL(base))
	if err != nil {
		t.Fatal(err)
	}
	id, err := beams.PublishToInterests([]string{"news"}, map[string]any{"apns": map[string]any{"aps": map[string]any{"alert": "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, base, id)

	app := map[int]float32{traffic.AppTriggered: 1, traffic.AppDelivered: 1, traffic.AppWebhooksSent: 1, traffic.AppWebhooksFailed: 1}
	instance := map[int]float32{traffic.InstanceDelivered: 1, traffic.InstanceDeadToken: 1, traffic.InstanceRetried: 1, traffic.InstanceFailed: 1}
	counted := func() bool {
		for s, want := range app {
			if appSums[s] != want {
				return false
			}
		}
		for s, want := range instance {
			if instanceSums[s] != want {
				return false
			}
		}
		return true
	}
	// Webhook attempts and push outcomes are reported after their
	// requests: sample until every count is in.
	wait.NoError(t, func() error {
		if sample(); !counted() {
			return fmt.Errorf("app series %v, instance series %v; want %v and %v", appSums, instanceSums, app, instance)
		}
		return nil
	})
	if connections != 1 {
		t.Errorf("connections at the last point = %v, want 1", connections)
	}
	// Nothing is counted twice: a last sample adds nothing.
	sample()
	if !counted() {
		t.Errorf("after one more sample: app series %v, instance series %v; want %v and %v", appSums, instanceSums, app, instance)
	}
}
