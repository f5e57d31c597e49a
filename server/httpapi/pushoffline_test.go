package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/gen/channelsclient"
	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/directory"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/storage"
)

// onePublishQuotaID is an instance that may publish once a day.
const onePublishQuotaID = "7e0b3f7a-2c1d-4e5f-8a9b-0c1d2e3f4a5b"

// publishes records the publishes a PublishAPI stored.
type publishes struct {
	mu  sync.Mutex
	ids []string
}

func (p *publishes) Published(id string, _ *push.Payload) {
	p.mu.Lock()
	p.ids = append(p.ids, id)
	p.mu.Unlock()
}

func (p *publishes) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ids)
}

// pushOfflineServer is the Channels API of apps linked to Push instances,
// publishing through a Publish API over db.
type pushOfflineServer struct {
	*testServer
	db        *storage.DB
	pub       *PublishAPI
	published *publishes
}

func newPushOfflineServer(t *testing.T) *pushOfflineServer {
	t.Helper()
	return newPushOfflineServerWith(t, PublishOptions{})
}

// newPushOfflineServerWith is newPushOfflineServer with a Publish API of
// the options pubOpts.
func newPushOfflineServerWith(t *testing.T, pubOpts PublishOptions) *pushOfflineServer {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	db := openPushDB(t)
	if _, err := db.CreateInstance(context.Background(), storage.Instance{ID: onePublishQuotaID, SecretKey: pushSecret, Enabled: true, PublishQuota: 1}); err != nil {
		t.Fatal(err)
	}
	dir, err := directory.NewInstances(context.Background(), db, log)
	if err != nil {
		t.Fatal(err)
	}
	published := &publishes{}
	pub := NewPublishAPI(db, dir, published, log, pubOpts)
	apps := staticApps{
		"key1":     {ID: "1", Key: "key1", Secret: "secret1", Enabled: true, SubscriptionCount: true, PushInstance: pushInstanceID},
		"key2":     {ID: "2", Key: "key2", Secret: "secret2", Enabled: true},
		"disabled": {ID: "3", Key: "disabled", Secret: "secret3", Enabled: true, PushInstance: disabledInstanceID},
		"quota":    {ID: "4", Key: "quota", Secret: "secret4", Enabled: true, PushInstance: onePublishQuotaID},
	}
	s := newTestServerWith(t, apps, func(o *ChannelsOptions) { o.PushIfOffline = pub })
	return &pushOfflineServer{testServer: s, db: db, pub: pub, published: published}
}

