package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/eventlog/eventlogtest"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// redisClient is a client of a fresh Redis, both gone when t ends.
func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	rs := testredis.Start(t)
	opts, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func TestEventLogStore(t *testing.T) {
	rdb := redisClient(t)
	var n atomic.Int64
	eventlogtest.Run(t, func(t *testing.T, l eventlog.Limits) eventlog.Store {
		// A prefix per test: one Redis serves them all.
		return NewEventLogStore(rdb, fmt.Sprintf("hist-test-%d:", n.Add(1)), l)
	})
}

// A channel's stream that outlived the app's counts (they expired first,
// under a TTL shortened since) is dropped at the next append instead of
// held uncounted, or refusing the append when its ids ran ahead.
func TestEventLogStoreDropsAStreamItsCountsLost(t *testing.T) {
	rdb := redisClient(t)
	s := NewEventLogStore(rdb, "orphan:", eventlog.Limits{})
	p := eventlog.Policy{Events: 10, TTL: time.Hour}
	now := time.Now()
	later := []eventlog.Entry{{Channel: "news", Name: "ev", Data: "ahead"}}
	if err := s.Append(t.Context(), "app", p, later, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(t.Context(), s.key("app"), s.key("app")+":lru", s.key("app")+":sizes").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(t.Context(), "app", p, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "now"}}, now); err != nil {
		t.Fatalf("append after the counts went: %v", err)
	}
	page, err := s.Read(t.Context(), "app", "news", p, eventlog.Query{}, now)
	if err != nil || len(page.Events) != 1 || page.Events[0].Data != "now" {
		t.Fatalf("read %+v, %v; want only the new event", page, err)
	}
	if st := s.Stats(); len(st.Apps) != 1 || st.Apps[0].Events != 1 {
		t.Fatalf("held %+v, want 1 event", st.Apps)
	}
}

// The cluster's own store of channel histories passes the stores' suite on
// each topology: on three shards each app's history is on its shard, and on
// a Redis Cluster its keys and script share the app's slot.
func TestClusterEventLogOnEachTopology(t *testing.T) {
	onEachTopology(t, func(t *testing.T, start startCluster) {
		var shards int
		newStore := func(t *testing.T, l eventlog.Limits) eventlog.Store {
			c := start(1)[0].c
			shards = len(members(c))
			return c.EventLog(l)
		}
		// Over shards each channel's history is on its shard, each shard
		// with its share of the app's bounds
		// (TestShardedHistoryKeepsTheAppsBoundsInAll).
		if newStore(t, eventlog.Limits{}); shards > 1 {
			eventlogtest.RunChannels(t, newStore)
			return
		}
		eventlogtest.Run(t, newStore)
	})
}

// Over shards an app's history is split by channel, each shard keeping
// its share of the app's bounds, rounded up (6 channels over 3 shards: 2
// each; 7: 3 each), and appends of several channels go each to its own
// shard: no shard holds more channels than its share; the channels a shard
// drops are those written least recently there.
func TestShardedHistoryKeepsTheAppsBoundsInAll(t *testing.T) {
	servers, url := shardList(t, 3)
	ns := cluster(t, servers[0], 1, withURL(url))
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	ms := members(ns[0].c)
	const channels = 30
	for _, c := range []struct{ maxChannels, share int }{{6, 2}, {7, 3}} {
		app := fmt.Sprint("app", c.maxChannels)
		store := ns[0].c.EventLog(eventlog.Limits{MaxChannels: c.maxChannels, MaxBytes: 1 << 20})
		// Five channels an append: each append over several shards.
		for i := 0; i < channels; i += 5 {
			var entries []eventlog.Entry
			for j := i; j < i+5; j++ {
				entries = append(entries, eventlog.Entry{Channel: fmt.Sprint("ch", j), Name: "e", Data: "x"})
			}
			if err := store.Append(t.Context(), app, p, entries, time.UnixMilli(1_764_194_400_000+int64(i))); err != nil {
				t.Fatal(err)
			}
		}
		kept, perShard := 0, make([]int, len(ms))
		newest := make([]int, len(ms)) // the newest channel each shard got
		for i := range channels {
			ch := fmt.Sprint("ch", i)
			k := shardOf(app, ch, len(ms))
			newest[k] = i
			page, err := store.Read(t.Context(), app, ch, p, eventlog.Query{}, time.UnixMilli(1_764_194_400_100))
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Events) > 0 {
				kept++
				perShard[k]++
				if n, err := ms[k].rdb.Exists(t.Context(), key(ms[k].p, app)+":c:"+ch).Result(); err != nil || n != 1 {
					t.Fatalf("%s's history is not on its shard %d", ch, k)
				}
			}
		}
		for k, n := range perShard {
			if n != c.share {
				t.Errorf("%d channels: shard %d keeps %d, want its share, %d", c.maxChannels, k, n, c.share)
			}
			page, _ := store.Read(t.Context(), app, fmt.Sprint("ch", newest[k]), p, eventlog.Query{}, time.UnixMilli(1_764_194_400_100))
			if len(page.Events) != 1 {
				t.Errorf("%d channels: shard %d dropped its newest channel", c.maxChannels, k)
			}
		}
		if st := store.Stats(); kept != c.share*len(ms) || len(st.Apps) != 1 || st.Apps[0].Events != int64(kept) {
			t.Fatalf("%d channels: kept %d, stats %+v; want %d in all", c.maxChannels, kept, st.Apps, c.share*len(ms))
		}
	}
}

