package node

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
)

// A gateway that stops answering holds up only its own deliveries: the
// other gateways' deliveries of the same publish go out, the stuck one holds
// no more than its share in flight, and once it answers again the publish
// completes with every device notified exactly once.
func TestStuckGatewayHoldsUpOnlyItself(t *testing.T) {
	gw := startGateways(t)
	cfg := pushConfig(t, gw, filepath.Join(t.TempDir(), "herald.db"))
	pushOpts := gw.pushOptions()
	pushOpts.MaxInFlight, pushOpts.PageSize = 30, 10 // a share of 10 per gateway
	target, _ := url.Parse(gw.apns.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = gw.apns.Server.Client().Transport // trusts the fake's certificate
	release := make(chan struct{})
	var waiting, most atomic.Int64
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := waiting.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		waiting.Add(-1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(stuck.Close)
	cfg.APNsURL = stuck.URL
	n, base := serveNodeWith(t, cfg, Options{Push: pushOpts})
	in, err := n.db.GetInstance(t.Context(), beamsInstance)
	if err != nil {
		t.Fatal(err)
	}
	gw.web.VAPIDPublicKey = in.VAPID.PublicKey
	seedDevices(t, n.db, 300, "news", webTokens(t, gw))

	status, out := call(t, "POST", base+"/publish_api/v1/instances/"+beamsInstance+"/publishes/interests", map[string]any{
		"interests": []string{"news"},
		"apns":      map[string]any{"aps": map[string]any{"alert": "hi"}},
		"fcm":       map[string]any{"notification": map[string]any{"title": "hi"}},
		"web":       map[string]any{"notification": map[string]any{"title": "hi"}},
	}, "Authorization", "Bearer "+beamsSecret)
	if status != 200 {
		t.Fatalf("publish: %d %s", status, out)
	}
	id := strings.Split(strings.Split(string(out), `"publishId":"`)[1], `"`)[0]
	wait.Until(t, "the fcm and web deliveries", func() bool { return gw.fcm.Count() == 100 && gw.web.Count() == 100 })
	if got := gw.apns.Count(); got != 0 {
		t.Fatalf("%d apns deliveries went through a gateway that answers nothing", got)
	}
	if m := most.Load(); m == 0 || m > 10 {
		t.Fatalf("the stuck gateway had %d sends waiting at most, want 1 to its share of 10", m)
	}
	if st := getStatus(t, base, id); st.State == "done" {
		t.Fatalf("done while apns is stuck: %+v", st)
	}

	close(release)
	st := waitDone(t, base, id)
	if st.Targeted != 300 || st.Sent != 300 || st.Failed != 0 {
		t.Fatalf("status %+v, want 300 targeted and sent", st)
	}
	for platform, tokens := range map[string]map[string]int{"apns": gw.apns.Tokens(), "fcm": gw.fcm.Tokens(), "web": gw.web.Tokens()} {
		if len(tokens) != 100 {
			t.Errorf("%s: %d devices notified, want 100", platform, len(tokens))
		}
		for tok, n := range tokens {
			if n != 1 {
				t.Errorf("%s: %s notified %d times", platform, tok, n)
			}
		}
	}
	if pr := append(append(gw.apns.Problems(), gw.fcm.Problems()...), gw.web.Problems()...); len(pr) > 0 {
		t.Fatalf("the fakes found problems: %v", pr)
	}
}

// Publishes with nothing to send finish at once: an interest nobody has, a
// publish to users none of whom has a device, and a stored payload that no
// longer parses (it resolves to no device rather than blocking the queue).
func TestPublishesWithoutTargetsFinish(t *testing.T) {
	gw := startGateways(t)
	n, base := serveNodeWith(t, pushConfig(t, gw, filepath.Join(t.TempDir(), "herald.db")), Options{Push: gw.pushOptions()})
	register(t, base, "fcm", "fcm-token-1", "news")
	var ids []string
	for _, p := range []struct{ path, body string }{
		{"/publishes/interests", `{"interests":["nobody-has-this"],"fcm":{"notification":{"title":"hi"}}}`},
		{"/publishes/users", `{"users":["nobody"],"fcm":{"notification":{"title":"hi"}}}`},
	} {
		status, out := call(t, "POST", base+"/publish_api/v1/instances/"+beamsInstance+p.path, json.RawMessage(p.body),
			"Authorization", "Bearer "+beamsSecret)
		if status != 200 {
			t.Fatalf("%s: %d %s", p.path, status, out)
		}
		ids = append(ids, strings.Split(strings.Split(string(out), `"publishId":"`)[1], `"`)[0])
	}
	broken, err := n.db.CreatePublish(t.Context(), storage.Publish{ID: "broken-payload", InstanceID: beamsInstance,
		TargetKind: storage.TargetInterests, Targets: []string{"news"}, Payload: json.RawMessage(`{"fcm":"not an object"}`)}, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	n.push.Notify()
	for _, id := range append(ids, broken.ID) {
		if st := waitDone(t, base, id); st.Targeted != 0 || st.Sent != 0 || st.Failed != 0 {
			t.Fatalf("%s: %+v, want done with nothing targeted", id, st)
		}
	}
	if got := gw.fcm.Count(); got != 0 {
		t.Fatalf("%d notifications sent", got)
	}
}
