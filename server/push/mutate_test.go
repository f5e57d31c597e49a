package push

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/oauth2"

	"github.com/heraldrt/herald/gen/publish"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/netguard"
	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/storage"
)

// Tests that kill mutants gremlins found alive (make mutate); the
// equivalent ones are listed in scripts/mutate-equivalent.md.

// The limits of a payload, on both sides: a TTL of four weeks is the most
// accepted and the Web Push default; apns-expiration is Unix seconds; a
// collapse id is at most 64 bytes.
func TestPayloadLimits(t *testing.T) {
	const fourWeeks = 2_419_200
	if DefaultWebTTL != fourWeeks {
		t.Fatalf("DefaultWebTTL = %d, want four weeks (%d s)", DefaultWebTTL, fourWeeks)
	}
	ok := []struct{ apns, fcm, web string }{
		{"", `{"time_to_live":2419200}`, ""},
		{"", "", `{"time_to_live":2419200}`},
		{"", "", `{"time_to_live":0}`},
		{`{"headers":{"apns-expiration":"1800000000"}}`, "", ""},
		{`{"headers":{"apns-expiration":""}}`, "", ""},
		{`{"headers":{"apns-collapse-id":"` + strings.Repeat("c", 64) + `"}}`, "", ""},
	}
	for _, tc := range ok {
		if _, err := ParsePayload(raw(tc.apns), raw(tc.fcm), raw(tc.web)); err != nil {
			t.Errorf("%s %s %s: %v, want it accepted", tc.apns, tc.fcm, tc.web, err)
		}
	}
	refused := []struct{ apns, fcm, web, field string }{
		{"", "", `{"time_to_live":2419201}`, "web.time_to_live"},
		{"", "", `{"time_to_live":-1}`, "web.time_to_live"},
		{`{"headers":{"apns-expiration":"soon"}}`, "", "", "apns.headers.apns-expiration"},
		{`{"headers":{"apns-expiration":"-1"}}`, "", "", "apns.headers.apns-expiration"},
	}
	for _, tc := range refused {
		_, err := ParsePayload(raw(tc.apns), raw(tc.fcm), raw(tc.web))
		if pe, ok := err.(*PayloadError); !ok || pe.Field != tc.field {
			t.Errorf("%s %s %s: %v, want a PayloadError on %s", tc.apns, tc.fcm, tc.web, err, tc.field)
		}
	}
}

