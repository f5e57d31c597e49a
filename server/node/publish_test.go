package node

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pushnotifications "github.com/pusher/push-notifications-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/storage/testpg"
)

const (
	beamsInstance = "5d2c1b0a-9e8f-4a7b-8c6d-5e4f3a2b1c0d"
	beamsSecret   = "PUBLISH-SECRET-0123456789ABCDEF"
)

// gateways are the three fake gateways of a test.
type gateways struct {
	apns *pushtest.APNs
	fcm  *pushtest.FCM
	web  *pushtest.WebPush
}

func startGateways(t testing.TB) *gateways {
	t.Helper()
	g := pushtest.Start(t)
	return &gateways{apns: g.APNs, fcm: g.FCM, web: g.Web}
}

// pushConfig is a node configuration with the default instance wired to the
// fake gateways through the same settings as the HERALD_* variables.
func pushConfig(t testing.TB, gw *gateways, db string) config.Config {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return config.Config{
		DB:                    db,
		InstanceID:            beamsInstance,
		InstanceSecretKey:     beamsSecret,
		APNsKeyFile:           write("key.p8", gw.apns.KeyPEM),
		APNsKeyID:             gw.apns.KeyID,
		APNsTeamID:            gw.apns.TeamID,
		APNsTopic:             "com.example.fallback",
		APNsURL:               gw.apns.URL,
		APNsCAFile:            write("ca.pem", gw.apns.CAPEM),
		FCMServiceAccountFile: write("sa.json", gw.fcm.ServiceAccount),
		FCMURL:                gw.fcm.URL,
		VAPIDSubject:          "mailto:ops@example.com",
		WebPushAllowedHosts:   []string{"127.0.0.1", "localhost"}, // the fakes listen on loopback
	}
}

// pushOptions makes retries quick and trusts the fakes' certificate.
func (gw *gateways) pushOptions() push.Options {
	return push.Options{BaseBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, RootCAs: gw.roots()}
}

// roots trusts the fakes' certificate (the same for all three).
func (gw *gateways) roots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(gw.fcm.CAPEM))
	return pool
}

// serveNode starts a node with cfg on a free port until the test ends.
func serveNode(t testing.TB, cfg config.Config) (*Node, string) {
	t.Helper()
	return serveNodeWith(t, cfg, Options{})
}

// serveNodeWith is serveNode with the node's options o.
func serveNodeWith(t testing.TB, cfg config.Config, o Options) (*Node, string) {
	t.Helper()
	n, addr := serveNodeLog(t, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), o)
	return n, "http://" + addr
}

