package webhook

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/gen/channels"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/signing"
	"github.com/heraldrt/herald/storage"
)

type apps map[string]*storage.App

func (a apps) ByID(id string) *storage.App { return a[id] }

// receiver is a webhook endpoint that checks every signature and records the
// events; it answers failFirst requests with 500 first.
type receiver struct {
	t         *testing.T
	srv       *httptest.Server
	failFirst atomic.Int64
	mu        sync.Mutex
	requests  []channels.WebhookRequest
}

func newReceiver(t *testing.T, key, secret string) *receiver {
	r := &receiver{t: t}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if req.Header.Get("X-Pusher-Key") != key || req.Header.Get("X-Pusher-Signature") != signing.HMACHex(secret, string(body)) {
			t.Errorf("bad signature headers %v for %s", req.Header, body)
		}
		if req.Header.Get("Content-Type") != "application/json" {
			t.Errorf("content type %q", req.Header.Get("Content-Type"))
		}
		if r.failFirst.Add(-1) >= 0 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var wr channels.WebhookRequest
		if err := json.Unmarshal(body, &wr); err != nil || wr.TimeMs == 0 || len(wr.Events) == 0 {
			t.Errorf("bad body %s: %v", body, err)
		}
		r.mu.Lock()
		r.requests = append(r.requests, wr)
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// events returns what was received as "name:channel[:user][:extra]".
func (r *receiver) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, req := range r.requests {
		for _, e := range req.Events {
			s := string(e.Name) + ":" + e.Channel
			if e.UserId != nil {
				s += ":" + *e.UserId
			}
			if e.Event != nil {
				s += ":" + *e.Event + "=" + *e.Data + "@" + *e.SocketId
			}
			if e.SubscriptionCount != nil {
				s += ":" + itoa(*e.SubscriptionCount)
			}
			out = append(out, s)
		}
	}
	return out
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func (r *receiver) waitFor(n int) []string {
	r.t.Helper()
	var got []string
	wait.Until(r.t, itoa(n)+" events", func() bool { got = r.events(); return len(got) >= n })
	return got
}

func openDB(t *testing.T, path string) *storage.DB {
	t.Helper()
	db, err := storage.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

var fast = Options{Hold: 150 * time.Millisecond, Flush: 10 * time.Millisecond, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}

// inOrder is fast with one request in flight per endpoint, for the tests of
// the order in which an endpoint receives the events of several channels.
var inOrder = func() Options { o := fast; o.PerEndpoint = 1; return o }()

func start(t *testing.T, db *storage.DB, a apps, opts Options) *Dispatcher {
	t.Helper()
	d := New(db, a, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), opts)
	d.Start()
	t.Cleanup(d.Close)
	return d
}

func TestScriptedSessionSequence(t *testing.T) {
	r := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	// With several requests in flight per endpoint, one channel's still
	// arrive in order.
	d := start(t, openDB(t, filepath.Join(t.TempDir(), "h.db")), a, fast)
	for _, ev := range []hub.Event{
		{AppID: "1", Kind: hub.ChannelOccupied, Channel: "presence-r"},
		{AppID: "1", Kind: hub.MemberAdded, Channel: "presence-r", UserID: "u1"},
		{AppID: "1", Kind: hub.ClientEvent, Channel: "presence-r", Name: "client-hi", Data: `{"a":1}`, SocketID: "1.2", UserID: "u1"},
		{AppID: "1", Kind: hub.MemberRemoved, Channel: "presence-r", UserID: "u1"},
		{AppID: "1", Kind: hub.ChannelVacated, Channel: "presence-r"},
		{AppID: "2", Kind: hub.ChannelOccupied, Channel: "unknown-app"},
	} {
		d.Observe(ev)
	}
	got := strings.Join(r.waitFor(5), " ")
	want := `channel_occupied:presence-r member_added:presence-r:u1 client_event:presence-r:u1:client-hi={"a":1}@1.2 member_removed:presence-r:u1 channel_vacated:presence-r`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestFlipWithinHoldIsDropped(t *testing.T) {
	r := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	d := start(t, openDB(t, filepath.Join(t.TempDir(), "h.db")), a, inOrder)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelVacated, Channel: "c"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.MemberRemoved, Channel: "presence-c", UserID: "u"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.MemberAdded, Channel: "presence-c", UserID: "u"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.MemberRemoved, Channel: "presence-c", UserID: "other"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.CacheMiss, Channel: "cache-x"})
	// Held after the others, so released after any of them that leaked.
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelVacated, Channel: "marker"})
	r.waitFor(3)
	if got := strings.Join(r.events(), " "); got != "cache_miss:cache-x member_removed:presence-c:other channel_vacated:marker" {
		t.Fatalf("got %s; only the unmatched removal and the markers should arrive", got)
	}
}

