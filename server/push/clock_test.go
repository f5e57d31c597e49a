package push

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
	"github.com/heraldrt/herald/storage/testpg"
)

// The numbers the README and the Options' doc comments promise, checked on
// a clock the test moves (Options.now, timer), with the defaults: nothing
// waits on the wall clock.

// testClock is a clock the test sets; its now is Options.now.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.UnixMilli(1_800_000_000_000)} }

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *testClock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// storedMs reads one millisecond column of one row.
func storedMs(t *testing.T, raw *sql.DB, query string, args ...any) time.Time {
	t.Helper()
	var ms int64
	if err := raw.QueryRowContext(t.Context(), query, args...).Scan(&ms); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return time.UnixMilli(ms)
}

// A delivery that failed for a while is retried 1 s after its first
// attempt, the delay doubling with each attempt (2 s, 4 s … 64 s), and the
// eighth attempt is its last: a transient failure of it counts as failed
// (MaxAttempts 8, BaseBackoff 1 s). The retry times are the clock's.
func TestDeliveryRetriedEightTimesDoubling(t *testing.T) {
	db, in := openTestDB(t, storage.Instance{})
	clock := newTestClock()
	d := New(db, instanceMap{in.ID: &in}, zap.NewNop(), Options{now: clock.now})
	for attempts := range 8 { // failed attempts before this one
		rows, got := d.apply(nil, outcome{job: job{d: storage.Delivery{ID: 1, Platform: storage.PlatformAPNs, Attempts: attempts}},
			res: Result{Outcome: storage.DeliveryRetry}})
		if attempts == 7 {
			if got != storage.DeliveryFailed {
				t.Fatalf("the 8th attempt's transient failure recorded as %v, want failed: MaxAttempts is 8", got)
			}
			continue
		}
		if want := clock.now().Add(time.Second << attempts); got != storage.DeliveryRetry || len(rows) != 1 || !rows[0].RetryAt.Equal(want) {
			t.Fatalf("attempt %d failed: recorded %v, retry at %v; want a retry at now + %v", attempts+1, got, rows, time.Second<<attempts)
		}
	}
}

// A retry due now is claimed by one node for 5 minutes (retryLease, with
// the default 30 s send timeout): another node looking 1 ms short of that
// finds nothing, and takes it over at 5 minutes, as after the first node
// died.
func TestRetryClaimedForFiveMinutes(t *testing.T) {
	ctx := t.Context()
	db, in, raw := openTestDBRaw(t)
	if err := db.ImportDevices(ctx, []storage.DeviceImport{{Device: storage.Device{ID: "apns-1", InstanceID: in.ID,
		Platform: storage.PlatformAPNs, Token: "tok-1"}, Interests: []string{"news"}}}); err != nil {
		t.Fatal(err)
	}
	publishAPNs(t, db, "pub-retry")
	clock := newTestClock()
	d := New(db, instanceMap{in.ID: &in}, zap.NewNop(), Options{now: clock.now})
	active := d.listPublishes(ctx)
	if len(active) != 1 || !d.claimPages(ctx, active, []*storage.PageClaim{{Publish: &active[0].publish,
		Streams: []storage.Platform{storage.PlatformAPNs}, Platforms: active[0].wanted}}) {
		t.Fatal("no page claimed")
	}
	// The page's one delivery fails for now: recorded as a retry in 1 s.
	d.apply(nil, outcome{job: <-d.queues[storage.PlatformAPNs], res: Result{Outcome: storage.DeliveryRetry}})
	d.write(nil)
	due := storedMs(t, raw, `SELECT next_attempt_at_ms FROM deliveries`)
	if want := clock.now().Add(time.Second); !due.Equal(want) {
		t.Fatalf("retry due at %v, want %v", due, want)
	}
	clock.set(due)
	if claimed, _ := d.claimDue(ctx); claimed != 1 {
		t.Fatalf("the claimer claimed %d retries when one was due", claimed)
	}
	<-d.queues[storage.PlatformAPNs]
	if until := storedMs(t, raw, `SELECT claimed_until_ms FROM deliveries`); !until.Equal(due.Add(5 * time.Minute)) {
		t.Fatalf("claimed until %v, want 5 minutes after the claim (%v)", until, due.Add(5*time.Minute))
	}
	for _, c := range []struct {
		after time.Duration
		want  int
	}{{5*time.Minute - time.Millisecond, 0}, {5 * time.Minute, 1}} {
		got, err := db.ClaimDeliveries(ctx, storage.PlatformAPNs, due.Add(c.after), time.Minute, 10)
		if err != nil || len(got) != c.want {
			t.Fatalf("another node %v after the claim claimed %d (%v), want %d", c.after, len(got), err, c.want)
		}
	}
}

