package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
)

// Tests of issue 15: a bounded outbox that drains fast, parallel delivery,
// URLs kept out of the logs, and panics that stop only one request.

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

// One socket's churn floods the outbox of one app whose endpoint accepts
// connections and never answers. The outbox stays within the app's cap, the
// oldest requests are dropped and counted, the drops are logged once (the
// next line is due a minute later), and every request is accounted for once
// the outbox has drained, which takes about MaxAge plus a timeout after the
// flood, not a timeout per request.
func TestOutboxFloodAgainstABlackHole(t *testing.T) {
	const events, maxQueued = 3000, 50
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: blackHole(t)}}}}
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	opts := fast
	// MaxAge well above the flood's own duration (3,000 capped inserts take
	// the database writer a second or two on a loaded machine), so that
	// requests live long enough to be attempted and fail.
	opts.Timeout, opts.MaxAge, opts.MaxQueued = 100*time.Millisecond, 5*time.Second, maxQueued
	core, logs := observer.New(zapcore.InfoLevel)
	d := New(db, a, zap.New(core), opts)
	d.Start()
	t.Cleanup(d.Close)

	// The outbox's depth, watched from the side all along.
	var most atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if n, err := db.CountWebhookOutbox(context.Background()); err == nil && int64(n) > most.Load() {
				most.Store(int64(n))
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	for i := range events {
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c-" + itoa(i)})
	}
	flooded := time.Now()
	wait.Until(t, "every request dropped or given up", func() bool {
		s := d.Stats()
		return s.OverCap+s.Expired+s.Abandoned >= events
	})
	waitOutboxEmpty(t, db)
	took := time.Since(flooded)
	close(stop)
	<-watched

	if n := most.Load(); n > maxQueued {
		t.Errorf("the outbox held %d requests, over its cap of %d", n, maxQueued)
	}
	s := d.Stats()
	if s.Delivered != 0 || s.OverCap == 0 || s.Failed == 0 || s.OverCap+s.Expired+s.Abandoned != events {
		t.Errorf("stats %+v, want none delivered, some over the cap, failed attempts, and all %d accounted for", s, events)
	}
	lines := logs.FilterMessage("webhook requests dropped unsent").All()
	if len(lines) != 1 || lines[0].ContextMap()["app_id"] != "1" || lines[0].ContextMap()["over_cap"].(int64) == 0 {
		t.Errorf("drop log lines %v, want one for app 1 (the next is due in a minute)", lines)
	}
	// That the requests to the black hole go 8 at a time, not one by one
	// (each waiting out its timeout), TestEightRequestsInFlightPerEndpoint
	// shows by the requests in flight, not by the clock.
	t.Logf("the outbox drained %v after the flood", took)
}

// A slow endpoint has eight requests in flight at once, never more, and the
// ninth sender serves another endpoint meanwhile, although its request was
// written after all twenty of the slow one.
func TestEightRequestsInFlightPerEndpoint(t *testing.T) {
	slow := newHeld(t)
	other := newReceiver(t, "k", "s")
	a := apps{
		"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: slow.srv.URL}}},
		"2": {ID: "2", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: other.srv.URL}}},
	}
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	var items []storage.OutboxWebhook
	for i := range 20 {
		items = append(items, storage.OutboxWebhook{AppID: "1", URL: slow.srv.URL, Key: "c-" + itoa(i), Body: occupied("c-" + itoa(i))})
	}
	items = append(items, storage.OutboxWebhook{AppID: "2", URL: other.srv.URL, Key: "other", Body: occupied("other")})
	if _, err := db.EnqueueWebhooks(context.Background(), items, 0); err != nil {
		t.Fatal(err)
	}
	opts := fast
	opts.Senders, opts.Timeout = 9, wait.Limit
	d := start(t, db, a, opts)
	t.Cleanup(slow.release) // before Close, which waits for the requests in flight
	if got := strings.Join(other.waitFor(1), " "); got != "channel_occupied:other" {
		t.Fatalf("other endpoint got %s", got)
	}
	wait.Until(t, "8 requests open at the slow endpoint", func() bool { open, _, _ := slow.counts(); return open == 8 })
	slow.release()
	waitOutboxEmpty(t, db)
	if _, most, arrived := slow.counts(); most != 8 || arrived != 20 {
		t.Fatalf("slow endpoint: at most %d open, %d arrived; want 8 and 20", most, arrived)
	}
	if s := d.Stats(); s.Delivered != 21 || s.Failed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// With several requests in flight, each channel's events still arrive in