func TestEventsHeldByTheClusterGoAtOnce(t *testing.T) {
	r := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	d := start(t, openDB(t, filepath.Join(t.TempDir(), "h.db")), a, inOrder)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelVacated, Channel: "held-here"})
	// Held by the cluster already: neither held again nor cancelled by the
	// channel's next occupation.
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelVacated, Channel: "c", Held: true})
	d.Observe(hub.Event{AppID: "1", Kind: hub.MemberRemoved, Channel: "presence-c", UserID: "u", Held: true})
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.MemberAdded, Channel: "presence-c", UserID: "u"})
	r.waitFor(5)
	want := "channel_vacated:c member_removed:presence-c:u channel_occupied:c member_added:presence-c:u channel_vacated:held-here"
	if got := strings.Join(r.events(), " "); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestFiltersAndBatching(t *testing.T) {
	presenceOnly := newReceiver(t, "k", "s")
	counts := newReceiver(t, "k", "s")
	batched := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{
		{URL: presenceOnly.srv.URL, ChannelPrefix: "presence-"},
		{URL: counts.srv.URL, EventTypes: []string{"subscription_count"}},
		{URL: batched.srv.URL, Batch: true, EventTypes: []string{"channel_occupied"}},
	}}}
	d := start(t, openDB(t, filepath.Join(t.TempDir(), "h.db")), a, fast)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "presence-a"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "news"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.SubscriptionCount, Channel: "news", Count: 3})
	if got := strings.Join(presenceOnly.waitFor(1), " "); got != "channel_occupied:presence-a" {
		t.Fatalf("presence endpoint got %s", got)
	}
	if got := strings.Join(counts.waitFor(1), " "); got != "subscription_count:news:3" {
		t.Fatalf("count endpoint got %s", got)
	}
	batched.waitFor(2)
	batched.mu.Lock()
	n := len(batched.requests)
	batched.mu.Unlock()
	if n != 1 {
		t.Fatalf("batched endpoint got %d requests, want 1 with both events", n)
	}
}

func TestRetriesUntilTheReceiverRecovers(t *testing.T) {
	r := newReceiver(t, "k", "s")
	r.failFirst.Store(3)
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	d := start(t, db, a, fast)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "a"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "b"})
	got := r.waitFor(2)
	if len(got) != 2 {
		t.Fatalf("got %v", got)
	}
	// A request leaves the outbox only after its receiver answered, so once
	// it is empty every delivery has been counted.
	waitOutboxEmpty(t, db)
	if n := len(r.events()); n != 2 {
		t.Fatalf("delivered %d times, want each event once", n)
	}
}

func waitOutboxEmpty(t *testing.T, db *storage.DB) {
	t.Helper()
	wait.Until(t, "an empty outbox", func() bool {
		n, err := db.CountWebhookOutbox(context.Background())
		return err == nil && n == 0
	})
}

