package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

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
	db := testdb.New(t, storage.Open)
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
	db := testdb.New(t, storage.Open)
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
	db := testdb.New(t, storage.Open)
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
	db := testdb.New(t, storage.Open)
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
		d := New(testdb.New(t, storage.Open), a, zap.NewNop(), fast)
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
		db := testdb.New(t, storage.Open)
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
		d := New(testdb.New(t, storage.Open), a, zap.NewNop(), fast)
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
	d := start(t, testdb.New(t, storage.Open), a, opts)
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
	d = start(t, testdb.New(t, storage.Open), a, opts)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "b"})
	wait.Until(t, "a refused attempt", func() bool { return len(seen.get()) > 0 })
	if at := seen.get()[0]; at.Status != 0 || !strings.Contains(at.Error, "address refused by the guard") {
		t.Fatalf("attempt %+v, want the guard's refusal", at)
	}
	if n := len(r.events()); n != 1 {
		t.Fatalf("the endpoint received %d requests, want only the first dispatcher's", n)
	}
}

func TestDefaults(t *testing.T) {
	o := Options{}.WithDefaults()
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
		o := Options{Lease: tt.lease, Timeout: tt.timeout}.WithDefaults()
		if o.Lease != tt.want {
			t.Errorf("lease %v with a %v timeout: %v, want %v", tt.lease, tt.timeout, o.Lease, tt.want)
		}
	}
}
