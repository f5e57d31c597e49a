package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

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

func TestScriptedSessionSequence(t *testing.T) {
	r := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	// With several requests in flight per endpoint, one channel's still
	// arrive in order.
	d := start(t, testdb.New(t, storage.Open), a, fast)
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
	d := start(t, testdb.New(t, storage.Open), a, inOrder)
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

// testHold is a Hold the test runs: Take keeps the events of channel
// "kept" and lets the others through; Due hands over what the test gave
// release, and at shutdown what was kept too.
type testHold struct {
	mu             sync.Mutex
	kept, released []hub.Event
}

func (h *testHold) Take(ev hub.Event, _ time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.Channel == "kept" {
		h.kept = append(h.kept, ev)
		return false
	}
	return true
}

func (h *testHold) Due(_ time.Time, all bool) []hub.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	due := h.released
	if all {
		due = append(due, h.kept...)
		h.kept = nil
	}
	h.released = nil
	return due
}

func (h *testHold) release(ev hub.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = append(h.released, ev)
}

// The dispatcher holds departures through its Holder alone, as a cluster
// node's (whose departures were held in Redis already): what the Holder
// lets through goes at once, neither held again nor cancelled by a return;
// what it keeps goes when Due hands it over, and at shutdown.
func TestEventsGoThroughTheHolder(t *testing.T) {
	r := newReceiver(t, "k", "s")
	down := newReceiver(t, "k", "s")
	down.failFirst.Store(1 << 30)
	a := apps{
		"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}},
		"2": {ID: "2", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: down.srv.URL}}},
	}
	h := &testHold{}
	opts := inOrder
	opts.Holder = h
	db := testdb.New(t, storage.Open)
	d := New(db, a, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)), opts)
	d.Start()
	d.Observe(hub.Event{AppID: "2", Kind: hub.ChannelVacated, Channel: "kept"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelVacated, Channel: "c"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.MemberRemoved, Channel: "presence-c", UserID: "u"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.MemberAdded, Channel: "presence-c", UserID: "u"})
	r.waitFor(4)
	h.release(hub.Event{AppID: "1", Kind: hub.ChannelVacated, Channel: "due"})
	r.waitFor(5)
	want := "channel_vacated:c member_removed:presence-c:u channel_occupied:c member_added:presence-c:u channel_vacated:due"
	if got := strings.Join(r.events(), " "); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	waitOutboxEmpty(t, db)
	d.Close()
	// The kept departure, written at shutdown (its endpoint is down).
	if n, _ := db.CountWebhookOutbox(context.Background()); n != 1 {
		t.Fatalf("the outbox holds %d after the shutdown, want the kept channel_vacated", n)
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
	// Observed before the dispatcher starts, so that they wait together
	// for its first flush, a second after: the collector would have to
	// stall that long between taking two queued events to split them.
	opts := fast
	opts.Flush = time.Second
	d := New(testdb.New(t, storage.Open), a, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), opts)
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "presence-a"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "news"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.SubscriptionCount, Channel: "news", Count: 3})
	d.Start()
	t.Cleanup(d.Close)
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

func TestObserveNeverBlocks(t *testing.T) {
	d := New(nil, apps{}, zap.NewNop(), Options{Buffer: 2})
	for i := 0; i < 10; i++ { // not started: nothing drains the buffer
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c"})
	}
	if d.Dropped() != 8 {
		t.Fatalf("dropped %d, want 8", d.Dropped())
	}
}
