package cluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// inbox keeps what a relay delivered.
type inbox struct {
	mu      sync.Mutex
	events  []string // app: event
	dropped int
}

func (in *inbox) deliver(appID string, events []json.RawMessage, dropped int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, e := range events {
		in.events = append(in.events, appID+": "+string(e))
	}
	in.dropped += dropped
}

func (in *inbox) all() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return strings.Join(in.events, "\n")
}

func (in *inbox) count() (events, dropped int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.events), in.dropped
}

// A node's console events go to another node while it watches the app,
// never back to the node that sent them, and stop being wanted once
// nobody watches; on each topology (on a Redis Cluster, PUBSUB is asked of
// the node the console's channels live on).
func TestConsoleRelay(t *testing.T) {
	onEachTopology(t, testConsoleRelay)
}

func testConsoleRelay(t *testing.T, cluster startCluster) {
	ns := cluster(2)
	a, b := ns[0], ns[1]
	var inA, inB inbox
	ra, rb := a.c.ConsoleRelay(inA.deliver), b.c.ConsoleRelay(inB.deliver)

	ra.Watch("app")
	wait.Until(t, "node b to learn that node a watches app", func() bool { return rb.Wanted("app") })
	if rb.Wanted("other") {
		t.Fatal("node b wants the events of an app nobody watches")
	}
	// Node a, the app's only watcher (its subscription is the one node b
	// found), wants none of its own events. (Its loop refreshes as well,
	// with the same answer.)
	ra.refresh(map[string]bool{"app": true})
	if ra.Wanted("app") {
		t.Fatal("node a, alone watching app, wants its own events")
	}
	// Where a node asks PUBSUB is where the watcher's subscription is,
	// every time (a random node of a Redis Cluster would not know it).
	for range 10 {
		rdb, err := members(b.c)[0].pubsubNode(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n, err := rdb.PubSubNumSub(t.Context(), ra.channel+"app").Result(); err != nil || n[ra.channel+"app"] != 1 {
			t.Fatalf("PUBSUB NUMSUB where node b asks: %v %v, want node a's subscription", n, err)
		}
	}
	rb.Send("app", []byte(`{"event":"one"}`))
	wait.Until(t, "node a to get node b's event", func() bool { return inA.all() == `app: {"event":"one"}` })

	// Both watch: each wants the other's events (a channel with two
	// subscribers), and a node ignores its own.
	rb.Watch("app")
	wait.Until(t, "node a to learn that node b watches app too", func() bool { return ra.Wanted("app") })
	ra.Send("app", []byte(`{"event":"two"}`))
	wait.Until(t, "node b to get node a's event", func() bool { return inB.all() == `app: {"event":"two"}` })
	rb.Send("app", []byte(`{"event":"three"}`))
	// Node a read its own "two" before b's "three", which b sent after it.
	wait.Until(t, "node a to get node b's second event", func() bool { return strings.Contains(inA.all(), "three") })
	if got := inA.all(); got != "app: {\"event\":\"one\"}\napp: {\"event\":\"three\"}" {
		t.Fatalf("node a got:\n%s\nwant b's events only", got)
	}

	ra.Unwatch("app")
	rb.Unwatch("app")
	wait.Until(t, "both to learn that nobody watches", func() bool { return !ra.Wanted("app") && !rb.Wanted("app") })
	if st := ra.Stats(); st.Published != 1 || st.Sent != 1 || st.Received != 2 {
		t.Fatalf("node a's relay: %+v, want 1 message of 1 event sent, 2 events received", st)
	}
}

// Events sent faster than the bounds of a flush are dropped, and each
// drop reaches the watching node: what it received and what it was told
// was dropped add up to what was sent.
func TestConsoleRelayReportsDrops(t *testing.T) {
	rs := testredis.Start(t)
	prefix := fmt.Sprintf("relaydrop%d:", time.Now().UnixNano())
	a, b := startNode(t, rs, prefix, "a"), startNode(t, rs, prefix, "b")
	var inA inbox
	ra, rb := a.c.ConsoleRelay(inA.deliver), b.c.ConsoleRelay(func(string, []json.RawMessage, int) {})
	ra.Watch("app")
	wait.Until(t, "node b to learn that node a watches app", func() bool { return rb.Wanted("app") })
	const sent = 4 * relayMaxEvents
	for i := range sent {
		rb.Send("app", []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	// Node b counts what it sent once Redis has answered, which may be after
	// node a has it.
	wait.Until(t, "node a to account for every event, and node b to count it", func() bool {
		events, dropped := inA.count()
		st := rb.Stats()
		return events+dropped == sent && int(st.Sent+st.Dropped) == sent
	})
	events, dropped := inA.count()
	if st := rb.Stats(); int(st.Dropped) != dropped || int(st.Sent) != events {
		t.Fatalf("node b counted %+v; node a got %d events and %d drops", st, events, dropped)
	}
}

// One flush takes at most relayMaxEvents events and relayMaxBytes bytes;
// the rest are dropped and counted per app until the queue is taken.
func TestRelayQueueBounds(t *testing.T) {
	var q relayQueue
	q.init()
	for range relayMaxEvents + 5 {
		q.add("app", []byte(`{}`))
	}
	q.add("other", []byte(`{}`))
	got := q.take()
	if len(got["app"].events) != relayMaxEvents || got["app"].dropped != 5 || got["other"].dropped != 1 || q.droppedTotal.Load() != 6 {
		t.Fatalf("took %d events of app with %d dropped, %d dropped of other, %d in all; want %d, 5, 1, 6",
			len(got["app"].events), got["app"].dropped, got["other"].dropped, q.droppedTotal.Load(), relayMaxEvents)
	}
	if q.take() != nil {
		t.Fatal("the queue was not emptied")
	}

	big := make([]byte, relayMaxBytes/2)
	q.add("app", big)
	q.add("app", big)
	q.add("app", []byte(`{}`)) // past the bytes
	got = q.take()
	// The two halves fill the flush to its last byte; the small one is
	// dropped.
	if len(got["app"].events) != 2 || got["app"].dropped != 1 || len(got["app"].events[1]) != len(big) {
		t.Fatalf("took %d events with %d dropped; want the two halves and 1", len(got["app"].events), got["app"].dropped)
	}
}

func TestGlobEscape(t *testing.T) {
	if got := globEscape(`a*b?c[d]e\f:`); got != `a\*b\?c\[d\]e\\f:` {
		t.Fatalf("globEscape = %q", got)
	}
}

// Which apps other nodes watch is judged against the channels this node is
// subscribed to, not the streams open here: an app whose stream just
// opened, before the loop has subscribed to its channel, is still wanted
// when another node's console watches it.
func TestConsoleRelayRefreshUsesSubscription(t *testing.T) {
	rs := testredis.Start(t)
	prefix := fmt.Sprintf("relayrefresh%d:", time.Now().UnixNano())
	a, b := startNode(t, rs, prefix, "a"), startNode(t, rs, prefix, "b")
	ra := a.c.ConsoleRelay(func(string, []json.RawMessage, int) {})
	ra.Watch("app")
	wait.Until(t, "node a to subscribe", func() bool {
		n, err := a.m().rdb.PubSubNumSub(t.Context(), a.m().key("console:app")).Result()
		return err == nil && n[a.m().key("console:app")] == 1
	})
	// Node b's relay without its loop: a stream of app is open, the
	// subscription not made yet.
	rb := &ConsoleRelay{c: b.m(), channel: b.m().key("console:"), watched: map[string]bool{"app": true}, changed: make(chan struct{}, 1)}
	rb.queue.init()
	rb.refresh(nil)
	if !rb.Wanted("app") {
		t.Fatal("node b does not want app's events, which node a watches")
	}
}

// A panic while delivering one relayed message costs that message only:
// it is counted with the cluster's panics and the next message arrives.
func TestConsoleRelayDeliverPanic(t *testing.T) {
	rs := testredis.Start(t)
	prefix := fmt.Sprintf("relaypanic%d:", time.Now().UnixNano())
	a, b := startNode(t, rs, prefix, "a"), startNode(t, rs, prefix, "b")
	var inA inbox
	ra := a.c.ConsoleRelay(func(appID string, events []json.RawMessage, dropped int) {
		if len(events) > 0 && string(events[0]) == `{"event":"boom"}` {
			panic("console bug")
		}
		inA.deliver(appID, events, dropped)
	})
	rb := b.c.ConsoleRelay(func(string, []json.RawMessage, int) {})
	ra.Watch("app")
	wait.Until(t, "node b to learn that node a watches app", func() bool { return rb.Wanted("app") })
	rb.Send("app", []byte(`{"event":"boom"}`))
	wait.Until(t, "the panic to be counted", func() bool { return a.c.Stats().Panics == 1 })
	rb.Send("app", []byte(`{"event":"after"}`))
	wait.Until(t, "node a to get the next event", func() bool { return inA.all() == `app: {"event":"after"}` })
}

// A relay message from Redis is read up to relayMaxMessage bytes; a larger
// one, which no node sends, is dropped unread, as is one that is not a
// relay message or is this node's own.
func TestRelayMessagesAreBounded(t *testing.T) {
	n := startNode(t, testredis.Start(t), "relaybound:", "n1")
	var in inbox
	r := n.c.ConsoleRelay(in.deliver)
	// A message of exactly size bytes from node "other", its one event
	// padded to fit.
	message := func(node string, size int) *redis.Message {
		head, tail := `{"node":"`+node+`","events":[{"pad":"`, `"}]}`
		return &redis.Message{Channel: r.channel + "app", Payload: head + strings.Repeat("x", size-len(head)-len(tail)) + tail}
	}
	r.receive(message("other", relayMaxMessage+1))
	r.receive(message("n1", relayMaxMessage))
	r.receive(&redis.Message{Channel: r.channel + "app", Payload: "not json"})
	r.receive(&redis.Message{Channel: "elsewhere", Payload: message("other", 100).Payload})
	if events, _ := in.count(); events != 0 {
		t.Fatalf("%d events delivered from messages over the bound, of this node, malformed or on another channel", events)
	}
	r.receive(message("other", relayMaxMessage))
	if events, _ := in.count(); events != 1 || r.Stats().Received != 1 {
		t.Fatalf("%d events delivered (%d counted) from a message of exactly the bound, want 1", events, r.Stats().Received)
	}
}

// tickClock is the tickers of a node's loops (Options.ticker: the
// heartbeat's, the console relay's): those of the periods it was made for
// tick only when the test ticks them, others are time.Tickers; it records
// the period of each ticker a loop asks for. Its channels are unbuffered,
// so a tick returns once the loop has taken it, and a second one once the
// loop is done with the first.
type tickClock struct {
	ticked  []time.Duration // the periods the test ticks
	mu      sync.Mutex
	periods []time.Duration
	ticks   []chan time.Time // nil for a time.Ticker
}

func newTickClock(ticked ...time.Duration) *tickClock { return &tickClock{ticked: ticked} }

func (tc *tickClock) ticker(every time.Duration) (<-chan time.Time, func()) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.periods = append(tc.periods, every)
	if !slices.Contains(tc.ticked, every) {
		tc.ticks = append(tc.ticks, nil)
		t := time.NewTicker(every)
		return t.C, t.Stop
	}
	ch := make(chan time.Time)
	tc.ticks = append(tc.ticks, ch)
	return ch, func() {}
}

// asked waits for the loops to ask for n tickers and returns the periods
// of all they asked for.
func (tc *tickClock) asked(t *testing.T, n int) []time.Duration {
	t.Helper()
	var got []time.Duration
	wait.Until(t, "the loops to ask for their tickers", func() bool {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		got = slices.Clone(tc.periods)
		return len(got) >= n
	})
	return got
}

// tick ticks the ticker of period every times times.
func (tc *tickClock) tick(t *testing.T, every time.Duration, times int) {
	t.Helper()
	tc.mu.Lock()
	i := slices.Index(tc.periods, every)
	tc.mu.Unlock()
	if i < 0 || tc.ticks[i] == nil {
		t.Fatalf("no ticker of %v to tick", every)
	}
	for range times {
		select {
		case tc.ticks[i] <- time.Now():
		case <-time.After(wait.Limit):
			t.Fatalf("no loop took a tick of the %v ticker", every)
		}
	}
}

// The relay's numbers, on tickers the test ticks: queued events go out
// every 100 ms, and which apps other nodes watch is asked of Redis every
// second — each at its own tick and not at the other's. (Each ticker is
// ticked twice, so that the first tick is handled when the test looks; a
// second flush or refresh changes nothing.)
func TestConsoleRelayFlushAndRefreshPeriods(t *testing.T) {
	rs := testredis.Start(t)
	prefix := fmt.Sprintf("relayclock%d:", time.Now().UnixNano())
	const flush, refresh = 100 * time.Millisecond, time.Second
	clock := newTickClock(flush, refresh)
	a := startNode(t, rs, prefix, "a")
	// Node b's heartbeat, of a period of its own, runs on a time.Ticker.
	const heartbeat = 50 * time.Millisecond
	b := startNode(t, rs, prefix, "b", func(o *Options) { o.Heartbeat, o.ticker = heartbeat, clock.ticker })
	var inA inbox
	ra, rb := a.c.ConsoleRelay(inA.deliver), b.c.ConsoleRelay(func(string, []json.RawMessage, int) {})
	if got := clock.asked(t, 3); len(got) != 3 || !slices.Contains(got, heartbeat) || !slices.Contains(got, flush) || !slices.Contains(got, refresh) {
		t.Fatalf("node b ticks every %v, want the heartbeat's %v, a flush every %v and a refresh every %v", got, heartbeat, flush, refresh)
	}

	ra.Watch("app")
	wait.Until(t, "node a to subscribe", func() bool {
		n, err := a.m().rdb.PubSubNumSub(t.Context(), a.m().key("console:app")).Result()
		return err == nil && n[a.m().key("console:app")] == 1
	})
	clock.tick(t, flush, 2)
	if rb.Wanted("app") {
		t.Fatal("node b learnt that node a watches app at a flush")
	}
	clock.tick(t, refresh, 2)
	if !rb.Wanted("app") {
		t.Fatal("node b did not learn that node a watches app at a refresh")
	}

	rb.Send("app", []byte(`{"event":"one"}`))
	clock.tick(t, refresh, 2)
	if st := rb.Stats(); st.Published != 0 {
		t.Fatalf("node b published %d messages at a refresh, want none before a flush", st.Published)
	}
	clock.tick(t, flush, 2)
	if st := rb.Stats(); st.Published != 1 || st.Sent != 1 {
		t.Fatalf("node b's relay after a flush: %+v, want 1 message of 1 event", st)
	}
	wait.Until(t, "node a to get node b's event", func() bool { return inA.all() == `app: {"event":"one"}` })
}

// The relay's subscription follows the apps watched on this node, one
// change at a time: an app watched besides another is subscribed to
// without the other's channel being left, one no longer watched is left
// alone, and each change sends Redis only what changed (no SUBSCRIBE of
// nothing, which Redis refuses). What go-redis holds as subscribed is
// what it subscribes to again on a new connection.
func TestRelaySubscriptionFollowsTheAppsWatched(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "relaysub:", "n1")
	// The relay without its loop: the test matches the subscription.
	r := &ConsoleRelay{c: n.m(), channel: n.m().key("console:")}
	var sub relaySubscription
	defer sub.close()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	subscribers := func(apps ...string) map[string]int64 {
		chans := make([]string, len(apps))
		for i, app := range apps {
			chans[i] = r.channel + app
		}
		n, err := rdb.PubSubNumSub(t.Context(), chans...).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, want := range [][]string{{"one"}, {"one", "two"}, {"two"}, {"three"}} {
		apps := make(map[string]bool)
		wantSubs := make(map[string]int64)
		var chans []string
		for _, app := range want {
			apps[app] = true
			chans = append(chans, r.channel+app)
		}
		sub.match(r, apps)
		got := strings.Split(strings.TrimSuffix(strings.TrimPrefix(sub.ps.String(), "PubSub("), ")"), ", ")
		slices.Sort(got)
		if !slices.Equal(got, chans) {
			t.Fatalf("watching %v, the relay holds %v as subscribed, want %v", want, got, chans)
		}
		for _, app := range []string{"one", "two", "three"} {
			if apps[app] {
				wantSubs[r.channel+app] = 1
			} else {
				wantSubs[r.channel+app] = 0
			}
		}
		wait.Until(t, fmt.Sprintf("Redis to have the subscriptions of %v", want), func() bool {
			return maps.Equal(subscribers("one", "two", "three"), wantSubs)
		})
	}
	stats, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(stats, "\r\n") {
		if strings.HasPrefix(line, "cmdstat_subscribe:") && !strings.Contains(line, "rejected_calls=0,") {
			t.Fatalf("Redis refused a SUBSCRIBE: %s", line)
		}
	}
}
