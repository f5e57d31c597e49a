package webhook

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/gen/channels"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/signing"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// blackHole is a webhook URL whose server accepts connections and never
// answers them.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String() + "/hook"
}

// held is an endpoint that keeps every request open until released, and
// counts them.
type held struct {
	srv                 *httptest.Server
	release             func()
	mu                  sync.Mutex
	open, most, arrived int
}

func newHeld(t *testing.T) *held {
	h := &held{}
	gate := make(chan struct{})
	h.release = sync.OnceFunc(func() { close(gate) })
	h.srv = httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		h.mu.Lock()
		h.open++
		h.arrived++
		h.most = max(h.most, h.open)
		h.mu.Unlock()
		<-gate
		h.mu.Lock()
		h.open--
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	t.Cleanup(h.release) // before the server closes: it waits for its handlers
	return h
}

func (h *held) counts() (open, most, arrived int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open, h.most, h.arrived
}

func occupied(channel string) []byte {
	return []byte(`{"time_ms":1,"events":[{"name":"channel_occupied","channel":"` + channel + `"}]}`)
}

// panicky panics when asked for app "boom".
type panicky struct{ apps }

func (p panicky) ByID(id string) *storage.App {
	if id == "boom" {
		panic("lookup")
	}
	return p.apps.ByID(id)
}

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

// The tests in fake time (testing/synctest), where instants are exact,
// send the dispatcher's requests to a fakeEndpoint instead of the network.

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
	db := testdb.New(t, storage.Open)
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
			if e.UserID != nil {
				s += ":" + *e.UserID
			}
			if e.Event != nil {
				s += ":" + *e.Event + "=" + *e.Data + "@" + *e.SocketID
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

func waitOutboxEmpty(t *testing.T, db *storage.DB) {
	t.Helper()
	wait.Until(t, "an empty outbox", func() bool {
		n, err := db.CountWebhookOutbox(context.Background())
		return err == nil && n == 0
	})
}