// the order they happened, at an endpoint that answers at its own pace.
func TestOneChannelsEventsArriveInOrder(t *testing.T) {
	var mu sync.Mutex
	var open, most int
	r := newReceiver(t, "k", "s")
	paced := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		open++
		most = max(most, open)
		n := open
		mu.Unlock()
		time.Sleep(time.Duration(n) * time.Millisecond) // the more at once, the slower: answers overtake each other
		r.srv.Config.Handler.ServeHTTP(w, req)
		mu.Lock()
		open--
		mu.Unlock()
	}))
	t.Cleanup(paced.Close)
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: paced.URL}}}}
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	d := start(t, db, a, fast)
	const perChannel = 20
	channels := []string{"private-a", "private-b", "private-c", "private-d"}
	for n := range perChannel {
		for _, c := range channels {
			d.Observe(hub.Event{AppID: "1", Kind: hub.ClientEvent, Channel: c, Name: "client-n", Data: itoa(n), SocketID: "1.1"})
		}
	}
	got := r.waitFor(perChannel * len(channels))
	seen := map[string][]string{}
	for _, e := range got {
		c := strings.Split(e, ":")[1]
		seen[c] = append(seen[c], e)
	}
	for _, c := range channels {
		var want []string
		for n := range perChannel {
			want = append(want, "client_event:"+c+":client-n="+itoa(n)+"@1.1")
		}
		if !slices.Equal(seen[c], want) {
			t.Errorf("%s arrived as\n%v\nwant\n%v", c, seen[c], want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most < 2 {
		t.Errorf("at most %d request in flight, want several", most)
	}
}

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
			db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
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

// Operators put credentials in webhook URLs (user info, ?token=); no log line
// and no reported attempt shows them: not the URL fields, not the HTTP
// client's errors, which quote the whole URL. The URL is still named, without
// them.
func TestWebhookURLsLoggedWithoutSecrets(t *testing.T) {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens there any more: the client's error names the URL
	secret := func(base string) string {
		return strings.Replace(base, "http://", "http://user:PASSWORD@", 1) + "/hook?token=SECRET#FRAGMENT"
	}
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: secret(failing.URL)}, {URL: secret(gone.URL)}}}}
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	if _, err := db.EnqueueWebhooks(context.Background(), []storage.OutboxWebhook{
		{AppID: "deleted", URL: secret(failing.URL), Body: occupied("x")},
		{AppID: "1", URL: "http://user:PASSWORD@127.0.0.1:1/%zz?token=SECRET", Body: occupied("x")}, // a bad URL
	}, 0); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	var seen attempts
	opts := fast
	// Long enough for each request to be attempted on a loaded machine; one
	// that is not is dropped as expired instead, also without its secrets.
	opts.MaxAge, opts.OnAttempt = 2*time.Second, seen.add
	d := New(db, a, zap.New(core), opts)
	d.Start()
	t.Cleanup(d.Close)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c"})
	wait.Until(t, "all four requests given up", func() bool { s := d.Stats(); return s.Abandoned+s.Expired == 4 })

	var all []string
	named := false
	for _, e := range logs.All() {
		all = append(all, e.Message+" "+fmt.Sprint(e.ContextMap()))
		named = named || e.ContextMap()["url"] == failing.URL+"/hook"
	}
	for _, at := range seen.get() {
		all = append(all, fmt.Sprintf("attempt %+v", at))
	}
	for _, line := range all {
		for _, s := range []string{"PASSWORD", "SECRET", "FRAGMENT", "user:"} {
			if strings.Contains(line, s) {
				t.Errorf("%q shows %s", line, s)
			}
		}
	}
	if !named || len(seen.get()) == 0 {
		t.Fatalf("no log line names %s/hook, or no attempt reported: %s", failing.URL, strings.Join(all, "\n"))
	}
}

