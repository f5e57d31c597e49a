package webhook

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
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

// An event is written to the outbox and the sender woken at once: one event
// after another, each is delivered though the sender's idle poll and purge
// sweep are an hour, so nothing but the wake-up could have sent it. Nothing
// is logged as an error.
func TestDeliveredWithoutWaitingForThePoll(t *testing.T) {
	r := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	core, logs := observer.New(zapcore.InfoLevel)
	d := New(openDB(t, filepath.Join(t.TempDir(), "h.db")), a, zap.New(core), fast)
	d.idlePoll, d.purgeEvery = time.Hour, time.Hour
	d.Start()
	t.Cleanup(d.Close)
	const rounds = 4
	for i := range rounds {
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c" + itoa(i)})
		r.waitFor(i + 1)
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

// When the outbox cannot be read, or its expired requests cannot be
// dropped, the sender logs it: the one sign that webhooks have stopped.
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
	// A round drops the expired requests before it reads the outbox.
	if logs.FilterMessage("dropping expired webhooks").Len() == 0 {
		t.Fatal("the failed sweep of expired requests was not logged")
	}
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

// Tests in fake time (testing/synctest), where instants are exact: the
// dispatcher's requests go to a fakeEndpoint instead of the network.

// hookURL is the one endpoint of app "1" in the fake-time tests.
const hookURL = "http://hook.test/"

// fakeEndpoint answers the dispatcher's requests in a synctest bubble. It
// records when each request came (since the bubble's start), answers with
// the next of statuses (200 once they run out), and, while gate is set, holds
// each request until gate is closed or the sender stops.
type fakeEndpoint struct {
	mu       sync.Mutex
	statuses []int
	gate     chan struct{}
	at       []time.Duration
	start    time.Time
}

func (e *fakeEndpoint) RoundTrip(r *http.Request) (*http.Response, error) {
	e.mu.Lock()
	e.at = append(e.at, time.Since(e.start))
	status := http.StatusOK
	if len(e.statuses) > 0 {
		status, e.statuses = e.statuses[0], e.statuses[1:]
	}
	gate := e.gate
	e.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return &http.Response{StatusCode: status, Body: http.NoBody, Request: r}, nil
}

// came returns when the requests came, since the bubble's start.
func (e *fakeEndpoint) came() []time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.at)
}

// fakeTimeDispatcher returns a dispatcher, not started, whose requests go to
// e, with a new outbox holding a request to e for each of channels, written
// now, and what the dispatcher logs. Call it in a synctest bubble.
func fakeTimeDispatcher(t *testing.T, opts Options, e *fakeEndpoint, channels ...string) (*Dispatcher, *storage.DB, *observer.ObservedLogs) {
	t.Helper()
	e.start = time.Now()
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	var items []storage.OutboxWebhook
	for _, c := range channels {
		items = append(items, storage.OutboxWebhook{AppID: "1", URL: hookURL, Key: c, Body: occupied(c)})
	}
	if _, err := db.EnqueueWebhooks(context.Background(), items, 0); err != nil {
		t.Fatal(err)
	}
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: hookURL}}}}
	core, logs := observer.New(zapcore.InfoLevel)
	d := New(db, a, zap.New(core), opts)
	d.client.Transport = e
	return d, db, logs
}

// dueNow tells whether the outbox has a request that a sender may claim now,
// with the default 8 requests in flight per endpoint.
func dueNow(t *testing.T, db *storage.DB) bool {
	t.Helper()
	next, ok, err := db.NextWebhookDue(context.Background(), time.Now(), 8)
	if err != nil {
		t.Fatal(err)
	}
	return ok && !next.After(time.Now())
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

// The sender claims from the outbox only as many requests as it has free
// senders: while both of its two wait for a slow endpoint, the third request
// stays unclaimed and due, and goes once one of them is done.
func TestClaimsNoMoreThanItsFreeSenders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &fakeEndpoint{gate: make(chan struct{})}
		d, db, logs := fakeTimeDispatcher(t, Options{Senders: 2, Timeout: time.Hour}, e, "a", "b", "c")
		d.Start()
		t.Cleanup(d.Close)
		time.Sleep(time.Minute) // rounds go on meanwhile, at least one a second
		synctest.Wait()
		if n := len(e.came()); n != 2 {
			t.Fatalf("%d requests sent, want 2", n)
		}
		if !dueNow(t, db) {
			t.Fatal("the third request was claimed with no sender free for it")
		}
		close(e.gate)
		synctest.Wait()
		if n, err := db.CountWebhookOutbox(context.Background()); err != nil || n != 0 || len(e.came()) != 3 {
			t.Fatalf("outbox holds %d (%v) after %d requests, want all three delivered", n, err, len(e.came()))
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

// A request in flight when the dispatcher closes is not a failed attempt: it
// is given back to the outbox, due at once for the next start, and nothing is
// logged as an error.
func TestRequestInFlightAtCloseGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &fakeEndpoint{gate: make(chan struct{})}
		d, db, logs := fakeTimeDispatcher(t, Options{}, e, "a")
		d.Start()
		synctest.Wait()
		if n := len(e.came()); n != 1 {
			t.Fatalf("%d requests sent, want 1", n)
		}
		d.Close()
		n, err := db.CountWebhookOutbox(context.Background())
		if due := dueNow(t, db); err != nil || n != 1 || !due {
			t.Fatalf("outbox holds %d (%v), due now: %v; want the request, given back", n, err, due)
		}
		if s := d.Stats(); s != (Stats{}) {
			t.Fatalf("stats %+v, want none counted", s)
		}
		noErrors(t, logs)
	})
}

// Drop lines are due once the app's last line is an interval old, the
// interval included: drops exactly an interval after the last line are
// logged at once, a flush exactly an interval after it writes what waits,
// and an app that has dropped nothing for exactly an interval is forgotten.
func TestDropLogIntervalIncludesItsEnd(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := &dropLog{log: zap.New(core), every: time.Minute, apps: map[string]*dropCount{}}
	lines := func() []string {
		var got []string
		for _, e := range logs.FilterMessage("webhook requests dropped unsent").All() {
			m := e.ContextMap()
			got = append(got, fmt.Sprintf("%s:%d/%d", m["app_id"], m["over_cap"], m["expired"]))
		}
		return got
	}
	t0 := time.Now()
	for _, step := range []struct {
		do   func()
		want []string
	}{
		{func() { l.add("1", 1, 0, t0) }, []string{"1:1/0"}},
		{func() { l.add("1", 2, 0, t0.Add(time.Minute)) }, []string{"1:1/0", "1:2/0"}},
		{func() { l.add("1", 0, 3, t0.Add(time.Minute+time.Second)) }, []string{"1:1/0", "1:2/0"}},
		{func() { l.flush(t0.Add(2*time.Minute), false) }, []string{"1:1/0", "1:2/0", "1:0/3"}},
		{func() { l.flush(t0.Add(3*time.Minute-time.Second), false) }, []string{"1:1/0", "1:2/0", "1:0/3"}},
	} {
		step.do()
		if got := lines(); !slices.Equal(got, step.want) {
			t.Fatalf("lines %v, want %v", got, step.want)
		}
	}
	if len(l.apps) != 1 {
		t.Fatalf("forgot app 1 less than an interval after its last line")
	}
	l.flush(t0.Add(3*time.Minute), false)
	if len(l.apps) != 0 || len(lines()) != 3 {
		t.Fatalf("lines %v, %d apps remembered; want app 1 forgotten without a line", lines(), len(l.apps))
	}
}