// signedIn connects a user of app 1 as the WebSocket layer does on
// pusher:signin: signed in, and subscribed to the user's channel.
func (s *pushOfflineServer) signedIn(t *testing.T, user string) *hub.Conn {
	t.Helper()
	c := s.subscriber(t, "1", "", hub.ServerToUserPrefix+user)
	if err := s.hub.SignIn(c, user, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// trigger sends a signed trigger as app key (secret "secret"+id) and
// returns the status and body.
func (s *pushOfflineServer) trigger(t *testing.T, key, secret, body string, header ...string) (int, map[string]any) {
	t.Helper()
	res, err := s.rawTrigger(t, key, secret, body, header...)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, out
}

func (s *pushOfflineServer) rawTrigger(t *testing.T, key, secret, body string, header ...string) (*http.Response, error) {
	t.Helper()
	c, err := channelsclient.NewClient(s.url, channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner(key, secret)))
	if err != nil {
		t.Fatal(err)
	}
	appID := s.appID(key)
	return c.TriggerEventWithBody(context.Background(), appID, nil, "application/json", strings.NewReader(body),
		func(_ context.Context, r *http.Request) error {
			for i := 0; i+1 < len(header); i += 2 {
				r.Header.Set(header[i], header[i+1])
			}
			return nil
		})
}

func (s *pushOfflineServer) appID(key string) string {
	return map[string]string{"key1": "1", "key2": "2", "disabled": "3", "quota": "4"}[key]
}

// pushBody is a trigger of event hello to channel with push_if_offline.
func pushBody(channel string) string {
	return `{"name":"hello","data":"{\"n\":1}","channel":"` + channel + `","push_if_offline":{"fcm":{"notification":{"title":"hi"}}}}`
}

func TestPushIfOfflineOnline(t *testing.T) {
	s := newPushOfflineServer(t)
	alice := s.signedIn(t, "alice")
	status, body := s.trigger(t, "key1", "secret1", pushBody("#server-to-user-alice"))
	if status != 200 || body["delivered_via"] != "socket" || body["publish_id"] != nil {
		t.Fatalf("got %d %v, want 200 delivered_via socket", status, body)
	}
	if got := strings.Join(s.received(t, alice), " "); got != `#server-to-user-alice:hello:{"n":1}` {
		t.Fatalf("alice received %q", got)
	}
	if got := s.published.list(); len(got) != 0 {
		t.Fatalf("published %v for a user who is online", got)
	}
	// With info, the channel's attributes come too.
	status, body = s.trigger(t, "key1", "secret1", strings.Replace(pushBody("#server-to-user-alice"), `"name"`, `"info":"subscription_count","name"`, 1))
	if status != 200 || body["delivered_via"] != "socket" || body["channels"] == nil {
		t.Fatalf("with info: got %d %v", status, body)
	}
}

func TestPushIfOfflineOffline(t *testing.T) {
	s := newPushOfflineServer(t)
	// Subscribed to bob's channel but not signed in as bob: bob is offline,
	// and the event does not go over the socket.
	listener := s.subscriber(t, "1", "", "#server-to-user-bob")
	// Another user signed in is no one's proxy.
	s.signedIn(t, "alice")
	status, body := s.trigger(t, "key1", "secret1", pushBody("#server-to-user-bob"))
	id, _ := body["publish_id"].(string)
	if status != 200 || body["delivered_via"] != "push" || !strings.HasPrefix(id, "pubid-") {
		t.Fatalf("got %d %v, want 200 delivered_via push with a publish_id", status, body)
	}
	if got := s.published.list(); !slices.Equal(got, []string{id}) {
		t.Fatalf("the dispatcher was told of %v, want %s", got, id)
	}
	p, err := s.db.GetPublish(context.Background(), pushInstanceID, id)
	if err != nil {
		t.Fatal(err)
	}
	if p.TargetKind != storage.TargetUsers || !slices.Equal(p.Targets, []string{"bob"}) || !strings.Contains(string(p.Payload), `"fcm":{"notification":{"title":"hi"}}`) {
		t.Fatalf("stored publish %+v (payload %s), want one to user bob with the fcm payload", p, p.Payload)
	}
	if got := s.received(t, listener); len(got) != 0 {
		t.Fatalf("the event went over the socket too: %v", got)
	}
	// With info, the channel's attributes come too, as when online.
	status, body = s.trigger(t, "key1", "secret1", strings.Replace(pushBody("#server-to-user-bob"), `"name"`, `"info":"subscription_count","name"`, 1))
	attrs, _ := body["channels"].(map[string]any)["#server-to-user-bob"].(map[string]any)
	if status != 200 || body["delivered_via"] != "push" || attrs == nil || attrs["subscription_count"] != float64(1) {
		t.Fatalf("with info: got %d %v, want delivered_via push and the channel's subscription_count, 1", status, body)
	}

	// A retry with the same Idempotency-Key is answered as the first was,
	// and publishes nothing again.
	key := []string{"Idempotency-Key", "offline-1"}
	_, first := s.trigger(t, "key1", "secret1", pushBody("#server-to-user-carol"), key...)
	res, err := s.rawTrigger(t, "key1", "secret1", pushBody("#server-to-user-carol"), key...)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var again map[string]any
	json.NewDecoder(res.Body).Decode(&again)
	if res.Header.Get("Idempotent-Replayed") != "true" || again["publish_id"] != first["publish_id"] || first["delivered_via"] != "push" {
		t.Fatalf("retry: %v (replayed %q), want the first answer %v", again, res.Header.Get("Idempotent-Replayed"), first)
	}
	if n := len(s.published.list()); n != 3 {
		t.Fatalf("%d publishes after the retry, want 3 (bob's two and carol's once)", n)
	}

	// The instance's daily quota holds: 402, and nothing sent.
	if status, body := s.trigger(t, "quota", "secret4", pushBody("#server-to-user-dave")); status != 200 || body["delivered_via"] != "push" {
		t.Fatalf("first publish on a quota of 1: %d %v", status, body)
	}
	if status, body := s.trigger(t, "quota", "secret4", pushBody("#server-to-user-dave")); status != 402 || body["error"] != "quota_exceeded" {
		t.Fatalf("second publish on a quota of 1: %d %v, want 402 quota_exceeded", status, body)
	}
}

func TestPushIfOfflineErrors(t *testing.T) {
	s := newPushOfflineServer(t)
	// alice is online: a bad request is refused all the same, and nothing
	// reaches her.
	alice := s.signedIn(t, "alice")
	long := strings.Repeat("u", MaxUserIDBytes+1)
	for _, tt := range []struct {
		name, key, secret, body, kind string
	}{
		{"ErrNotLinked", "key2", "secret2", pushBody("#server-to-user-alice"), KindPushNotLinked},
		{"ErrInstanceDisabled", "disabled", "secret3", pushBody("#server-to-user-alice"), KindPushNotLinked},
		{"ErrPublicChannel", "key1", "secret1", pushBody("news"), KindInvalidPushChannel},
		{"ErrTwoChannels", "key1", "secret1", `{"name":"e","data":"d","channels":["#server-to-user-alice","#server-to-user-bob"],"push_if_offline":{"fcm":{}}}`, KindInvalidPushChannel},
		{"ErrNoPayload", "key1", "secret1", `{"name":"e","data":"d","channel":"#server-to-user-alice","push_if_offline":{}}`, KindMissingPayload},
		{"ErrBadPayload", "key1", "secret1", `{"name":"e","data":"d","channel":"#server-to-user-alice","push_if_offline":{"fcm":{"data":7}}}`, KindInvalidPayload},
		{"ErrWebhookURL", "key1", "secret1", `{"name":"e","data":"d","channel":"#server-to-user-alice","push_if_offline":{"fcm":{},"webhookUrl":"ftp://x"}}`, KindInvalidWebhookUrl},
		{"ErrUserIDTooLong", "key1", "secret1", pushBody("#server-to-user-" + long), KindInvalidUserID},
		{"ErrNotAnObject", "key1", "secret1", `{"name":"e","data":"d","channel":"#server-to-user-alice","push_if_offline":[]}`, KindInvalidRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := s.trigger(t, tt.key, tt.secret, tt.body)
			if status != 400 || body["error"] != tt.kind || body["description"] == "" {
				t.Fatalf("got %d %v, want 400 %s", status, body, tt.kind)
			}
		})
	}
	t.Run("ErrInBatch", func(t *testing.T) {
		res, err := s.client.TriggerBatchEventsWithResponse(context.Background(), "1", nil, channelsclient.TriggerBatchRequest{Batch: []channelsclient.BatchEvent{
			{Name: "e", Data: "d", Channel: "news"},
			{Name: "e", Data: "d", Channel: "#server-to-user-alice", PushIfOffline: &channelsclient.PushIfOffline{}},
		}})
		if err != nil || res.StatusCode() != 400 || errKind(res.Body) != KindInvalidPushIfOffline || !strings.Contains(string(res.Body), "batch[1]") {
			t.Fatalf("got %v %d %s, want 400 %s naming batch[1]", err, res.StatusCode(), res.Body, KindInvalidPushIfOffline)
		}
	})
	if got := s.received(t, alice); len(got) != 0 {
		t.Fatalf("refused triggers reached alice: %v", got)
	}
	if got := s.published.list(); len(got) != 0 {
		t.Fatalf("refused triggers published %v", got)
	}
}

