package node

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	pushnotifications "github.com/pusher/push-notifications-go"
)

// A publish through the fake gateways shows in herald_push_*: one publish,
// deliveries by gateway and outcome (a dead APNs token, an FCM send that
// fails once with 503 and is retried), and an empty queue once it is done.
func TestPushMetrics(t *testing.T) {
	gw := startGateways(t)
	cfg := pushConfig(t, gw, filepath.Join(t.TempDir(), "herald.db"))
	// FCM through a proxy that answers the first send with 503.
	target, _ := url.Parse(gw.fcm.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = gw.fcm.Server.Client().Transport // trusts the fake's certificate
	var sends atomic.Int64
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ":send") && sends.Add(1) == 1 {
			http.Error(w, `{"error":{"code":503,"status":"UNAVAILABLE","message":"try later"}}`, http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(flaky.Close)
	cfg.FCMURL = flaky.URL
	n, base := serveNodeWith(t, cfg, Options{Push: gw.pushOptions()})
	in, err := n.db.GetInstance(t.Context(), beamsInstance)
	if err != nil {
		t.Fatal(err)
	}
	gw.web.VAPIDPublicKey = in.VAPID.PublicKey

	metricsURL := base + "/metrics"
	fams := scrape(t, metricsURL)
	if v := value(fams, "herald_push_publishes_total"); v != 0 {
		t.Fatalf("herald_push_publishes_total before any publish = %v, want 0", v)
	}
	if v := value(fams, "herald_push_deliveries_total", "gateway", "fcm", "outcome", "delivered"); v != 0 {
		t.Fatalf("fcm delivered before any publish = %v, want 0", v)
	}

	sub, _ := gw.web.Subscribe()
	register(t, base, "apns", "aa01", "news")
	register(t, base, "apns", "dead01", "news")
	register(t, base, "fcm", "fcm-token-1", "news")
	register(t, base, "web", sub.Token(), "news")
	gw.apns.Dead("dead01")

	beams, err := pushnotifications.New(beamsInstance, beamsSecret, pushnotifications.WithCustomBaseURL(base))
	if err != nil {
		t.Fatal(err)
	}
	id, err := beams.PublishToInterests([]string{"news"}, map[string]any{
		"apns": map[string]any{"aps": map[string]any{"alert": "hi"}},
		"fcm":  map[string]any{"notification": map[string]any{"title": "hi"}},
		"web":  map[string]any{"notification": map[string]any{"title": "hi"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := waitDone(t, base, id); st.Targeted != 4 || st.Sent != 3 || st.Failed != 1 {
		t.Fatalf("status %+v, want 4 targeted, 3 sent, 1 failed", st)
	}

	fams = scrape(t, metricsURL)
	if v := value(fams, "herald_push_publishes_total"); v != 1 {
		t.Errorf("herald_push_publishes_total = %v, want 1", v)
	}
	if v := value(fams, "herald_push_dispatch_queue_depth"); v != 0 {
		t.Errorf("herald_push_dispatch_queue_depth = %v, want 0", v)
	}
	for _, want := range []struct {
		gateway, outcome string
		n                float64
	}{
		{"apns", "delivered", 1}, {"apns", "dead_token", 1}, {"apns", "failed", 0}, {"apns", "retried", 0},
		{"fcm", "delivered", 1}, {"fcm", "retried", 1}, {"fcm", "failed", 0}, {"fcm", "dead_token", 0},
		{"web", "delivered", 1}, {"web", "failed", 0},
	} {
		if v := value(fams, "herald_push_deliveries_total", "gateway", want.gateway, "outcome", want.outcome); v != want.n {
			t.Errorf("herald_push_deliveries_total{gateway=%q,outcome=%q} = %v, want %v", want.gateway, want.outcome, v, want.n)
		}
	}
}
