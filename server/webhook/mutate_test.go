package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
)

// Tests that kill mutants gremlins found alive (make mutate); the
// equivalent ones are listed in scripts/mutate-equivalent.md.

// attempts records what OnAttempt is told.
type attempts struct {
	mu  sync.Mutex
	all []Attempt
}

func (a *attempts) add(at Attempt) { a.mu.Lock(); a.all = append(a.all, at); a.mu.Unlock() }

func (a *attempts) get() []Attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.all)
}

// noErrors fails t when the dispatcher logged anything at error level.
func noErrors(t *testing.T, logs *observer.ObservedLogs) {
	t.Helper()
	for _, e := range logs.FilterLevelExact(zap.ErrorLevel).All() {
		t.Errorf("logged an error: %s %v", e.Message, e.ContextMap())
	}
}

// A receiver answering 300, 500, 503 and 404 before 200, one request at a
// time: each answer outside 2xx is a failed attempt, reported with its status
// and retried after the backoff (20, 40, 80, 100 ms here), not after the
// sender's one-second idle poll; the request queued behind it for the same
// endpoint waits and is sent after it. Nothing is logged as an error.
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
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
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
	began := time.Now()
	d.Start()
	t.Cleanup(d.Close)
	waitOutboxEmpty(t, db)
	took := time.Since(began)

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
	// 240 ms of backoff; four waits for the idle poll would be 4 s.
	if took > 2*time.Second {
		t.Fatalf("six attempts took %v, want the retries to follow the backoff", took)
	}
}

// An event is written to the outbox and the sender woken at once: one event
// after another, each is delivered well before the sender's one-second idle
// poll would have found it. Nothing is logged as an error.
func TestDeliveredWithoutWaitingForThePoll(t *testing.T) {
	r := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	core, logs := observer.New(zapcore.InfoLevel)
	d := New(openDB(t, filepath.Join(t.TempDir(), "h.db")), a, zap.New(core), fast)
	d.Start()
	t.Cleanup(d.Close)
	const rounds = 4
	began := time.Now()
	for i := range rounds {
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c" + itoa(i)})
		r.waitFor(i + 1)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("%d events one after another took %v to arrive, want each sent at once", rounds, took)
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
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
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

// A full buffer drops events with one warning per 1,024 drops, not one each.
func TestDroppedEventsWarnedOncePer1024(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	d := New(nil, apps{}, zap.New(core), Options{Buffer: 1})
	for range 1 + 1025 { // not started: the first fills the buffer
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c"})
	}
	var counts []int64
	for _, e := range logs.FilterMessage("webhook buffer full; events dropped").All() {
		counts = append(counts, e.ContextMap()["dropped"].(int64))
	}
	if want := []int64{1, 1025}; !slices.Equal(counts, want) {
		t.Fatalf("warnings at drops %v, want %v", counts, want)
	}
}

// When the outbox cannot be read the sender logs it: the one sign that
// webhooks have stopped.
func TestUnreadableOutboxLogged(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	core, logs := observer.New(zapcore.InfoLevel)
	d := New(db, apps{}, zap.New(core), fast)
	db.Close()
	d.Start()
	defer d.Close()
	wait.Until(t, "an error about the outbox", func() bool {
		return logs.FilterMessage("reading the webhook outbox").Len() > 0
	})
}

func TestDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.Hold != 3*time.Second || o.Flush != 100*time.Millisecond || o.MaxAge != 5*time.Minute ||
		o.BaseBackoff != time.Second || o.MaxBackoff != time.Minute || o.Buffer != 65536 || o.Senders != 64 ||
		o.PerEndpoint != 8 || o.MaxQueued != 10000 || o.Timeout != 5*time.Second || o.Lease != time.Minute {
		t.Fatalf("defaults %+v", o)
	}
	if c := o.client(); c.Timeout != 5*time.Second || c.Transport.(*http.Transport).MaxIdleConnsPerHost != 8 {
		t.Fatalf("client timeout %v, idle connections per host %d", c.Timeout, c.Transport.(*http.Transport).MaxIdleConnsPerHost)
	}
	// The lease is six timeouts by default, at least 1 min, and never under
	// two timeouts.
	for _, tt := range []struct {
		lease, timeout, want time.Duration
	}{
		{0, 30 * time.Second, 3 * time.Minute},
		{0, time.Second, time.Minute},
		{time.Second, 10 * time.Second, time.Minute},
		{time.Minute, 40 * time.Second, 80 * time.Second},
		{5 * time.Minute, 10 * time.Second, 5 * time.Minute},
	} {
		o := Options{Lease: tt.lease, Timeout: tt.timeout}.withDefaults()
		if o.Lease != tt.want {
			t.Errorf("lease %v with a %v timeout: %v, want %v", tt.lease, tt.timeout, o.Lease, tt.want)
		}
	}
}