// A push_if_offline published counts against the instance's rate limit as
// a Publish API request does; one delivered over the socket does not.
func TestPushIfOfflineRateLimit(t *testing.T) {
	s := newPushOfflineServer(t)
	now := time.Now()
	s.pub.now = func() time.Time { return now } // no refill
	for range PublishRateLimit {
		if err := s.pub.takeToken(context.Background(), pushInstanceID); err != nil {
			t.Fatal(err)
		}
	}
	if status, body := s.trigger(t, "key1", "secret1", pushBody("#server-to-user-bob")); status != 429 || body["error"] != KindTooManyRequests {
		t.Fatalf("offline over the rate: got %d %v, want 429 %s", status, body, KindTooManyRequests)
	}
	if got := s.published.list(); len(got) != 0 {
		t.Fatalf("published %v over the rate", got)
	}
	s.signedIn(t, "alice")
	if status, body := s.trigger(t, "key1", "secret1", pushBody("#server-to-user-alice")); status != 200 || body["delivered_via"] != "socket" {
		t.Fatalf("online over the rate: got %d %v, want 200 over the socket", status, body)
	}
}

// A trigger with push_if_offline on a cluster that cannot tell whether the
// user is online answers 503, sending nothing either way.
func TestPushIfOfflineClusterUnavailable(t *testing.T) {
	s := newPushOfflineServer(t)
	s.hub.SetCluster(&switchedCluster{h: s.hub})
	status, body := s.trigger(t, "key1", "secret1", pushBody("#server-to-user-bob"))
	if status != 503 || body["error"] != KindClusterUnavailable {
		t.Fatalf("got %d %v, want 503 %s", status, body, KindClusterUnavailable)
	}
	if got := s.published.list(); len(got) != 0 {
		t.Fatalf("published %v without knowing", got)
	}
}