// roundTripFunc is an http.RoundTripper written as a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A publish webhook being sent is claimed for 2 minutes (webhookLease); a
// failed one is retried after 1 s, the delay doubling with each attempt up
// to 5 minutes (BaseBackoff, MaxBackoff); one older than 5 minutes
// (WebhookMaxAge) is abandoned, unsent. Each case is one row of the outbox,
// due at the clock's time, sent by one round of the sender.
func TestPublishWebhookRetriesOnTheClock(t *testing.T) {
	ctx := t.Context()
	db, in, raw := openTestDBRaw(t)
	publishAPNs(t, db, "pub-hooks")
	clock := newTestClock()
	var leased []time.Time // each request's row's due time while it is sent
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		leased = append(leased, storedMs(t, raw, `SELECT next_attempt_at_ms FROM publish_webhook_outbox`))
		return &http.Response{StatusCode: http.StatusInternalServerError, Body: http.NoBody, Request: r}, nil
	})}
	d := New(db, instanceMap{in.ID: &in}, zap.NewNop(), Options{now: clock.now, WebhookClient: client})
	for _, c := range []struct {
		attempts int
		age      time.Duration
		backoff  time.Duration // 0: abandoned
	}{
		{0, 0, time.Second}, {1, 0, 2 * time.Second}, {3, 0, 8 * time.Second}, {8, 0, 256 * time.Second},
		{9, 0, 5 * time.Minute}, {30, 0, 5 * time.Minute}, // 512 s and more: the cap
		{0, 5 * time.Minute, time.Second}, {0, 5*time.Minute + time.Millisecond, 0},
	} {
		name := fmt.Sprintf("%d attempts, %v old", c.attempts, c.age)
		now := clock.now()
		leased = nil
		if _, err := raw.ExecContext(ctx, `INSERT INTO publish_webhook_outbox (instance_id, url, guarded, publish_id, event, state,
			targeted, sent, failed, at_ms, attempts, next_attempt_at_ms, created_at_ms) VALUES (?, 'https://hooks.example/', 0, 'pub-hooks',
			'publish_started', 'delivering', 1, 0, 0, ?, ?, ?, ?)`, in.ID, now.UnixMilli(), c.attempts, now.UnixMilli(), now.Add(-c.age).UnixMilli()); err != nil {
			t.Fatal(err)
		}
		if n, err := d.sendDueWebhooks(ctx); n != 1 || err != nil {
			t.Fatalf("%s: a round claimed %d webhooks (%v), want the one due", name, n, err)
		}
		if c.backoff == 0 {
			var left int
			if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM publish_webhook_outbox`).Scan(&left); err != nil || left != 0 || len(leased) != 0 {
				t.Fatalf("%s: %d requests, %d rows left (%v); want it abandoned unsent, past the 5 minutes", name, len(leased), left, err)
			}
			continue
		}
		if len(leased) != 1 || !leased[0].Equal(now.Add(2*time.Minute)) {
			t.Fatalf("%s: while sent the webhook was due again at %v, want 2 minutes on (%v)", name, leased, now.Add(2*time.Minute))
		}
		var attempts int
		var next int64
		if err := raw.QueryRowContext(ctx, `SELECT attempts, next_attempt_at_ms FROM publish_webhook_outbox`).Scan(&attempts, &next); err != nil {
			t.Fatal(err)
		}
		if attempts != c.attempts+1 || !time.UnixMilli(next).Equal(now.Add(c.backoff)) {
			t.Fatalf("%s: after a 500, %d attempts, next at %v; want %d, %v on", name, attempts, time.UnixMilli(next), c.attempts+1, c.backoff)
		}
		if _, err := raw.ExecContext(ctx, `DELETE FROM publish_webhook_outbox`); err != nil {
			t.Fatal(err)
		}
		clock.set(now.Add(time.Hour))
	}
}

// A publish webhook request has 10 s: the request's deadline is 10 s after
// the send began, read between the time before and after the round
// (net/http's timeout keeps its own clock, not Options.now), on the client
// of the instance's webhooks and on the guarded one of push_if_offline's.
func TestPublishWebhookTimeout(t *testing.T) {
	ctx := t.Context()
	db, in := openTestDB(t, storage.Instance{})
	d := New(db, instanceMap{in.ID: &in}, zap.NewNop(), Options{})
	deadlines := map[string]time.Duration{}
	var before time.Time
	for name, c := range map[string]**http.Client{"own": &d.opts.WebhookClient, "guarded": &d.guardedHooks} {
		recorded := **c // its Timeout, with a transport that answers at once
		recorded.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if dl, ok := r.Context().Deadline(); ok {
				deadlines[name] = dl.Sub(before)
			}
			return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
		})
		*c = &recorded
	}
	for _, guarded := range []bool{false, true} {
		publishWebhookTo(t, db, fmt.Sprintf("pub-timeout-%v", guarded), guarded)
	}
	before = time.Now()
	if n, err := d.sendDueWebhooks(ctx); n != 2 || err != nil {
		t.Fatalf("a round sent %d webhooks (%v), want the two publishes'", n, err)
	}
	took := time.Since(before)
	for _, name := range []string{"own", "guarded"} {
		if dl, ok := deadlines[name]; !ok || dl < 10*time.Second || dl > 10*time.Second+took {
			t.Errorf("%s webhooks: the request's deadline %v after the round began (set: %v), want 10 s", name, dl, ok)
		}
	}
}

// publishWebhookTo stores a publish with a webhook URL and its
// publish_started webhook in the outbox, due now.
func publishWebhookTo(t *testing.T, db *storage.DB, id string, guarded bool) {
	t.Helper()
	p, err := db.CreatePublish(t.Context(), storage.Publish{ID: id, InstanceID: testInstance, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: []byte(`{"apns":{"aps":{"alert":"hi"}}}`), WebhookURL: "https://hooks.example/",
		WebhookGuarded: guarded}, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.StartPublish(t.Context(), p); err != nil {
		t.Fatal(err)
	}
}

// With the default page size a publish to interests is claimed 512
// devices at a time, and a publish to users 5 users at a time (512 over
// the 100 devices a user may have).
func TestPagesOf512DevicesAnd5Users(t *testing.T) {
	ctx := t.Context()
	db, in := openTestDB(t, storage.Instance{})
	var devices []storage.DeviceImport
	for i := range 1100 {
		devices = append(devices, storage.DeviceImport{Device: storage.Device{ID: fmt.Sprintf("apns-%04d", i), InstanceID: in.ID,
			Platform: storage.PlatformAPNs, Token: fmt.Sprintf("tok-%d", i)}, Interests: []string{"news"}})
	}
	var users []string
	for i := range 11 {
		u := fmt.Sprintf("user-%02d", i)
		users = append(users, u)
		devices = append(devices, storage.DeviceImport{Device: storage.Device{ID: "apns-" + u, InstanceID: in.ID,
			Platform: storage.PlatformAPNs, Token: "tok-" + u, UserID: u}})
	}
	if err := db.ImportDevices(ctx, devices); err != nil {
		t.Fatal(err)
	}
	d := New(db, instanceMap{in.ID: &in}, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)), Options{})
	// pages claims every page of the one publish listed, each sent at
	// once, and returns their sizes.
	pages := func() []int {
		var sizes []int
		active := d.listPublishes(ctx)
		if len(active) != 1 {
			t.Fatalf("listed %d publishes, want 1", len(active))
		}
		r := active[0]
		var streams []storage.Platform // as the resolver claims: a publish to users has one stream of every platform
		for _, pl := range streamOrder {
			if r.streams[pl] != nil {
				streams = append(streams, pl)
			}
		}
		for d.claimPages(ctx, []*reading{r}, []*storage.PageClaim{{Publish: &r.publish, Streams: streams, Platforms: r.wanted}}) {
			n := 0
			for len(d.queues[storage.PlatformAPNs]) > 0 {
				d.apply(nil, outcome{job: <-d.queues[storage.PlatformAPNs], res: sent()})
				n++
			}
			sizes = append(sizes, n)
		}
		d.write(nil)
		return sizes
	}
	publishAPNs(t, db, "pub-interests")
	if got := fmt.Sprint(pages()); got != "[512 512 76]" {
		t.Fatalf("1,100 devices claimed in pages of %s, want 512, 512 and 76", got)
	}
	if _, err := db.CreatePublish(ctx, storage.Publish{ID: "pub-users", InstanceID: testInstance, TargetKind: storage.TargetUsers,
		Targets: users, Payload: []byte(`{"apns":{"aps":{"alert":"hi"}}}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(pages()); got != "[5 5 1]" {
		t.Fatalf("11 users of a device each claimed in pages of %s devices, want 5, 5 and 1", got)
	}
}

// Idle, the resolver looks for publishes four times a second on a shared
// database (where a publish another node accepted wakes no one here) and
// once a second alone: it waits 250 ms and 1 s between rounds, each round a
// listing, on a timer the test fires.
func TestResolverPollsFourTimesASecondShared(t *testing.T) {
	shared := testdb.Open(t, storage.Open, testpg.Start(t))
	alone, _ := openTestDB(t, storage.Instance{})
	for _, c := range []struct {
		name string
		db   *storage.DB
		want time.Duration
	}{{"shared", shared, 250 * time.Millisecond}, {"alone", alone, time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			waits, fire := make(chan time.Duration), make(chan time.Time)
			ctx, cancel := context.WithCancel(t.Context())
			d := New(c.db, instanceMap{}, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)), Options{
				timer: func(after time.Duration) (<-chan time.Time, func()) {
					select {
					case waits <- after:
					case <-ctx.Done():
					}
					return fire, func() {}
				}})
			done := make(chan struct{})
			go func() { defer close(done); d.resolve(ctx) }()
			defer func() { cancel(); <-done }()
			var idle time.Duration
			rounds := 0
			for idle < time.Second {
				w := <-waits // a round listed nothing and waits
				if w != c.want {
					t.Fatalf("the idle resolver waits %v between rounds, want %v", w, c.want)
				}
				idle += w
				rounds++
				fire <- time.Time{}
			}
			if want := int(time.Second / c.want); rounds != want {
				t.Fatalf("%d rounds a second, want %d", rounds, want)
			}
		})
	}
}