func TestOutboxSurvivesRestart(t *testing.T) {
	down := newReceiver(t, "k", "s")
	down.failFirst.Store(1 << 30)
	path := filepath.Join(t.TempDir(), "h.db")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: down.srv.URL}}}}
	db := openDB(t, path)
	d := New(db, a, zap.NewNop(), inOrder)
	d.Start()
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "kept"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelVacated, Channel: "held-at-close"})
	d.Close() // held events are written, not lost
	if n, _ := db.CountWebhookOutbox(context.Background()); n != 2 {
		t.Fatalf("outbox holds %d, want 2", n)
	}
	db.Close()

	// The receiver recovers and the node restarts on the same file.
	down.failFirst.Store(0)
	db2 := openDB(t, path)
	start(t, db2, a, inOrder)
	got := strings.Join(down.waitFor(2), " ")
	if got != "channel_occupied:kept channel_vacated:held-at-close" {
		t.Fatalf("after restart got %s", got)
	}
	waitOutboxEmpty(t, db2)
}

// Requests a crashed run had claimed are sent at once by the next run, not
// once the claim runs out.
func TestClaimsOfACrashedRunAreSentAtOnce(t *testing.T) {
	r := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	body := []byte(`{"time_ms":1,"events":[{"name":"channel_occupied","channel":"claimed"}]}`)
	if _, err := db.EnqueueWebhooks(context.Background(), []storage.OutboxWebhook{{AppID: "1", URL: r.srv.URL, Body: body}}, 0); err != nil {
		t.Fatal(err)
	}
	// The crashed run's claim would hold for an hour.
	if got, err := db.ClaimWebhooks(context.Background(), time.Now(), time.Hour, 10, 8); err != nil || len(got) != 1 {
		t.Fatalf("claim: %+v (%v)", got, err)
	}
	start(t, db, a, fast)
	if got := strings.Join(r.waitFor(1), " "); got != "channel_occupied:claimed" {
		t.Fatalf("got %s", got)
	}
	waitOutboxEmpty(t, db)
}

func TestGivesUpAfterMaxAge(t *testing.T) {
	r := newReceiver(t, "k", "s")
	r.failFirst.Store(1 << 30)
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	opts := fast
	opts.MaxAge = 200 * time.Millisecond
	d := start(t, db, a, opts)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "a"})
	waitOutboxEmpty(t, db)
}

func TestObserveNeverBlocks(t *testing.T) {
	d := New(nil, apps{}, zap.NewNop(), Options{Buffer: 2})
	for i := 0; i < 10; i++ { // not started: nothing drains the buffer
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c"})
	}
	if d.Dropped() != 8 {
		t.Fatalf("dropped %d, want 8", d.Dropped())
	}
}

// TestEachRequestSentOnce keeps several endpoints busy with a stream of
// single-event requests and checks that none is POSTed twice: a request read
// as due while its endpoint was still busy, and delivered and deleted by that
// endpoint's sender before being looked at again, must not be sent again.
func TestEachRequestSentOnce(t *testing.T) {
	const endpoints, events = 4, 400
	var hooks []storage.Webhook
	var receivers []*receiver
	for range endpoints {
		r := newReceiver(t, "k", "s")
		receivers = append(receivers, r)
		hooks = append(hooks, storage.Webhook{URL: r.srv.URL})
	}
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: hooks}}
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	d := start(t, db, a, fast)
	for i := range events {
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c-" + itoa(i)})
		if i%10 == 9 {
			// Keep a short backlog, so the outbox is read again and again
			// while the endpoints' senders are busy with what came before.
			receivers[i%endpoints].waitFor(i - 30)
		}
	}
	for _, r := range receivers {
		got := r.waitFor(events)
		seen := map[string]bool{}
		for _, e := range got {
			if seen[e] {
				t.Fatalf("%s was delivered twice", e)
			}
			seen[e] = true
		}
	}
	// Once the outbox is empty every delivery has been counted, duplicates
	// included.
	waitOutboxEmpty(t, db)
	for _, r := range receivers {
		if n := len(r.events()); n != events {
			t.Fatalf("endpoint received %d events, want %d", n, events)
		}
	}
}