// A panic while sending one request drops that request alone (counted as a
// panic and as abandoned, logged with its endpoint); the dispatcher goes on
// delivering the others.
func TestPanicInOneDeliveryLeavesTheOthers(t *testing.T) {
	r := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	core, logs := observer.New(zapcore.InfoLevel)
	d := New(db, a, zap.New(core), fast)
	d.beforeAttempt = func(w storage.OutboxWebhook) {
		if bytes.Contains(w.Body, []byte("boom")) {
			panic("forced")
		}
	}
	d.Start()
	t.Cleanup(d.Close)
	for _, c := range []string{"a", "boom", "b", "c"} {
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: c})
	}
	got := r.waitFor(3)
	waitOutboxEmpty(t, db)
	slices.Sort(got)
	if strings.Join(got, " ") != "channel_occupied:a channel_occupied:b channel_occupied:c" {
		t.Fatalf("received %v", got)
	}
	if s := d.Stats(); s.Panics != 1 || s.Abandoned != 1 || s.Delivered != 3 {
		t.Fatalf("stats %+v, want 1 panic, 1 abandoned, 3 delivered", s)
	}
	lines := logs.FilterMessage("recovered from a panic; only this webhook request is abandoned").All()
	if len(lines) != 1 || lines[0].ContextMap()["url"] != r.srv.URL || lines[0].ContextMap()["panic"] != "forced" {
		t.Fatalf("panic log %v", lines)
	}
}

// Panics elsewhere are stopped too: in a sender round (the next round goes
// on), in OnAttempt (the request stays delivered) and while writing the
// outbox (that flush's events are counted as unwritten; later ones go out).
func TestPanicsOutsideARequestAreRecovered(t *testing.T) {
	t.Run("sender round", func(t *testing.T) {
		r := newReceiver(t, "k", "s")
		a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
		d := New(openDB(t, filepath.Join(t.TempDir(), "h.db")), a, zap.NewNop(), fast)
		var once atomic.Bool
		d.beforeRound = func() {
			if once.CompareAndSwap(false, true) {
				panic("forced")
			}
		}
		d.Start()
		t.Cleanup(d.Close)
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "a"})
		wait.Until(t, "the request delivered", func() bool { return d.Stats().Delivered == 1 })
		if s := d.Stats(); s.Panics != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("OnAttempt", func(t *testing.T) {
		r := newReceiver(t, "k", "s")
		a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
		db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
		opts := fast
		opts.OnAttempt = func(Attempt) { panic("console") }
		d := start(t, db, a, opts)
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "a"})
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "b"})
		r.waitFor(2)
		waitOutboxEmpty(t, db)
		if s := d.Stats(); s.Panics != 2 || s.Delivered != 2 || s.Abandoned != 0 {
			t.Fatalf("stats %+v", s)
		}
		if n := len(r.events()); n != 2 {
			t.Fatalf("received %d requests, want each once", n)
		}
	})
	t.Run("writing the outbox", func(t *testing.T) {
		r := newReceiver(t, "k", "s")
		a := panicky{apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}}
		d := New(openDB(t, filepath.Join(t.TempDir(), "h.db")), a, zap.NewNop(), fast)
		d.Start()
		t.Cleanup(d.Close)
		d.Observe(hub.Event{AppID: "boom", Kind: hub.ChannelOccupied, Channel: "x"})
		wait.Until(t, "the panic", func() bool { return d.Stats().Panics == 1 })
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "a"})
		if got := strings.Join(r.waitFor(1), " "); got != "channel_occupied:a" {
			t.Fatalf("received %s", got)
		}
		wait.Until(t, "the request delivered", func() bool { return d.Stats().Delivered == 1 })
		if s := d.Stats(); s.Unwritten != 1 {
			t.Fatalf("stats %+v, want the lost event counted as unwritten", s)
		}
	})
}