func raw(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// An FCM notification without data says so in data.pusher.
func TestPrepareFCMWithoutData(t *testing.T) {
	p := mustPrepare(t, "", `{"notification":{"title":"T"}}`, "")
	var req struct {
		Message struct {
			Data map[string]string `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(p.FCMRequest("t"), &req); err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	if err := json.Unmarshal([]byte(req.Message.Data["pusher"]), &meta); err != nil {
		t.Fatal(err)
	}
	wantMeta(t, meta, true, false)
}

// A token of any length goes into the FCM message as it is.
func TestFCMRequestLongToken(t *testing.T) {
	p := mustPrepare(t, "", `{}`, "")
	token := strings.Repeat("t", 4096)
	var req struct {
		Message struct {
			Token string `json:"token"`
		} `json:"message"`
	}
	if err := json.Unmarshal(p.FCMRequest(token), &req); err != nil || req.Message.Token != token {
		t.Fatalf("token of %d bytes: %d bytes back (%v)", len(token), len(req.Message.Token), err)
	}
}

func TestClassifyStatusEdges(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   storage.DeliveryOutcome
	}{{199, storage.DeliveryFailed}, {299, storage.DeliverySent}, {300, storage.DeliveryFailed}, {428, storage.DeliveryFailed},
		{430, storage.DeliveryFailed}, {499, storage.DeliveryFailed}} {
		if r := classifyStatus(tc.status, "x", 0); r.Outcome != tc.want {
			t.Errorf("classifyStatus(%d) = %v, want %v", tc.status, r.Outcome, tc.want)
		}
	}
}

// Every gateway connection and request is bounded in time, so a gateway
// that stops answering cannot hold a sender forever.
func TestGatewayTimeouts(t *testing.T) {
	check := func(name string, rt http.RoundTripper) {
		t.Helper()
		st, ok := rt.(schemeTransport)
		if !ok {
			t.Fatalf("%s: transport %T", name, rt)
		}
		var h2, plain *http.Transport
		if name == "web" { // through the guard (TestWebPushGuard)
			h2, plain = st.tls.(*netguard.Guarded).Base(), st.plain.(*netguard.Guarded).Base()
		} else {
			h2, plain = st.tls.(*http.Transport), st.plain.(*http.Transport)
		}
		if h2.IdleConnTimeout != 5*time.Minute || h2.TLSHandshakeTimeout != 10*time.Second || h2.MaxConnsPerHost != 1 || !h2.ForceAttemptHTTP2 {
			t.Errorf("%s: TLS transport idle %v, handshake %v, %d connections at a time", name, h2.IdleConnTimeout, h2.TLSHandshakeTimeout, h2.MaxConnsPerHost)
		}
		if plain.IdleConnTimeout != 5*time.Minute || plain.MaxIdleConns != 256 || plain.MaxIdleConnsPerHost != 128 {
			t.Errorf("%s: plain transport idle %v, %d idle, %d per host", name, plain.IdleConnTimeout, plain.MaxIdleConns, plain.MaxIdleConnsPerHost)
		}
	}
	apns, err := pushtest.NewAPNs()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(apns.Close)
	a, err := NewAPNs(storage.APNsConfig{KeyPEM: apns.KeyPEM, KeyID: apns.KeyID, TeamID: apns.TeamID, Topic: "t", URL: apns.URL})
	if err != nil {
		t.Fatal(err)
	}
	check("apns", a.client.Transport)
	if a.client.Timeout != 30*time.Second {
		t.Errorf("apns: request timeout %v, want 30s", a.client.Timeout)
	}
	sa, _, err := pushtest.NewServiceAccount("proj", "https://oauth.example/token")
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFCM(storage.FCMConfig{ServiceAccountJSON: sa}, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("fcm", f.client.Transport)
	if f.client.Timeout != 30*time.Second {
		t.Errorf("fcm: request timeout %v, want 30s", f.client.Timeout)
	}
	if c, _ := f.tokenCtx.Value(oauth2.HTTPClient).(*http.Client); c == nil || c.Timeout != 10*time.Second {
		t.Errorf("fcm: token request client %v, want a 10 s timeout", c)
	}
	w, err := NewWebPush(newVAPID(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("web", w.client.Transport)
	if w.client.Timeout != 30*time.Second {
		t.Errorf("web: request timeout %v, want 30s", w.client.Timeout)
	}
}

// A provider token is renewed once it is APNsTokenLifetime old, not after.
func TestAPNsProviderTokenRenewedAtLifetime(t *testing.T) {
	a := newAPNsSender(t, newGateway(t, true, func(int, *http.Request, http.ResponseWriter) {}))
	now := time.Unix(1_800_000_000, 0)
	a.now = func() time.Time { return now }
	t1, _ := a.providerToken("")
	now = now.Add(APNsTokenLifetime)
	if t2, _ := a.providerToken(""); t2 == t1 {
		t.Fatal("token not renewed at the end of its lifetime")
	}
}

// A CA configured for APNs is trusted besides the system's roots, not
// instead of them.
func TestAPNsCAAddedToSystemRoots(t *testing.T) {
	g := newGateway(t, true, func(int, *http.Request, http.ResponseWriter) {})
	a := newAPNsSender(t, g)
	want, err := x509.SystemCertPool()
	if err != nil {
		t.Skip("no system roots:", err)
	}
	want.AppendCertsFromPEM([]byte(g.ca))
	got := a.client.Transport.(schemeTransport).tls.(*http.Transport).TLSClientConfig.RootCAs
	if !got.Equal(want) {
		t.Fatal("the APNs roots are not the system's plus the configured CA")
	}
}

// dispatchTo starts a dispatcher whose senders are send for every platform,
// and registers one APNs device per id, interested in "news" and in its id.
func dispatchTo(t *testing.T, opts Options, log *zap.Logger, send senderFunc, ids ...string) (*storage.DB, *Dispatcher) {
	t.Helper()
	db, in := openTestDB(t, storage.Instance{})
	var devices []storage.DeviceImport
	for _, id := range ids {
		devices = append(devices, storage.DeviceImport{Device: storage.Device{ID: id, InstanceID: in.ID, Platform: storage.PlatformAPNs,
			Token: "tok-" + id}, Interests: []string{"news", id}})
	}
	if err := db.ImportDevices(t.Context(), devices); err != nil {
		t.Fatal(err)
	}
	opts.Senders = func(*storage.Instance) (map[storage.Platform]Sender, error) {
		return map[storage.Platform]Sender{storage.PlatformAPNs: send, storage.PlatformFCM: send, storage.PlatformWeb: send}, nil
	}
	d := New(db, instanceMap{in.ID: &in}, log, opts)
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return db, d
}

// A delivery a gateway keeps answering with a transient error is tried
// exactly MaxAttempts times, then counted failed; the publish then is done,
// nothing is left queued, and each attempt not sent is logged (at debug).
func TestDeliveryFailsAfterMaxAttempts(t *testing.T) {
	var mu sync.Mutex
	attempts := map[string]int{}
	send := func(_ context.Context, del storage.Delivery, _ *Prepared) Result {
		mu.Lock()
		defer mu.Unlock()
		attempts[del.DeviceID]++
		if del.DeviceID == "apns-down" {
			return retry("503", 0)
		}
		return sent()
	}
	core, logs := observer.New(zapcore.DebugLevel)
	// The idle polls are an hour: a retry that waited for one instead of its
	// due time would never come.
	db, d := dispatchTo(t, Options{MaxAttempts: 3, BaseBackoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, idlePoll: time.Hour},
		zap.New(core), send, "apns-down", "apns-up")
	publishTo(t, db, d, "pub-1", "news")
	p := waitPublishDone(t, db, "pub-1")
	if p.Targeted != 2 || p.Sent != 1 || p.Failed != 1 {
		t.Errorf("publish targeted %d, sent %d, failed %d; want 2, 1, 1", p.Targeted, p.Sent, p.Failed)
	}
	mu.Lock()
	if attempts["apns-down"] != 3 || attempts["apns-up"] != 1 {
		t.Errorf("attempts %v, want 3 at the device whose gateway is down, 1 at the other", attempts)
	}
	mu.Unlock()
	for outcome, want := range map[string]int64{OutcomeDelivered: 1, OutcomeRetried: 2, OutcomeFailed: 1, OutcomeDeadToken: 0} {
		if got := deliveryCount(d, storage.PlatformAPNs, outcome); got != want {
			t.Errorf("%s attempts: %d, want %d", outcome, got, want)
		}
	}
	if c := d.PushCounters(); c.QueueDepth != 0 || d.InFlight() != 0 {
		t.Errorf("queue depth %d, %d in flight after the publish is done", c.QueueDepth, d.InFlight())
	}
	if n := logs.FilterMessage("resuming deliveries claimed by an earlier run").Len(); n != 0 {
		t.Errorf("a fresh start logged %d resumed claims", n)
	}
	// The resolver forgets a publish once it is done.
	wait.Until(t, "the resolver to forget the publish", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.reading) == 0
	})
	notSent := logs.FilterMessage("delivery not sent")
	if notSent.Len() != 3 || notSent.FilterField(zap.String("device", "apns-up")).Len() != 0 {
		t.Errorf("%d attempts logged as not sent (%v), want the 3 to the device whose gateway is down", notSent.Len(), notSent.All())
	}
}

// The queue depth counts the deliveries stored for a later attempt and
// those of pages in flight at a gateway.
func TestQueueDepthCountsStoredAndInFlight(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Bool
	send := func(ctx context.Context, del storage.Delivery, _ *Prepared) Result {
		switch del.DeviceID {
		case "apns-later":
			return retry("503", time.Hour) // stored, due in an hour
		case "apns-held":
			held.Store(true)
			select {
			case <-release:
			case <-ctx.Done():
				return retry("stopping", 0)
			}
		}
		return sent()
	}
	core, logs := observer.New(zapcore.WarnLevel)
	db, d := dispatchTo(t, Options{}, zap.New(core), send, "apns-held", "apns-later")
	publishTo(t, db, d, "pub-later", "apns-later")
	wait.Until(t, "the delivery stored for later", func() bool {
		n, err := db.PendingDeliveries(t.Context())
		return err == nil && n == 1
	})
	publishTo(t, db, d, "pub-held", "apns-held")
	wait.Until(t, "a delivery held at the gateway", held.Load)
	if got := d.PushCounters().QueueDepth; got != 2 {
		t.Errorf("queue depth %d with one delivery stored and one at the gateway, want 2", got)
	}
	close(release)
	wait.Until(t, "the held delivery recorded", func() bool { return deliveryCount(d, storage.PlatformAPNs, OutcomeDelivered) == 1 })
	wait.NoError(t, func() error {
		if got := d.PushCounters().QueueDepth; got != 1 {
			return errors.New("queue depth " + itoa(got) + " with one delivery stored, want 1")
		}
		return nil
	})
	if logs.Len() != 0 {
		t.Errorf("logged %v", logs.All())
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A result that cannot be written is written again, a second later.
func TestRecordingRetriedAfterAFailedWrite(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	calls := 0
	retrying(zap.New(core), "recording", func() error {
		calls++
		if calls == 1 {
			return errors.New("database is locked")
		}
		return nil
	})
	if calls != 2 || logs.FilterMessage("recording").Len() != 1 {
		t.Fatalf("%d writes, %d errors logged; want 2 and 1", calls, logs.Len())
	}
}

// A publish with a webhook URL posts publish_started and publish_finished
// there, signed with the instance's secret key; an answer outside 2xx (300
// here) is retried after the backoff. Each is sent as soon as it is due, not at
// the sender's next poll (an hour here).
func TestPublishWebhooks(t *testing.T) {
	type hook struct {
		body      publish.PublishWebhook
		signature string
		raw       []byte
	}
	var mu sync.Mutex
	var got []hook
	answers := []int{http.StatusMultipleChoices} // the first request fails
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var h hook
		if err := json.Unmarshal(raw, &h.body); err != nil {
			t.Errorf("webhook body %s: %v", raw, err)
		}
		h.signature, h.raw = r.Header.Get(WebhookSignatureHeader), raw
		mu.Lock()
		defer mu.Unlock()
		got = append(got, h)
		if len(answers) > 0 {
			w.WriteHeader(answers[0])
			answers = answers[1:]
		}
	}))
	t.Cleanup(srv.Close)
	send := func(context.Context, storage.Delivery, *Prepared) Result { return sent() }
	core, logs := observer.New(zapcore.WarnLevel)
	// The idle polls are an hour: a webhook sent at its poll instead of when
	// it is due would never be.
	db, d := dispatchTo(t, Options{BaseBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, idlePoll: time.Hour},
		zap.New(core), send, "apns-1", "apns-2")
	if _, err := db.CreatePublish(t.Context(), storage.Publish{ID: "pub-hook", InstanceID: testInstance, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"apns":{"aps":{"alert":"hi"}}}`), WebhookURL: srv.URL}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	d.Notify()
	waitPublishDone(t, db, "pub-hook") // publish_finished is queued with the last result
	wait.Until(t, "an empty webhook outbox", func() bool {
		_, ok, err := db.NextPublishWebhookDue(t.Context())
		return err == nil && !ok
	})
	mu.Lock()
	hooks := slices.Clone(got)
	mu.Unlock()
	events := map[publish.PublishWebhookEvent]int{}
	for _, h := range hooks {
		events[h.body.Event]++
		if h.signature != SignWebhook("secret", h.raw) || h.body.PublishId != "pub-hook" || h.body.InstanceId != testInstance {
			t.Errorf("webhook %s signed %q", h.raw, h.signature)
		}
		if h.body.Event == publish.PublishFinished {
			if b := h.body; b.State != publish.PublishStateDone || b.Targeted != 2 || b.Sent != 2 || b.Failed != 0 {
				t.Errorf("publish_finished %+v", b)
			}
		}
	}
	// The first request was answered 300 and sent again.
	if len(hooks) != 3 || events[publish.PublishFinished] != 1 || events[hooks[0].body.Event] != 2 {
		t.Fatalf("webhooks %v, want publish_started and publish_finished, the first of them twice", events)
	}
	if logs.Len() != 0 {
		t.Errorf("logged %v", logs.All())
	}
}

// With nothing else due, each publish webhook is sent as soon as it is
// queued: publish_started when the publish starts, publish_finished when its
// last delivery is recorded, not at the webhook sender's next poll (an hour
// here). Each
// is queued while the sender is idle: a publish starts once the outbox is
// empty, and its delivery completes once publish_started has left it.
func TestPublishWebhooksSentAtOnce(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{} // "<publish> <event>" -> count
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var h publish.PublishWebhook
		_ = json.NewDecoder(r.Body).Decode(&h)
		mu.Lock()
		seen[h.PublishId+" "+string(h.Event)]++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	has := func(key string) bool { mu.Lock(); defer mu.Unlock(); return seen[key] > 0 }
	var db *storage.DB
	outboxEmpty := func() bool {
		_, ok, err := db.NextPublishWebhookDue(context.Background())
		return err == nil && !ok
	}
	send := func(ctx context.Context, del storage.Delivery, _ *Prepared) Result {
		for !has(del.PublishID+" publish_started") || !outboxEmpty() {
			select {
			case <-ctx.Done():
				return retry("stopping", 0)
			case <-time.After(2 * time.Millisecond):
			}
		}
		return sent()
	}
	db, d := dispatchTo(t, Options{idlePoll: time.Hour}, zap.NewNop(), send, "apns-1")
	for i := range 3 {
		id := "pub-quick-" + itoa(i)
		if _, err := db.CreatePublish(t.Context(), storage.Publish{ID: id, InstanceID: testInstance, TargetKind: storage.TargetInterests,
			Targets: []string{"news"}, Payload: json.RawMessage(`{"apns":{"aps":{"alert":"hi"}}}`), WebhookURL: srv.URL}, 0, time.Time{}); err != nil {
			t.Fatal(err)
		}
		d.Notify()
		wait.Until(t, id+" publish_finished sent", func() bool { return has(id+" publish_finished") && outboxEmpty() })
	}
}

// A publish to users reaches the user's devices with the user named in
// data.pusher.userId, encoded for that user.
func TestPublishToUsers(t *testing.T) {
	var mu sync.Mutex
	users := map[string]string{} // device -> userId in the payload
	send := func(_ context.Context, del storage.Delivery, p *Prepared) Result {
		var body struct {
			Data struct {
				Pusher Metadata `json:"pusher"`
			} `json:"data"`
		}
		if err := json.Unmarshal(p.APNsBody, &body); err != nil {
			t.Errorf("apns body %s: %v", p.APNsBody, err)
		}
		mu.Lock()
		users[del.DeviceID] = body.Data.Pusher.UserID
		mu.Unlock()
		return sent()
	}
	db, d := dispatchTo(t, Options{}, zap.NewNop(), send, "apns-alice", "apns-bob", "apns-nobody")
	for dev, user := range map[string]string{"apns-alice": "alice", "apns-bob": "bob"} {
		if err := db.SetDeviceUser(t.Context(), testInstance, storage.PlatformAPNs, dev, user); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.CreatePublish(t.Context(), storage.Publish{ID: "pub-users", InstanceID: testInstance, TargetKind: storage.TargetUsers,
		Targets: []string{"alice", "bob"}, Payload: json.RawMessage(`{"apns":{"aps":{"alert":"hi"}}}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	d.Notify()
	p := waitPublishDone(t, db, "pub-users")
	mu.Lock()
	defer mu.Unlock()
	if p.Sent != 2 || len(users) != 2 || users["apns-alice"] != "alice" || users["apns-bob"] != "bob" {
		t.Fatalf("publish sent %d; userId by device %v", p.Sent, users)
	}
}

// A publish no device is interested in is done at once, and so is one
// whose stored payload no longer parses (it resolves to no device).
func TestPublishWithoutTargetsIsDone(t *testing.T) {
	send := func(context.Context, storage.Delivery, *Prepared) Result { return sent() }
	core, logs := observer.New(zapcore.ErrorLevel)
	db, d := dispatchTo(t, Options{}, zap.New(core), send, "apns-1")
	publishTo(t, db, d, "pub-nobody", "no-such-interest")
	if p := waitPublishDone(t, db, "pub-nobody"); p.Targeted != 0 {
		t.Fatalf("targeted %d", p.Targeted)
	}
	if _, err := db.CreatePublish(t.Context(), storage.Publish{ID: "pub-broken", InstanceID: testInstance, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"fcm":"not an object"}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	d.Notify()
	if p := waitPublishDone(t, db, "pub-broken"); p.Targeted != 0 {
		t.Fatalf("broken payload: targeted %d", p.Targeted)
	}
	if logs.FilterMessage("stored publish payload is invalid").Len() != 1 {
		t.Fatalf("logged %v", logs.All())
	}
}

// When the database cannot be read, the claimer, the resolver and the
// publish webhook sender log it.
func TestUnreadableStoreLogged(t *testing.T) {
	send := func(context.Context, storage.Delivery, *Prepared) Result { return sent() }
	core, logs := observer.New(zapcore.ErrorLevel)
	db, d := dispatchTo(t, Options{}, zap.New(core), send)
	db.Close()
	wake(d.wakeHooks) // rather than wait out the webhook sender's 5 s idle poll
	wait.Until(t, "errors about claiming, listing and the webhook outbox", func() bool {
		return logs.FilterMessage("claiming deliveries").Len() > 0 && logs.FilterMessage("listing publishes to resolve").Len() > 0 &&
			logs.FilterMessage("reading the publish webhook outbox").Len() > 0
	})
}

// A dispatcher that was never started closes without doing anything.
func TestCloseWithoutStart(t *testing.T) {
	db, in := openTestDB(t, storage.Instance{})
	New(db, instanceMap{in.ID: &in}, zap.NewNop(), Options{}).Close()
}

func TestDispatcherDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.Workers != 128 || o.ClaimBatch != 1000 || o.MaxInFlight != 3072 || o.PageSize != 512 || o.Lease != 30*time.Second || o.MaxAttempts != 8 ||
		o.BaseBackoff != time.Second || o.MaxBackoff != 5*time.Minute || o.WebhookMaxAge != 5*time.Minute ||
		o.SendTimeout != 30*time.Second || o.WebhookClient.Timeout != 10*time.Second {
		t.Fatalf("defaults %+v (webhook client timeout %v)", o, o.WebhookClient.Timeout)
	}
}

// FCM's error code in the details wins over the status: UNREGISTERED there
// means the token is dead whatever the status says.
func TestFCMDetailErrorCodeWins(t *testing.T) {
	f, _, _ := fcmGateway(t, func(_ int, _ string, w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"code":400,"message":"m","status":"INVALID_ARGUMENT","details":[{"errorCode":"UNREGISTERED"}]}}`)
	})
	res := f.Send(context.Background(), storage.Delivery{Token: "t"}, mustPrepare(t, "", `{}`, ""))
	if res.Outcome != storage.DeliveryDeadToken || !strings.Contains(res.Reason, "UNREGISTERED") {
		t.Fatalf("%+v, want a dead token", res)
	}
}

// An access token that expires within tokenRefreshEarly is not reused: a
// token valid for 4 minutes is fetched again for the next send.
func TestFCMTokenRenewedEarly(t *testing.T) {
	var tokens atomic.Int64
	g := newGateway(t, false, func(_ int, r *http.Request, w http.ResponseWriter) {
		if r.URL.Path == "/token" {
			n := tokens.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"access_token":"tok-`+itoa(int(n))+`","expires_in":240,"token_type":"Bearer"}`)
			return
		}
		_, _ = io.WriteString(w, `{"name":"projects/proj/messages/1"}`)
	})
	sa, _, err := pushtest.NewServiceAccount("proj", g.srv.URL+"/token")
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFCM(storage.FCMConfig{ServiceAccountJSON: sa, URL: g.srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := mustPrepare(t, "", `{}`, "")
	for range 2 {
		if res := f.Send(context.Background(), storage.Delivery{Token: "t"}, p); res.Outcome != storage.DeliverySent {
			t.Fatalf("send: %+v", res)
		}
	}
	if tokens.Load() != 2 {
		t.Fatalf("%d token requests for two sends with a 4-minute token, want 2", tokens.Load())
	}
}

// Web Push encrypts messages from 0 bytes up to the most one record holds,
// and refuses one byte more.
func TestWebPushMessageSizes(t *testing.T) {
	fake := pushtest.NewWebPush()
	t.Cleanup(fake.Close)
	sub, err := fake.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeWebToken(sub.Token())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 14, 26, 4079} {
		msg := []byte(strings.Repeat("m", n))
		body, err := Encrypt(s, msg)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if got, err := pushtest.Decrypt(sub, body); err != nil || string(got) != string(msg) {
			t.Fatalf("%d bytes: decrypted %d bytes (%v)", n, len(got), err)
		}
	}
	if _, err := Encrypt(s, make([]byte, 4080)); err == nil {
		t.Fatal("a 4080-byte message was accepted")
	}
}

// A web token may be base64 with or without padding.
func TestDecodeWebTokenUnpadded(t *testing.T) {
	sub := `{"endpoint":"https://push.example/x","keys":{"p256dh":"BPk","auth":"au"}}`
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		s, err := DecodeWebToken(enc.EncodeToString([]byte(sub)))
		if err != nil || s.Endpoint != "https://push.example/x" {
			t.Fatalf("%v: %+v %v", enc == base64.StdEncoding, s, err)
		}
	}
}

// A VAPID token names the subject (a default one when none is configured)
// and the push service's origin, is valid 12 hours, and is reused for 11.
func TestVAPIDToken(t *testing.T) {
	cfg := newVAPID(t)
	cfg.Subject = ""
	w, err := NewWebPush(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	w.now = func() time.Time { return now }
	h1, err := w.vapidHeader("https://push.example/send/abc")
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimPrefix(strings.Split(h1, ",")[0], "vapid t=")
	var claims jwt.MapClaims
	if _, _, err := jwt.NewParser().ParseUnverified(tok, &claims); err != nil {
		t.Fatal(err)
	}
	if claims["sub"] != DefaultVAPIDSubject || claims["aud"] != "https://push.example" || claims["exp"] != float64(now.Add(12*time.Hour).Unix()) {
		t.Fatalf("claims %v", claims)
	}
	now = now.Add(11*time.Hour - time.Second)
	if h2, _ := w.vapidHeader("https://push.example/send/def"); h2 != h1 {
		t.Fatal("the token was not reused within 11 hours")
	}
	now = now.Add(time.Second)
	if h3, _ := w.vapidHeader("https://push.example/send/def"); h3 == h1 {
		t.Fatal("the token was reused after 11 hours")
	}
	cfg.Subject = "mailto:ops@example.com"
	w2, _ := NewWebPush(cfg, nil, nil)
	h, _ := w2.vapidHeader("https://push.example/x")
	claims = jwt.MapClaims{}
	_, _, _ = jwt.NewParser().ParseUnverified(strings.TrimPrefix(strings.Split(h, ",")[0], "vapid t="), &claims)
	if claims["sub"] != "mailto:ops@example.com" {
		t.Fatalf("configured subject: claims %v", claims)
	}
}

// Publishes still being delivered do not keep a new one from starting: with
// 64 publishes each holding a delivery at its gateway, a 65th is read and
// delivered. The held sends last until the test ends (their SendTimeout is
// an hour), so a new publish that waited for one of them would never be done.
func TestNewPublishStartsBehindBusyOnes(t *testing.T) {
	const busy = 64
	release := make(chan struct{})
	var held atomic.Int64
	send := func(ctx context.Context, del storage.Delivery, _ *Prepared) Result {
		if del.PublishID != "pub-new" {
			held.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return retry("stopping", 0)
			}
		}
		return sent()
	}
	var ids []string
	for i := range busy + 1 {
		ids = append(ids, fmt.Sprintf("apns-%02d", i))
	}
	db, d := dispatchTo(t, Options{SendTimeout: time.Hour}, zap.NewNop(), send, ids...)
	t.Cleanup(func() { close(release) })
	for i := range busy {
		publishTo(t, db, d, fmt.Sprintf("pub-%02d", i), ids[i])
	}
	wait.Until(t, "64 deliveries held", func() bool { return held.Load() == busy })
	publishTo(t, db, d, "pub-new", ids[busy])
	waitPublishDone(t, db, "pub-new")
}