// Over shards each shard keeps the app's bytes bound divided by the shards,
// rounded up, to the byte: a channel that costs its shard's share keeps
// both its events, one that costs a byte more drops the older. (The
// channels' bound is TestShardedHistoryKeepsTheAppsBoundsInAll's.)
func TestShardedHistoryKeepsItsShareOfTheBytesToTheByte(t *testing.T) {
	rdb := redisClient(t)
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	const shards = 3
	older := eventlog.Entry{Channel: "news", Name: "ev", Data: "x"}
	newer := eventlog.Entry{Channel: "news", Name: "ev", Data: "yy"}
	both := eventlog.ChannelCost("news") + older.Cost() + newer.Cost()
	for i, c := range []struct{ maxBytes, kept int }{
		{shards * both, 2},       // a share of exactly both
		{shards*both - 2, 2},     // rounded up to both
		{shards * (both - 1), 1}, // a byte short
		{shards*(both-1) - 2, 1}, // rounded up to a byte short
		{shards*(both-1) + 1, 2}, // rounded up to both
	} {
		// A store over three shards whose channel is on the first (the
		// others hold nothing): all on one Redis, a prefix for each case.
		prefix := fmt.Sprintf("share%d:", i)
		s := newEventLogStore(func(string, string) (redis.Cmdable, string, int) { return rdb, prefix, 0 }, shards, eventlog.Limits{MaxBytes: c.maxBytes})
		now := time.Now()
		for _, e := range []eventlog.Entry{older, newer} {
			if err := s.Append(t.Context(), "app", p, []eventlog.Entry{e}, now); err != nil {
				t.Fatal(err)
			}
		}
		page, err := s.Read(t.Context(), "app", "news", p, eventlog.Query{}, now)
		if err != nil || len(page.Events) != c.kept || page.Events[0].Data != newer.Data {
			t.Fatalf("a bound of %d bytes over %d shards (a channel of both costs %d): kept %v, %v; want the newest %d",
				c.maxBytes, shards, both, page.Events, err, c.kept)
		}
	}
}

// goneAfterLen is a Redis whose streams expire as soon as their length is
// read: what a read of a channel's history meets when the stream's TTL
// runs out between its two round trips.
type goneAfterLen struct{ *redis.Client }

func (c goneAfterLen) XLen(ctx context.Context, stream string) *redis.IntCmd {
	n := c.Client.XLen(ctx, stream)
	c.Client.Del(ctx, stream)
	return n
}