// panicky panics when asked for app "boom".
type panicky struct{ apps }

func (p panicky) ByID(id string) *storage.App {
	if id == "boom" {
		panic("lookup")
	}
	return p.apps.ByID(id)
}

// Options.DialContext makes the webhook client's connections: the node plugs
// its address guard in there. What it refuses is a failed attempt that says
// why. The environment's proxies are not used then.
func TestDialContextMakesTheConnections(t *testing.T) {
	r := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	var mu sync.Mutex
	var dialed []string
	opts := fast
	opts.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, address)
		mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}
	d := start(t, openDB(t, filepath.Join(t.TempDir(), "h.db")), a, opts)
	if d.client.Transport.(*http.Transport).Proxy != nil {
		t.Error("a guarded client would use the environment's proxies")
	}
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "a"})
	r.waitFor(1)
	mu.Lock()
	if !slices.Contains(dialed, r.srv.Listener.Addr().String()) {
		t.Errorf("dialed %v, want %s", dialed, r.srv.Listener.Addr())
	}
	mu.Unlock()

	var seen attempts
	opts.OnAttempt = seen.add
	opts.DialContext = func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("address refused by the guard")
	}
	d = start(t, openDB(t, filepath.Join(t.TempDir(), "h.db")), a, opts)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "b"})
	wait.Until(t, "a refused attempt", func() bool { return len(seen.get()) > 0 })
	if at := seen.get()[0]; at.Status != 0 || !strings.Contains(at.Error, "address refused by the guard") {
		t.Fatalf("attempt %+v, want the guard's refusal", at)
	}
	if n := len(r.events()); n != 1 {
		t.Fatalf("the endpoint received %d requests, want only the first dispatcher's", n)
	}
}

// Drops are logged at once for an app's first, then at most once per
// interval per app, with the numbers since the app's previous line; a flush
// writes what waits once the interval has passed, and at shutdown all of it.
func TestDropLogOncePerIntervalPerApp(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := &dropLog{log: zap.New(core), every: time.Minute, apps: map[string]*dropCount{}}
	t0 := time.Now()
	l.add("1", 5, 0, t0)
	l.add("1", 3, 0, t0.Add(10*time.Second))
	l.add("2", 0, 4, t0.Add(20*time.Second))
	l.add("1", 0, 2, t0.Add(30*time.Second))
	l.flush(t0.Add(59*time.Second), false)
	l.flush(t0.Add(60*time.Second), false)
	l.add("2", 1, 0, t0.Add(61*time.Second))
	l.flush(t0.Add(3*time.Minute), false) // nothing waits: forgets both apps
	l.add("1", 7, 0, t0.Add(4*time.Minute))
	l.add("1", 1, 1, t0.Add(4*time.Minute+time.Second))
	l.flush(t0.Add(4*time.Minute+2*time.Second), true)
	var got []string
	for _, e := range logs.FilterMessage("webhook requests dropped unsent").All() {
		m := e.ContextMap()
		got = append(got, fmt.Sprintf("%s:%d/%d", m["app_id"], m["over_cap"], m["expired"]))
	}
	want := []string{"1:5/0", "2:0/4", "1:3/2", "2:1/0", "1:7/0", "1:1/1"}
	if !slices.Equal(got, want) {
		t.Fatalf("lines %v, want %v", got, want)
	}
	if len(l.apps) != 1 {
		t.Fatalf("remembers %d apps, want only the one that dropped since", len(l.apps))
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
	d := start(t, openDB(t, filepath.Join(t.TempDir(), "h.db")), a, opts)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "a"})
	wait.Until(t, "an attempt", func() bool { return len(seen.get()) > 0 })
	if at := seen.get()[0]; at.Status != http.StatusFound || at.Error == "" {
		t.Fatalf("attempt %+v, want a failed one with status 302", at)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect's target received %d requests, want none", n)
	}
}
