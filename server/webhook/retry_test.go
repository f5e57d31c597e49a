package webhook

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Requests older than MaxAge are dropped without an attempt and counted:
// swept from the outbox while they wait, or at their turn when the sweep has
// not come yet. The request in flight as they expire is delivered.
func TestExpiredRequestsDroppedWithoutAttempt(t *testing.T) {
	for _, tt := range []struct {
		name  string
		sweep bool
	}{{"swept while waiting", true}, {"at their turn", false}} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHeld(t)
			a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: h.srv.URL}}}}
			db := testdb.New(t, storage.Open)
			opts := inOrder
			// A second: the first request is sent well within it even on
			// a loaded machine, and the two behind it expire meanwhile.
			opts.MaxAge, opts.Timeout = time.Second, wait.Limit
			d := New(db, a, zap.NewNop(), opts)
			if !tt.sweep {
				d.purgeEvery = time.Hour
			}
			d.Start()
			t.Cleanup(d.Close)
			t.Cleanup(h.release) // before Close, which waits for the request in flight
			for _, c := range []string{"a", "b", "c"} {
				d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: c})
			}
			wait.Until(t, "the first request sent", func() bool { _, _, arrived := h.counts(); return arrived == 1 })
			// All three were written before the first was sent.
			sent := time.Now()
			if tt.sweep {
				wait.Until(t, "two requests expired", func() bool { return d.Stats().Expired == 2 })
			} else {
				wait.Until(t, "MaxAge to pass", func() bool { return time.Since(sent) > opts.MaxAge })
			}
			h.release()
			waitOutboxEmpty(t, db)
			if _, _, arrived := h.counts(); arrived != 1 {
				t.Fatalf("%d requests arrived, want only the first", arrived)
			}
			if s := d.Stats(); s.Expired != 2 || s.Delivered != 1 || s.Abandoned != 0 || s.Failed != 0 {
				t.Fatalf("stats %+v, want 2 expired and 1 delivered", s)
			}
		})
	}
}

// A redirect is not followed: the endpoint's 3xx is a failed attempt, and
// the place it points to hears nothing (following it would turn the POST
// into a GET whose 2xx counted as delivered).
func TestRedirectIsAFailedAttempt(t *testing.T) {
	var elsewhere atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(target.Close)
	redirect := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusFound))
	t.Cleanup(redirect.Close)
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: redirect.URL}}}}
	var seen attempts
	opts := fast
	opts.OnAttempt = seen.add
	d := start(t, testdb.New(t, storage.Open), a, opts)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "a"})
	wait.Until(t, "an attempt", func() bool { return len(seen.get()) > 0 })
	if at := seen.get()[0]; at.Status != http.StatusFound || at.Error == "" {
		t.Fatalf("attempt %+v, want a failed one with status 302", at)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect's target received %d requests, want none", n)
	}
}

// A receiver answering 300, 500, 503 and 404 before 200, one request at a
// time: each answer outside 2xx is a failed attempt, reported with its status
// and retried after the backoff (20, 40, 80, 100 ms here); the request
// queued behind it for the same endpoint waits and is sent after it. Nothing
// is logged as an error. The sender's idle poll and purge sweep are an hour
// here, so a retry that waited for anything but its backoff would never come
// and the outbox would not empty.
func TestFailedAttemptsReportedAndRetriedAfterBackoff(t *testing.T) {
	statuses := []int{http.StatusMultipleChoices, http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusNotFound}
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if len(statuses) > 0 {
			w.WriteHeader(statuses[0])
			statuses = statuses[1:]
		}
	}))
	t.Cleanup(srv.Close)
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: srv.URL}}}}
	db := testdb.New(t, storage.Open)
	// Both requests in the outbox before the start: the sender claims them
	// together.
	if _, err := db.EnqueueWebhooks(context.Background(), []storage.OutboxWebhook{
		{AppID: "1", URL: srv.URL, Body: []byte(`{"time_ms":1,"events":[{"name":"channel_occupied","channel":"a"}]}`)},
		{AppID: "1", URL: srv.URL, Body: []byte(`{"time_ms":1,"events":[{"name":"channel_occupied","channel":"b"}]}`)},
	}, 0); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	var seen attempts
	opts := inOrder
	opts.OnAttempt = seen.add
	d := New(db, a, zap.New(core), opts)
	d.idlePoll, d.purgeEvery = time.Hour, time.Hour
	d.Start()
	t.Cleanup(d.Close)
	waitOutboxEmpty(t, db)

	want := []Attempt{
		{AppID: "1", URL: srv.URL, Status: 300, Error: "status Multiple Choices", Retry: true},
		{AppID: "1", URL: srv.URL, Status: 500, Error: "status Internal Server Error", Retry: true},
		{AppID: "1", URL: srv.URL, Status: 503, Error: "status Service Unavailable", Retry: true},
		{AppID: "1", URL: srv.URL, Status: 404, Error: "status Not Found", Retry: true},
		{AppID: "1", URL: srv.URL, Status: 200},
		{AppID: "1", URL: srv.URL, Status: 200},
	}
	if got := seen.get(); !slices.Equal(got, want) {
		t.Fatalf("attempts:\n got %+v\nwant %+v", got, want)
	}
	if got, want := d.Stats(), (Stats{Delivered: 2, Failed: 4}); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	var numbers []int64
	for _, e := range logs.FilterMessage("webhook attempt failed; retrying").All() {
		numbers = append(numbers, e.ContextMap()["attempt"].(int64))
	}
	if want := []int64{1, 2, 3, 4}; !slices.Equal(numbers, want) {
		t.Fatalf("retry logs number the attempts %v, want %v", numbers, want)
	}
	noErrors(t, logs)
}