// serveNodeLog starts a node with cfg and the options o, logging to log, on
// a free port until the test ends, and returns it with its host:port.
func serveNodeLog(t testing.TB, cfg config.Config, log *zap.Logger, o Options) (*Node, string) {
	t.Helper()
	n, err := New(context.Background(), cfg, log, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return n, ln.Addr().String()
}

// call sends a JSON request and returns the status and body.
func call(t testing.TB, method, url string, body any, headers ...string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// beamsDevice is a device registered through the Device API.
type beamsDevice struct {
	platform, id, token string
	web                 *pushtest.WebSubscriber
}

func register(t testing.TB, base string, platform, token string, interests ...string) beamsDevice {
	t.Helper()
	root := base + "/device_api/v1/instances/" + beamsInstance
	body := map[string]any{"token": token}
	if platform == "apns" {
		body["bundleIdentifier"] = "com.example.app"
	}
	status, out := call(t, "POST", root+"/devices/"+platform, body)
	if status != 200 {
		t.Fatalf("register %s: %d %s", platform, status, out)
	}
	var res struct{ ID string }
	json.Unmarshal(out, &res)
	if len(interests) > 0 {
		if status, out := call(t, "PUT", root+"/devices/"+platform+"/"+res.ID+"/interests", map[string]any{"interests": interests}); status != 200 {
			t.Fatalf("interests: %d %s", status, out)
		}
	}
	return beamsDevice{platform: platform, id: res.ID, token: token}
}

func deviceExists(t testing.TB, base string, d beamsDevice) bool {
	t.Helper()
	status, out := call(t, "GET", base+"/device_api/v1/instances/"+beamsInstance+"/devices/"+d.platform+"/"+d.id, nil)
	if status != 200 && status != 404 {
		t.Fatalf("get device: %d %s", status, out)
	}
	return status == 200
}

type publishStatus struct {
	State                                     string
	Targeted, Sent, Failed, Delivered, Opened int
}

func getStatus(t testing.TB, base, id string) publishStatus {
	t.Helper()
	status, out := call(t, "GET", base+"/publish_api/v1/instances/"+beamsInstance+"/publishes/"+id, nil, "Authorization", "Bearer "+beamsSecret)
	if status != 200 {
		t.Fatalf("publish status: %d %s", status, out)
	}
	var s publishStatus
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitDone polls a publish's status through base until it is done.
func waitDone(t testing.TB, base, id string) publishStatus {
	t.Helper()
	// A publish is slow on a loaded machine, never stuck: the wait fails
	// only when its counts have not moved for stall, whatever the total.
	const stall = 120 * time.Second
	var last publishStatus
	deadline := time.Now().Add(stall)
	for {
		s := getStatus(t, base, id)
		if s.State == "done" {
			return s
		}
		if s.Targeted != last.Targeted || s.Sent+s.Failed != last.Sent+last.Failed || s.State != last.State {
			last, deadline = s, time.Now().Add(stall)
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish %s made no progress for %v: %+v", id, stall, s)
		}
		// Every 20 ms: the Publish API allows 100 requests per second.
		time.Sleep(20 * time.Millisecond)
	}
}

// pusherMeta extracts data.pusher from a delivered message.
func pusherMeta(t testing.TB, m pushtest.Message) push.Metadata {
	t.Helper()
	var meta push.Metadata
	switch m.Platform {
	case "apns", "web":
		var body struct {
			Data struct{ Pusher push.Metadata } `json:"data"`
		}
		if err := json.Unmarshal(m.Body, &body); err != nil {
			t.Fatal(err)
		}
		meta = body.Data.Pusher
	case "fcm":
		var msg struct{ Data map[string]string }
		if err := json.Unmarshal(m.Body, &msg); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(msg.Data["pusher"]), &meta); err != nil {
			t.Fatalf("fcm data.pusher %q: %v", msg.Data["pusher"], err)
		}
	}
	return meta
}

// webhookSink records publish webhooks and checks their signature.
type webhookSink struct {
	mu     sync.Mutex
	events []map[string]any
	bad    []string
}

func (s *webhookSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if got, want := r.Header.Get(push.WebhookSignatureHeader), push.SignWebhook(beamsSecret, body); got != want {
		s.bad = append(s.bad, fmt.Sprintf("signature %q, want %q", got, want))
	}
	var ev map[string]any
	json.Unmarshal(body, &ev)
	s.events = append(s.events, ev)
}

// The Beams Go server SDK publishes through a real node to devices of all
// three platforms on the fake gateways, which check the wire formats.
func TestBeamsPublishGoSDK(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { testBeamsPublishGoSDK(t, filepath.Join(t.TempDir(), "herald.db")) })
	t.Run("PostgreSQL", func(t *testing.T) { testBeamsPublishGoSDK(t, testpg.Start(t)) })
}

// testBeamsPublishGoSDK publishes with the Go SDK to devices registered on
// a node whose state is in db, a SQLite file or a PostgreSQL URL.
func testBeamsPublishGoSDK(t *testing.T, db string) {
	gw := startGateways(t)
	n, base := serveNodeWith(t, pushConfig(t, gw, db), Options{Push: gw.pushOptions()})
	in, err := n.db.GetInstance(context.Background(), beamsInstance)
	if err != nil {
		t.Fatal(err)
	}
	gw.web.VAPIDPublicKey = in.VAPID.PublicKey

	beams, err := pushnotifications.New(beamsInstance, beamsSecret, pushnotifications.WithCustomBaseURL(base))
	if err != nil {
		t.Fatal(err)
	}
	sub1, _ := gw.web.Subscribe()
	subDead, _ := gw.web.Subscribe()
	ios := register(t, base, "apns", "aa01", "news", "sports") // both interests: one notification
	android := register(t, base, "fcm", "fcm-token-1", "news")
	browser := register(t, base, "web", sub1.Token(), "sports", "news")
	browser.web = sub1
	iosDead := register(t, base, "apns", "dead01", "news")
	androidDead := register(t, base, "fcm", "fcm-dead", "sports")
	browserDead := register(t, base, "web", subDead.Token(), "news")
	browserDead.web = subDead
	other := register(t, base, "fcm", "fcm-other", "weather") // not targeted
	gw.apns.Dead("dead01")
	gw.fcm.Dead("fcm-dead")
	gw.web.Dead(subDead)

	hooks := &webhookSink{}
	hookSrv := httptest.NewServer(hooks)
	defer hookSrv.Close()

	request := map[string]any{
		"apns": map[string]any{
			"aps":     map[string]any{"alert": map[string]any{"title": "Hello", "body": "from Herald"}},
			"data":    map[string]any{"article": 42},
			"headers": map[string]any{"apns-collapse-id": "news-42", "apns-expiration": "1900000000"},
		},
		"fcm": map[string]any{
			"notification": map[string]any{"title": "Hello", "body": "from Herald"},
			"data":         map[string]any{"article": 42, "kind": "news"},
			"time_to_live": 3600, "priority": "high", "collapse_key": "news",
		},
		"web": map[string]any{
			"notification": map[string]any{"title": "Hello", "body": "from Herald", "deep_link": "https://example.com/42"},
			"data":         map[string]any{"article": 42},
			"time_to_live": 600,
		},
		"webhookUrl": hookSrv.URL + "/hooks",
	}
	publishID, err := beams.PublishToInterests([]string{"news", "sports"}, request)
	if err != nil {
		t.Fatal(err)
	}
	st := waitDone(t, base, publishID)
	if st.Targeted != 6 || st.Sent != 3 || st.Failed != 3 {
		t.Fatalf("status %+v, want 6 targeted, 3 sent, 3 failed", st)
	}

	for _, d := range []beamsDevice{ios, android, browser} {
		token := d.token
		var inbox *pushtest.Inbox
		switch d.platform {
		case "apns":
			inbox = gw.apns.Inbox
		case "fcm":
			inbox = gw.fcm.Inbox
		case "web":
			inbox, token = gw.web.Inbox, d.web.ID
		}
		msgs := inbox.For(token)
		if len(msgs) != 1 {
			t.Fatalf("%s device got %d notifications, want 1", d.platform, len(msgs))
		}
		meta := pusherMeta(t, msgs[0])
		if meta.PublishID != publishID || meta.InstanceID != beamsInstance || !meta.HasDisplayableContent || !meta.HasData {
			t.Errorf("%s data.pusher = %+v", d.platform, meta)
		}
		if strings.Contains(string(msgs[0].Body), "userId") {
			t.Errorf("%s message of a publish to interests names a user: %s", d.platform, msgs[0].Body)
		}
	}
	apnsMsg := gw.apns.For("aa01")[0]
	for k, want := range map[string]string{"apns-topic": "com.example.app", "apns-push-type": "alert", "apns-priority": "10",
		"apns-collapse-id": "news-42", "apns-expiration": "1900000000"} {
		if apnsMsg.Headers[k] != want {
			t.Errorf("APNs header %s = %q, want %q", k, apnsMsg.Headers[k], want)
		}
	}
	if !strings.Contains(string(apnsMsg.Body), `"aps":{"alert":{"body":"from Herald","title":"Hello"}}`) || strings.Contains(string(apnsMsg.Body), "headers") {
		t.Errorf("APNs body %s", apnsMsg.Body)
	}
	var fcmMsg struct {
		Data    map[string]string
		Android struct {
			TTL          string `json:"ttl"`
			Priority     string `json:"priority"`
			CollapseKey  string `json:"collapse_key"`
			Notification map[string]string
		}
	}
	json.Unmarshal(gw.fcm.For("fcm-token-1")[0].Body, &fcmMsg)
	if fcmMsg.Data["article"] != "42" || fcmMsg.Data["kind"] != "news" || fcmMsg.Android.TTL != "3600s" || fcmMsg.Android.Priority != "HIGH" ||
		fcmMsg.Android.CollapseKey != "news" || fcmMsg.Android.Notification["title"] != "Hello" {
		t.Errorf("FCM message %s", gw.fcm.For("fcm-token-1")[0].Body)
	}
	webMsg := gw.web.For(sub1.ID)[0]
	var webBody struct {
		Notification map[string]string
		Data         map[string]any
	}
	json.Unmarshal(webMsg.Body, &webBody)
	if webMsg.Headers["TTL"] != "600" || webBody.Notification["deep_link"] != "https://example.com/42" || webBody.Data["article"] != float64(42) {
		t.Errorf("web message %s, headers %v", webMsg.Body, webMsg.Headers)
	}
	if len(gw.fcm.Inbox.For("fcm-other")) != 0 {
		t.Error("a device of another interest was notified")
	}
	for _, d := range []beamsDevice{iosDead, androidDead, browserDead} {
		if deviceExists(t, base, d) {
			t.Errorf("%s device with a dead token still exists", d.platform)
		}
	}
	for _, d := range []beamsDevice{ios, android, browser, other} {
		if !deviceExists(t, base, d) {
			t.Errorf("live %s device was deleted", d.platform)
		}
	}
	for _, f := range [][]string{gw.apns.Problems(), gw.fcm.Problems(), gw.web.Problems()} {
		if len(f) > 0 {
			t.Errorf("gateway problems: %v", f)
		}
	}

	// Delivery and open reports show up in the status.
	reports := base + "/reporting_api/v2/instances/" + beamsInstance + "/events"
	for _, ev := range []map[string]any{
		{"event": "delivery", "publishId": publishID, "deviceId": ios.id, "timestampSecs": time.Now().Unix()},
		{"event": "Delivery", "publishId": publishID, "deviceId": android.id, "timestampSecs": time.Now().Unix()},
		{"event": "open", "publishId": publishID, "deviceId": ios.id, "timestampSecs": time.Now().Unix()},
	} {
		if status, out := call(t, "POST", reports, ev); status != 200 {
			t.Fatalf("report: %d %s", status, out)
		}
	}
	if st := getStatus(t, base, publishID); st.Delivered != 2 || st.Opened != 1 {
		t.Errorf("status after reports %+v, want 2 delivered and 1 opened", st)
	}

	// Publish webhooks: started and finished, signed, with counts.
	wait.Until(t, "two publish webhooks", func() bool { hooks.mu.Lock(); defer hooks.mu.Unlock(); return len(hooks.events) >= 2 })
	hooks.mu.Lock()
	if len(hooks.bad) > 0 || hooks.events[0]["event"] != "publish_started" || hooks.events[1]["event"] != "publish_finished" ||
		hooks.events[1]["sent"] != float64(3) || hooks.events[1]["failed"] != float64(3) || hooks.events[1]["publishId"] != publishID {
		t.Errorf("webhooks %v, problems %v", hooks.events, hooks.bad)
	}
	hooks.mu.Unlock()

	t.Run("PublishToUsers", func(t *testing.T) {
		token, err := beams.GenerateToken("alice")
		if err != nil {
			t.Fatal(err)
		}
		bobToken, err := beams.GenerateToken("bob")
		if err != nil {
			t.Fatal(err)
		}
		sub, _ := gw.web.Subscribe()
		aliceWeb := register(t, base, "web", sub.Token())
		aliceIOS := register(t, base, "apns", "a11ce0")
		aliceAndroid := register(t, base, "fcm", "fcm-alice")
		bobIOS := register(t, base, "apns", "b0b0")
		for _, d := range []beamsDevice{aliceWeb, aliceIOS, aliceAndroid, bobIOS} {
			bearer := token["token"].(string)
			if d.id == bobIOS.id {
				bearer = bobToken["token"].(string)
			}
			url := base + "/device_api/v1/instances/" + beamsInstance + "/devices/" + d.platform + "/" + d.id + "/user"
			if status, out := call(t, "PUT", url, nil, "Authorization", "Bearer "+bearer); status != 200 {
				t.Fatalf("set user: %d %s", status, out)
			}
		}
		id, err := beams.PublishToUsers([]string{"alice", "alice", "nobody", "bob"}, map[string]any{
			"apns": map[string]any{"aps": map[string]any{"content-available": 1}},
			"fcm":  map[string]any{"data": map[string]any{"k": "v"}},
			"web":  map[string]any{"notification": map[string]any{"title": "Hi Alice"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if st := waitDone(t, base, id); st.Targeted != 4 || st.Sent != 4 {
			t.Fatalf("status %+v, want 4 targeted and sent", st)
		}
		msgs := gw.apns.For("a11ce0")
		if len(msgs) != 1 || msgs[0].Headers["apns-push-type"] != "background" || msgs[0].Headers["apns-priority"] != "5" {
			t.Fatalf("alice's iOS device got %+v", msgs)
		}
		if meta := pusherMeta(t, msgs[0]); meta.HasDisplayableContent || meta.HasData || meta.PublishID != id || meta.UserID != "alice" {
			t.Errorf("background data.pusher = %+v", meta)
		}
		got := gw.web.For(sub.ID)
		if len(got) != 1 {
			t.Fatalf("alice's browser got %d notifications", len(got))
		}
		if meta := pusherMeta(t, got[0]); meta.PublishID != id || meta.UserID != "alice" || !meta.HasDisplayableContent {
			t.Errorf("web data.pusher = %+v", meta)
		}
		got = gw.fcm.For("fcm-alice")
		if len(got) != 1 {
			t.Fatalf("alice's Android device got %d notifications", len(got))
		}
		if meta := pusherMeta(t, got[0]); meta.PublishID != id || meta.UserID != "alice" || !meta.HasData {
			t.Errorf("fcm data.pusher = %+v", meta)
		}
		got = gw.apns.For("b0b0")
		if len(got) != 1 {
			t.Fatalf("bob's iOS device got %d notifications", len(got))
		}
		if meta := pusherMeta(t, got[0]); meta.PublishID != id || meta.UserID != "bob" {
			t.Errorf("bob's data.pusher = %+v", meta)
		}
		if err := beams.DeleteUser("bob"); err != nil {
			t.Fatal(err)
		}

		if err := beams.DeleteUser("alice"); err != nil {
			t.Fatal(err)
		}
		if deviceExists(t, base, aliceWeb) || deviceExists(t, base, aliceIOS) {
			t.Error("alice's devices survived DeleteUser")
		}
		if err := beams.DeleteUser("alice"); err != nil {
			t.Errorf("deleting a user without devices: %v", err)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		wrong, _ := pushnotifications.New(beamsInstance, "not-the-secret", pushnotifications.WithCustomBaseURL(base))
		if _, err := wrong.PublishToInterests([]string{"news"}, map[string]any{"fcm": map[string]any{}}); err == nil || !strings.Contains(err.Error(), "incorrect_api_key") {
			t.Errorf("wrong secret: %v", err)
		}
		if _, err := beams.PublishToInterests([]string{"news"}, map[string]any{"nothing": 1}); err == nil || !strings.Contains(err.Error(), "missing_payload") {
			t.Errorf("no payload: %v", err)
		}
	})
}