// A channel's history that expires while it is read under a policy shrunk
// since it was kept (more events than the policy's count: its newest are
// looked up first) reads as empty, either way round.
func TestAHistoryGoneWhileReadUnderAShrunkPolicyReadsEmpty(t *testing.T) {
	rdb := redisClient(t)
	kept := NewEventLogStore(rdb, "gone:", eventlog.Limits{})
	gone := NewEventLogStore(goneAfterLen{rdb}, "gone:", eventlog.Limits{})
	long, short := eventlog.Policy{Events: 10, TTL: time.Hour}, eventlog.Policy{Events: 2, TTL: time.Hour}
	now := time.Now()
	for _, oldestFirst := range []bool{false, true} {
		for i := range 3 {
			if err := kept.Append(t.Context(), "app", long, []eventlog.Entry{{Channel: "news", Name: "ev", Data: fmt.Sprint(i)}}, now); err != nil {
				t.Fatal(err)
			}
		}
		page, err := gone.Read(t.Context(), "app", "news", short, eventlog.Query{OldestFirst: oldestFirst}, now)
		if err != nil || len(page.Events) != 0 || page.More {
			t.Fatalf("oldest first %v: read %v (more %v), %v; want nothing", oldestFirst, page.Events, page.More, err)
		}
	}
}

// A trigger's events kept through PublishKept are delivered on every node
// and appended to their channel's history by the publish call itself
// (kept: the caller appends nothing), in the order they were published, on
// every topology: over shards and a Redis Cluster each channel's history is
// on its own shard (in its hash slot), and an app's channels over two
// shards are kept each on its own.
func TestPublishKeptAppendsInThePublishRoundTrip(t *testing.T) {
	onEachTopology(t, func(t *testing.T, start startCluster) {
		ns := start(2)
		store := ns[0].c.EventLog(eventlog.Limits{})
		p := eventlog.Policy{Events: 100, TTL: time.Hour}
		// Two channels on two shards (one Redis: both on it).
		ms := members(ns[0].c)
		shard := func(ch string) *member { return ms[shardOf("app", ch, len(ms))] }
		channels := []string{"feed0"}
		for i := 1; len(ms) > 1 && len(channels) == 1; i++ {
			if ch := fmt.Sprint("feed", i); shard(ch) != shard("feed0") {
				channels = append(channels, ch)
			}
		}
		reader := ns[1].connect("app")
		for _, ch := range channels {
			reader.subscribe(ch, nil)
			reader.wait(ch, "pusher_internal:subscription_succeeded")
		}
		const n = 20
		now := time.Now()
		for i := range n {
			ch := channels[i%len(channels)]
			ms := []hub.Message{{AppID: "app", Channel: ch, Event: "tick", Data: fmt.Sprint(i)}}
			kept, err := ns[0].hub.PublishKept(store, p, now, ms...)
			if err != nil {
				t.Fatal(err)
			}
			if !kept {
				t.Fatalf("publish %d on %s: not kept", i, ch)
			}
		}
		for c, ch := range channels {
			var want []string
			for i := c; i < n; i += len(channels) {
				want = append(want, fmt.Sprint(i))
			}
			page, err := store.Read(t.Context(), "app", ch, p, eventlog.Query{OldestFirst: true}, now)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range page.Events {
				got = append(got, e.Data)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("history of %s: %v, want %v", ch, got, want)
			}
			wait.Until(t, "node 2 gets every tick on "+ch, func() bool { return reader.count(ch, "tick") == len(want) })
			// On the channel's own shard.
			if n, err := shard(ch).rdb.Exists(t.Context(), key(shard(ch).p, "app")+":c:"+ch).Result(); err != nil || n != 1 {
				t.Fatalf("%s's history is not on its shard: %d, %v", ch, n, err)
			}
		}
		if st := store.Stats(); len(st.Apps) != 1 || st.Apps[0].Events != n {
			t.Fatalf("held %+v, want %d events", st.Apps, n)
		}
	})
}