// An endpoint that does not answer: the attempt is reported with status 0
// and the connection error; when its retry would come past MaxAge the
// request is given up, counted and logged with its number of attempts.
func TestUnreachableEndpointGivenUp(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: url}}}}
	db := testdb.New(t, storage.Open)
	core, logs := observer.New(zapcore.InfoLevel)
	var seen attempts
	opts := fast
	// One attempt, then the retry would come after MaxAge: given up at once.
	opts.MaxAge, opts.BaseBackoff, opts.MaxBackoff = 5*time.Second, time.Minute, time.Minute
	opts.OnAttempt = seen.add
	d := New(db, a, zap.New(core), opts)
	d.Start()
	t.Cleanup(d.Close)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "a"})
	wait.Until(t, "the request given up", func() bool { return d.Stats().Abandoned == 1 })
	got := seen.get()
	if len(got) != 1 || got[0].Status != 0 || got[0].Error == "" || got[0].Retry {
		t.Fatalf("attempts %+v, want one without a status, with its error, not retried", got)
	}
	if s := d.Stats(); s.Failed != 1 || s.Delivered != 0 {
		t.Fatalf("stats %+v, want 1 failed, 0 delivered", s)
	}
	gaveUp := logs.FilterMessage("giving up on a webhook").All()
	if len(gaveUp) != 1 || gaveUp[0].ContextMap()["attempts"] != int64(1) {
		t.Fatalf("give-up logs %v, want one after 1 attempt", gaveUp)
	}
	waitOutboxEmpty(t, db)
}

// The sweep of expired requests runs every thirtieth of MaxAge, at least
// every 10 s and at most every 10 ms.
func TestPurgeInterval(t *testing.T) {
	for _, tt := range []struct{ maxAge, want time.Duration }{
		{5 * time.Minute, 10 * time.Second},
		{time.Hour, 10 * time.Second},
		{3 * time.Second, 100 * time.Millisecond},
		{150 * time.Millisecond, 10 * time.Millisecond},
	} {
		if got := New(nil, apps{}, zap.NewNop(), Options{MaxAge: tt.maxAge}).purgeEvery; got != tt.want {
			t.Errorf("MaxAge %v: swept every %v, want %v", tt.maxAge, got, tt.want)
		}
	}
}

// A request that keeps failing is retried after each backoff (5, 10, 20 ms
// here), but the sender never waits less than 10 ms between looks at the
// outbox: the first retry, due 5 ms after the failure, goes 10 ms after it.
func TestRetriesWaitTheBackoffAndAtLeast10ms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &fakeEndpoint{statuses: []int{500, 500, 500}}
		d, db, logs := fakeTimeDispatcher(t, Options{BaseBackoff: 5 * time.Millisecond}, e, "a")
		d.Start()
		t.Cleanup(d.Close)
		time.Sleep(time.Second)
		synctest.Wait()
		if n, err := db.CountWebhookOutbox(context.Background()); err != nil || n != 0 {
			t.Fatalf("outbox holds %d (%v), want the request delivered", n, err)
		}
		ms := time.Millisecond
		if got, want := e.came(), []time.Duration{0, 10 * ms, 20 * ms, 40 * ms}; !slices.Equal(got, want) {
			t.Fatalf("attempts at %v, want %v", got, want)
		}
		noErrors(t, logs)
	})
}

// A claimed request is sent while its claim has at least Timeout left (the
// attempt ends before the claim does) and it is younger than MaxAge. With
// less left it is given back unsent, due again; at MaxAge it is dropped as
// expired.
func TestAttemptAtTheLimitsOfClaimAndAge(t *testing.T) {
	const timeout, maxAge = time.Second, time.Minute
	const sent, givenBack, expired = "1 sent, 1 delivered, 0 expired, 0 left, due false",
		"0 sent, 0 delivered, 0 expired, 1 left, due true",
		"0 sent, 0 delivered, 1 expired, 0 left, due false"
	for _, tt := range []struct {
		name       string
		age, lease time.Duration // the request's age when claimed, and the claim's length
		want       string
	}{
		{"exactly a timeout left", 0, timeout, sent},
		{"less than a timeout left", 0, timeout - time.Millisecond, givenBack},
		{"just younger than MaxAge", maxAge - time.Millisecond, time.Minute, sent},
		{"exactly MaxAge old", maxAge, time.Minute, expired},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := &fakeEndpoint{}
				d, db, logs := fakeTimeDispatcher(t, Options{Timeout: timeout, MaxAge: maxAge}, e, "a")
				time.Sleep(tt.age)
				claimed, err := db.ClaimWebhooks(context.Background(), time.Now(), tt.lease, 1, 1)
				if err != nil || len(claimed) != 1 {
					t.Fatalf("claimed %v (%v)", claimed, err)
				}
				d.attempt(context.Background(), claimed[0])
				left, err := db.CountWebhookOutbox(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				s := d.Stats()
				got := fmt.Sprintf("%d sent, %d delivered, %d expired, %d left, due %v", len(e.came()), s.Delivered, s.Expired, left, dueNow(t, db))
				if got != tt.want {
					t.Fatalf("%s; want %s", got, tt.want)
				}
				noErrors(t, logs)
			})
		})
	}
}

func TestRetriesUntilTheReceiverRecovers(t *testing.T) {
	r := newReceiver(t, "k", "s")
	r.failFirst.Store(3)
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	db := testdb.New(t, storage.Open)
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

func TestGivesUpAfterMaxAge(t *testing.T) {
	r := newReceiver(t, "k", "s")
	r.failFirst.Store(1 << 30)
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	db := testdb.New(t, storage.Open)
	opts := fast
	opts.MaxAge = 200 * time.Millisecond
	d := start(t, db, a, opts)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "a"})
	waitOutboxEmpty(t, db)
}
