package push

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/gen/publish"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
)

// TestWebhookBodyOfMigratedRow: the facts of a webhook queued with an encoded
// body by a version before storage migration 0005 (storage's
// TestPublishWebhookOutboxMigration converts that row into these facts) are
// sent as exactly that body, so its signature is the same too.
func TestWebhookBodyOfMigratedRow(t *testing.T) {
	const old = `{"event":"publish_finished","failed":1,"instanceId":"inst-1","publishId":"pubid-a","sent":15,"state":"done","targeted":16,"timeMs":1767225660456}`
	w := storage.PublishWebhook{InstanceID: "inst-1", URL: "https://hooks.example/publish", PublishID: "pubid-a",
		Event: storage.PublishFinished, State: storage.PublishDone, Targeted: 16, Sent: 15, Failed: 1,
		At: time.UnixMilli(1767225660456).UTC()}
	if got := string(encodeWebhook(w)); got != old {
		t.Fatalf("body %s\nwant %s", got, old)
	}
}

// The default publish-webhook client follows no redirect (the 3xx is the
// answer, a failure) and dials through WebhookDialContext when it is set.
func TestWebhookClientNoRedirectsAndDialSeam(t *testing.T) {
	var elsewhere atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(target.Close)
	redirect := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	t.Cleanup(redirect.Close)

	var dialed atomic.Int32
	o := Options{WebhookDialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
		dialed.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}}.WithDefaults()
	res, err := o.WebhookClient.Post(redirect.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTemporaryRedirect || elsewhere.Load() != 0 {
		t.Fatalf("status %d, %d requests at the redirect's target; want 307 and none", res.StatusCode, elsewhere.Load())
	}
	if dialed.Load() != 1 {
		t.Fatalf("dialed %d times through WebhookDialContext, want 1", dialed.Load())
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
		if h.signature != SignWebhook("secret", h.raw) || h.body.PublishID != "pub-hook" || h.body.InstanceID != testInstance {
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
		seen[h.PublishID+" "+string(h.Event)]++
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

// The webhook of a publish whose URL is not the instance's own (Guarded: a
// trigger's push_if_offline gave it) goes only where a Web Push endpoint
// may: not to a loopback sink, unless WebPushAllowedHosts names its host;
// the instance's own webhook URLs reach it either way (the operator's
// rules, private addresses allowed by default).
func TestGuardedPublishWebhooks(t *testing.T) {
	var received atomic.Int32
	sink := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { received.Add(1) }))
	t.Cleanup(sink.Close)
	db, in := openTestDB(t, storage.Instance{})
	for _, tt := range []struct {
		name    string
		guarded bool
		allowed []string
		want    int32
	}{
		{"GuardedRefused", true, nil, 0},
		{"GuardedAllowedHost", true, []string{"127.0.0.1"}, 1},
		{"Unguarded", false, nil, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			received.Store(0)
			d := New(db, instanceMap{in.ID: &in}, zap.NewNop(), Options{WebPushAllowedHosts: tt.allowed})
			d.sendWebhook(t.Context(), storage.PublishWebhook{ID: 1, InstanceID: in.ID, URL: sink.URL, Guarded: tt.guarded,
				PublishID: "pub-1", Event: storage.PublishStarted, CreatedAt: time.Now()})
			if got := received.Load(); got != tt.want {
				t.Fatalf("the loopback sink received %d requests, want %d", got, tt.want)
			}
		})
	}
}