// Triggers of one app that wait for the same publish call share one
// append: every event is kept once, each channel's in the order it was
// published.
func TestPublishKeptTogetherKeepsEveryEventInOrder(t *testing.T) {
	n := cluster(t, testredis.Start(t), 1)[0]
	store := n.c.EventLog(eventlog.Limits{})
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	const publishers, each = 8, 25
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			for i := range each {
				m := hub.Message{AppID: "app", Channel: fmt.Sprint("g", g), Event: "tick", Data: fmt.Sprint(i)}
				if kept, err := n.hub.PublishKept(store, p, time.Now(), m); err != nil || !kept {
					t.Errorf("publish: kept %v, %v", kept, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for g := range publishers {
		page, err := store.Read(t.Context(), "app", fmt.Sprint("g", g), p, eventlog.Query{OldestFirst: true}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range page.Events {
			got = append(got, e.Data)
		}
		want := make([]string, each)
		for i := range want {
			want[i] = fmt.Sprint(i)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("history of g%d: %v, want %v", g, got, want)
		}
	}
	if st := store.Stats(); len(st.Apps) != 1 || st.Apps[0].Events != publishers*each {
		t.Fatalf("held %+v, want %d events", st.Apps, publishers*each)
	}
}

// Redis that lost its scripts (a restart with its data, SCRIPT FLUSH) has
// a publish and its history append retried in order: nothing of the node's
// record was applied out of order, so nothing is rebuilt.
func TestScriptsLostWithAHistoryAppendRebuildNothing(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 1)
	store := ns[0].c.EventLog(eventlog.Limits{})
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	cl := ns[0].connect("app")
	cl.subscribe("feed", nil)
	cl.wait("feed", "pusher_internal:subscription_succeeded")
	resyncs := ns[0].c.Stats().Resyncs
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	kept, err := ns[0].hub.PublishKept(store, p, time.Now(), hub.Message{AppID: "app", Channel: "feed", Event: "tick", Data: "{}"})
	if err != nil || !kept {
		t.Fatalf("publish after SCRIPT FLUSH: kept %v, %v", kept, err)
	}
	cl.wait("feed", "tick")
	// A rebuild asked for would come before the next change the node
	// writes: a subscription.
	cl.subscribe("other", nil)
	cl.wait("other", "pusher_internal:subscription_succeeded")
	if got := ns[0].c.Stats().Resyncs; got != resyncs {
		t.Fatalf("%d rebuilds after Redis lost its scripts, want none", got-resyncs)
	}
}

// keptNews returns the channel history of n's cluster, a policy keeping
// 10 events, a subscriber of app's channel news on n, and publish, which
// publishes a tick of data there kept in that history (the same Redis
// keeps both).
func keptNews(t *testing.T, n *node) (*EventLogStore, eventlog.Policy, *client, func(data string) error) {
	store := n.c.EventLog(eventlog.Limits{})
	p := eventlog.Policy{Events: 10, TTL: time.Hour}
	sub := n.connect("app")
	sub.subscribe("news", nil)
	sub.wait("news", "pusher_internal:subscription_succeeded")
	return store, p, sub, func(data string) error {
		t.Helper()
		kept, err := n.hub.PublishKept(store, p, time.Now(), hub.Message{AppID: "app", Channel: "news", Event: "tick", Data: data})
		if !kept {
			t.Fatalf("publish %s: not kept, the channel is on the history's Redis", data)
		}
		return err
	}
}

// A trigger kept in its channel's history says what failed: refused while
// Redis does not answer, as any trigger; delivered, with a warning, when
// only its history append fails; delivered and kept without a word
// otherwise.
func TestPublishKeptReportsWhatFailed(t *testing.T) {
	rs := testredis.Start(t)
	core, logs := observer.New(zapcore.WarnLevel)
	n := startLoggedNode(t, rs, "kept:", "n1", zap.New(core))
	store, _, sub, publish := keptNews(t, n)
	const notKept = "an event was delivered but not kept in its channel's history"
	if err := publish("1"); err != nil {
		t.Fatal(err)
	}
	if logs.FilterMessage(notKept).Len() != 0 {
		t.Fatal("an event kept in history was logged as not kept")
	}
	// The app's history record made a string: the append script fails on
	// it (WRONGTYPE), the publish in the same pipeline does not.
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.Set(t.Context(), store.key("app"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := publish("2"); err != nil {
		t.Fatalf("a publish whose history append failed: %v", err)
	}
	wait.Until(t, "both ticks delivered", func() bool { return sub.count("news", "tick") == 2 })
	if logs.FilterMessage(notKept).Len() != 1 {
		t.Fatalf("%d warnings of an event not kept, want 1", logs.FilterMessage(notKept).Len())
	}
	rs.Stop()
	wait.Until(t, "the node sees Redis down", func() bool { return !n.c.Stats().Up })
	if err := publish("3"); !errors.Is(err, hub.ErrUnavailable) {
		t.Fatalf("a publish while Redis is down: %v, want hub.ErrUnavailable", err)
	}
}

// fillHistory appends n events of data to each of channels channels of
// app ("<name>-<i>"), a hundred a call.
func fillHistory(t *testing.T, s *EventLogStore, app, name string, channels, n int, data string, p eventlog.Policy, now time.Time) {
	t.Helper()
	var batch []eventlog.Entry
	for c := range channels {
		for range n {
			batch = append(batch, eventlog.Entry{Channel: fmt.Sprintf("%s-%04d", name, c), Name: "e", Data: data})
			if len(batch) == 100 {
				if err := s.Append(t.Context(), app, p, batch, now); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
			}
		}
	}
	if len(batch) > 0 {
		if err := s.Append(t.Context(), app, p, batch, now); err != nil {
			t.Fatal(err)
		}
	}
}

// appendOnce runs one append script call and returns its answer: dropped
// by reason (4), events and bytes held, events read one by one and
// channels dropped whole.
func appendOnce(t *testing.T, s *EventLogStore, rdb redis.Scripter, app string, p eventlog.Policy, entries []eventlog.Entry, now time.Time) []int64 {
	t.Helper()
	cl := s.appendCall(s.prefixOf(app), app, p, entries, now)
	v, err := histAppendScript.Run(t.Context(), rdb, cl.keys, cl.args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 8 {
		t.Fatalf("the append answered %v, want 8 numbers", v)
	}
	if err := s.appended(app, 0, v, nil); err != nil {
		t.Fatal(err)
	}
	return v
}

// trigger is one trigger's events: one of 10 KB on each of n channels
// "big-<i>".
func trigger(n int) []eventlog.Entry {
	data := strings.Repeat("x", 10<<10)
	es := make([]eventlog.Entry, n)
	for i := range es {
		es[i] = eventlog.Entry{Channel: fmt.Sprintf("big-%04d", i), Name: "ev", Data: data}
	}
	return es
}

// One trigger of 10 KB to 100 channels of an app at its bytes bound, with
// its room held by many small events, is one script call whose work does
// not grow with the events it drops: the channels that must go whole go
// at a cost of their own (issue 45: such a call dropped a million events
// one by one and blocked Redis for seconds). Every event of the trigger is
// kept, and the app is within its bound.
func TestHistoryAppendWorkIsBoundedPerCall(t *testing.T) {
	rdb := redisClient(t)
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	const channels, each = 200, 100
	limit := channels * (eventlog.ChannelCost("small-0000") + each*eventlog.Entry{Name: "e"}.Cost())
	s := NewEventLogStore(rdb, "bounded:", eventlog.Limits{MaxBytes: limit})
	now := time.Now()
	fillHistory(t, s, "app", "small", channels, each, "", p, now)
	if st := s.Stats().Apps[0]; st.Events != channels*each || st.Bytes != int64(limit) {
		t.Fatalf("filled: %+v, want %d events of %d bytes", st, channels*each, limit)
	}
	big := trigger(100)
	v := appendOnce(t, s, rdb, "app", p, big, now)
	if read, whole := v[6], v[7]; read > TrimBudget+int64(len(big)) || whole > TrimBudget {
		t.Fatalf("the call read %d events and dropped %d channels whole one by one, want at most %d and %d",
			read, whole, TrimBudget+len(big), TrimBudget)
	}
	if v[2] < 100*each || v[5] > int64(limit) {
		t.Fatalf("dropped %d events for bytes and holds %d bytes; want over %d dropped, within %d", v[2], v[5], 100*each, limit)
	}
	for _, e := range big {
		if pg, err := s.Read(t.Context(), "app", e.Channel, p, eventlog.Query{}, now); err != nil || len(pg.Events) != 1 {
			t.Fatalf("%s: read %d events, %v; want the trigger's", e.Channel, len(pg.Events), err)
		}
	}
}

// An append that would need more than its budget to make room stops
// there, and drops its own events (the oldest first) until the app holds
// no more than before it: the bound holds whatever the budget. An app
// over its bound (HERALD_HISTORY_MAX_BYTES lowered) gets back within it
// over the next appends, each within its budget.
func TestHistoryAppendOverBudgetKeepsTheBound(t *testing.T) {
	rdb := redisClient(t)
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	const channels = TrimBudget * 3 / 2
	limit := channels * (eventlog.ChannelCost("small-0000") + eventlog.Entry{Name: "e"}.Cost())
	s := NewEventLogStore(rdb, "budget:", eventlog.Limits{MaxBytes: limit})
	now := time.Now()
	fillHistory(t, s, "app", "small", channels, 1, "", p, now)
	big := trigger(100)
	v := appendOnce(t, s, rdb, "app", p, big, now)
	if v[7] != TrimBudget || v[5] > int64(limit) {
		t.Fatalf("dropped %d channels whole and holds %d bytes; want the budget's %d and at most %d", v[7], v[5], TrimBudget, limit)
	}
	if kept := v[4] - (channels - TrimBudget); kept <= 0 || kept >= int64(len(big)) {
		t.Fatalf("%d events held, %d of them the trigger's; want some of its %d dropped for the bound", v[4], kept, len(big))
	}

	lower := NewEventLogStore(rdb, "budget:", eventlog.Limits{MaxBytes: limit / 10})
	held := v[5]
	for i := 0; held > int64(limit/10); i++ {
		if i == 10 {
			t.Fatalf("ten appends on, the app holds %d bytes, over its bound %d", held, limit/10)
		}
		v := appendOnce(t, lower, rdb, "app", p, []eventlog.Entry{{Channel: "news", Name: "e", Data: "x"}}, now)
		if v[5] >= held || v[6] > TrimBudget+1 || v[7] > TrimBudget {
			t.Fatalf("append %d: %d bytes held after %d, %d events read, %d channels dropped; want fewer bytes within the budget", i, v[5], held, v[6], v[7])
		}
		held = v[5]
	}
}

// Every key of an app's history expires its TTL after the app's (or the
// channel's) last append, as Redis counts it: an app that stops writing
// leaves nothing behind.
func TestEventLogStoreKeysExpireTheTTLAfterTheLastAppend(t *testing.T) {
	rdb := redisClient(t)
	s := NewEventLogStore(rdb, "ttl:", eventlog.Limits{})
	p := eventlog.Policy{Events: 10, TTL: 90 * time.Minute}
	if err := s.Append(t.Context(), "app", p, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "x"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{s.key("app"), s.key("app") + ":lru", s.key("app") + ":sizes", s.key("app") + ":c:news"} {
		ttl, err := rdb.PTTL(t.Context(), key).Result()
		if err != nil || ttl > p.TTL || ttl < p.TTL-time.Minute {
			t.Fatalf("%s expires in %v (%v), want %v", key, ttl, err, p.TTL)
		}
	}
}

// Over shards a publish of several events of one shard goes whole to that
// shard, kept and delivered, as a batch trigger's do.
func TestShardedPublishOfSeveralEventsOfOneShard(t *testing.T) {
	servers, url := shardList(t, 3)
	ns := cluster(t, servers[0], 2, withURL(url))
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	store := ns[0].c.EventLog(eventlog.Limits{})
	reader := ns[1].connect("app")
	reader.subscribe("feed", nil)
	reader.wait("feed", "pusher_internal:subscription_succeeded")
	var ms []hub.Message
	for i := range 3 {
		ms = append(ms, hub.Message{AppID: "app", Channel: "feed", Event: "tick", Data: fmt.Sprint(i)})
	}
	if kept, err := ns[0].hub.PublishKept(store, p, time.Now(), ms...); err != nil || !kept {
		t.Fatalf("publish: kept %v, %v", kept, err)
	}
	if err := ns[0].hub.Publish(hub.Message{AppID: "app", Channel: "feed", Event: "plain", Data: "a"}, hub.Message{AppID: "app", Channel: "feed", Event: "plain", Data: "b"}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "every event delivered", func() bool { return reader.count("feed", "tick") == 3 && reader.count("feed", "plain") == 2 })
	page, err := store.Read(t.Context(), "app", "feed", p, eventlog.Query{OldestFirst: true}, time.Now())
	if err != nil || len(page.Events) != 3 {
		t.Fatalf("history %d events, %v; want 3", len(page.Events), err)
	}
}