// A push_if_offline's webhook URL comes from the app's server, not from the
// Push instance's: it may lead only where a Web Push endpoint may (https to
// a host that is no internal address, or a host of AllowWebPushHosts), and
// its publish is stored as guarded, so that its webhooks are dialled
// through the guard too. The Publish API's own webhook URLs keep the
// operator's rules.
func TestPushIfOfflineWebhookGuard(t *testing.T) {
	s := newPushOfflineServer(t)
	withHook := func(url string) string {
		return `{"name":"e","data":"d","channel":"#server-to-user-bob","push_if_offline":{"fcm":{},"webhookUrl":"` + url + `"}}`
	}
	for _, url := range []string{"https://127.0.0.1/hook", "https://10.1.2.3/hook", "https://[::1]:8443/hook", "https://localhost/hook",
		"https://169.254.169.254/latest", "http://hooks.example.com/hook"} {
		status, body := s.trigger(t, "key1", "secret1", withHook(url))
		if status != 400 || body["error"] != KindInvalidWebhookUrl || !strings.Contains(body["description"].(string), "not allowed") {
			t.Fatalf("%s: got %d %v, want 400 %s", url, status, body, KindInvalidWebhookUrl)
		}
	}
	if got := s.published.list(); len(got) != 0 {
		t.Fatalf("refused webhook URLs published %v", got)
	}
	stored := func(s *pushOfflineServer, body string) storage.Publish {
		t.Helper()
		status, res := s.trigger(t, "key1", "secret1", body)
		id, _ := res["publish_id"].(string)
		if status != 200 || id == "" {
			t.Fatalf("got %d %v, want 200 with a publish_id", status, res)
		}
		p, err := s.db.GetPublish(context.Background(), pushInstanceID, id)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := stored(s, withHook("https://hooks.example.com/hook")); p.WebhookURL != "https://hooks.example.com/hook" || !p.WebhookGuarded {
		t.Fatalf("stored webhook %q guarded %v, want the public URL, guarded", p.WebhookURL, p.WebhookGuarded)
	}
	allowed := newPushOfflineServerWith(t, PublishOptions{WebPushAllowedHosts: []string{"127.0.0.1"}})
	if p := stored(allowed, withHook("http://127.0.0.1:9/hook")); !p.WebhookGuarded {
		t.Fatal("a webhook of an allowed host was stored unguarded")
	}
	ps := &publishServer{pushServer: &pushServer{db: s.db}}
	engine, _ := newPublishEngine(t, s.db, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), ps, nil)
	ps.engine = engine
	srv := httptest.NewServer(engine)
	t.Cleanup(srv.Close)
	ps.url = srv.URL
	status, res, _ := ps.do(t, pushRequest{"POST", publishPrefix + pushInstanceID + "/publishes/users", "application/json",
		`{"users":["bob"],"fcm":{},"webhookUrl":"http://127.0.0.1:9/hook"}`, "Bearer " + pushSecret})
	checkStatus(t, status, res, 200, "")
	if p, err := s.db.GetPublish(context.Background(), pushInstanceID, res["publishId"].(string)); err != nil || p.WebhookGuarded {
		t.Fatalf("the Publish API's own webhook: guarded %v (%v), want unguarded", p.WebhookGuarded, err)
	}
}

// push_if_offline's payloads are bounded as a Publish API's publish to
// users (MaxUsersPublishBytes, 200 KiB), not by the trigger's body limit
// (256 KiB): at the bound it is published, a byte over it is 413.
func TestPushIfOfflineBound(t *testing.T) {
	s := newPushOfflineServer(t)
	sized := func(n int) string {
		fcm := `{"data":{"k":"` // … `"}}`
		return `{"name":"e","data":"d","channel":"#server-to-user-bob","push_if_offline":{"fcm":` + fcm + strings.Repeat("x", n-len(fcm)-3) + `"}}}}`
	}
	if status, body := s.trigger(t, "key1", "secret1", sized(MaxUsersPublishBytes)); status != 200 || body["delivered_via"] != "push" {
		t.Fatalf("at the bound: got %d %v, want 200 delivered_via push", status, body)
	}
	status, body := s.trigger(t, "key1", "secret1", sized(MaxUsersPublishBytes+1))
	if status != 413 || body["error"] != KindBodyTooLarge || !strings.Contains(body["description"].(string), "200 KiB") {
		t.Fatalf("a byte over: got %d %v, want 413 %s naming 200 KiB", status, body, KindBodyTooLarge)
	}
	if n := len(s.published.list()); n != 1 {
		t.Fatalf("%d publishes, want the one at the bound", n)
	}
}
