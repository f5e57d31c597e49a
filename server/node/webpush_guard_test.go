package node

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/storage"
)

// webSubscriber is a fresh subscription of the fake push service.
func webSubscriber(t *testing.T, gw *gateways) *pushtest.WebSubscriber {
	t.Helper()
	sub, err := gw.web.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

func hostPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// A publish to web devices never reaches an internal HTTP listener on
// 127.0.0.1 through a real node, whose operator allowed only the fake push
// service's and a redirecting service's ports of 127.0.0.1: registering an
// endpoint at the listener is a 400; devices that lead to it anyway (stored
// directly, as by an older version: the listener's address, a name resolving
// to it; or registered at the allowed service that redirects to it) are
// failed deliveries, neither retried nor deleted; the allowed push service
// gets its notification.
func TestWebPushNeverReachesInternalListener(t *testing.T) {
	var conns atomic.Int64
	inner := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	inner.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	inner.StartTLS() // httptest's certificate, which the node trusts for the fakes
	t.Cleanup(inner.Close)
	innerPort := strings.TrimPrefix(hostPort(t, inner.URL), "127.0.0.1:")
	redirecting := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner.URL+"/push/x", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)

	gw := startGateways(t)
	cfg := pushConfig(t, gw, filepath.Join(t.TempDir(), "herald.db"))
	cfg.WebPushAllowedHosts = []string{hostPort(t, gw.web.URL), hostPort(t, redirecting.URL)}
	n, base := serveNodeWith(t, cfg, Options{Push: gw.pushOptions()})
	in, err := n.db.GetInstance(t.Context(), beamsInstance)
	if err != nil {
		t.Fatal(err)
	}
	gw.web.VAPIDPublicKey = in.VAPID.PublicKey

	// Registration refuses what the URL alone gives away.
	for _, endpoint := range []string{
		"https://127.0.0.1:" + innerPort + "/push/x",
		"http://127.0.0.1:" + innerPort + "/push/x",
		"https://localhost:" + innerPort + "/push/x",
	} {
		status, out := call(t, "POST", base+"/device_api/v1/instances/"+beamsInstance+"/devices/web", map[string]any{"token": webSubscriber(t, gw).TokenAt(endpoint)})
		if status != http.StatusBadRequest || !strings.Contains(string(out), `"endpoint_not_allowed"`) {
			t.Fatalf("register %s: %d %s, want 400 endpoint_not_allowed", endpoint, status, out)
		}
	}

	sub, err := gw.web.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	good := register(t, base, "web", sub.Token(), "news")
	redirected := register(t, base, "web", webSubscriber(t, gw).TokenAt(redirecting.URL+"/push/x"), "news")
	stored := []storage.DeviceImport{}
	for _, endpoint := range []string{
		"https://127.0.0.1:" + innerPort + "/push/x",
		"https://localhost:" + innerPort + "/push/x",
	} {
		d := storage.Device{ID: storage.NewDeviceID(storage.PlatformWeb), InstanceID: beamsInstance, Platform: storage.PlatformWeb, Token: webSubscriber(t, gw).TokenAt(endpoint)}
		stored = append(stored, storage.DeviceImport{Device: d, Interests: []string{"news"}})
	}
	if err := n.db.ImportDevices(t.Context(), stored); err != nil {
		t.Fatal(err)
	}

	status, out := call(t, "POST", base+"/publish_api/v1/instances/"+beamsInstance+"/publishes/interests",
		json.RawMessage(`{"interests":["news"],"web":{"notification":{"title":"hi"}}}`), "Authorization", "Bearer "+beamsSecret)
	if status != 200 {
		t.Fatalf("publish: %d %s", status, out)
	}
	id := strings.Split(strings.Split(string(out), `"publishId":"`)[1], `"`)[0]
	if st := waitDone(t, base, id); st.Targeted != 4 || st.Sent != 1 || st.Failed != 3 {
		t.Fatalf("publish %+v, want 4 targeted, 1 sent, 3 failed", st)
	}
	if got := len(gw.web.For(sub.ID)); got != 1 {
		t.Fatalf("the allowed push service got %d notifications, want 1", got)
	}
	if pr := gw.web.Problems(); len(pr) > 0 {
		t.Fatalf("the fake found problems: %v", pr)
	}
	for _, c := range n.push.PushCounters().Deliveries {
		if c.Gateway != "web" {
			continue
		}
		want := map[string]int64{push.OutcomeDelivered: 1, push.OutcomeFailed: 3}[c.Outcome]
		if c.Count != want {
			t.Errorf("web %s: %d, want %d (refusals are failures, not retries or dead tokens)", c.Outcome, c.Count, want)
		}
	}
	for _, d := range append([]beamsDevice{good, redirected}, beamsDevice{platform: "web", id: stored[0].Device.ID}, beamsDevice{platform: "web", id: stored[1].Device.ID}) {
		if !deviceExists(t, base, d) {
			t.Errorf("device %s was deleted", d.id)
		}
	}
	if got := conns.Load(); got != 0 {
		t.Fatalf("the internal listener got %d connections", got)
	}
}
