package cluster

import (
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
		return NewEventLogStore(func(string) redis.Cmdable { return rdb }, fmt.Sprintf("hist-test-%d:", n.Add(1)), l)
	})
}

// A channel's stream that outlived the app's counts (they expired first,
// under a TTL shortened since) is dropped at the next append instead of
// held uncounted, or refusing the append when its ids ran ahead.
func TestEventLogStoreDropsAStreamItsCountsLost(t *testing.T) {
	rdb := redisClient(t)
	s := NewEventLogStore(func(string) redis.Cmdable { return rdb }, "orphan:", eventlog.Limits{})
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
		eventlogtest.Run(t, func(t *testing.T, l eventlog.Limits) eventlog.Store {
			return start(1)[0].c.EventLog(l)
		})
	})
}

// A trigger's events kept through PublishKept are delivered on every node
// and appended to their channel's history by the publish call itself
// (kept: the caller appends nothing), in the order they were published, on
// one Redis and a Redis Cluster; over shards, a channel on another shard
// than its app's history is published alone and left to the caller
// (not kept), which then appends it as before.
func TestPublishKeptAppendsInThePublishRoundTrip(t *testing.T) {
	onEachTopology(t, func(t *testing.T, start startCluster) {
		ns := start(2)
		store := ns[0].c.EventLog(eventlog.Limits{})
		p := eventlog.Policy{Events: 100, TTL: time.Hour}
		// A channel on the Redis of the app's history, and (over shards)
		// one elsewhere.
		c := ns[0].c
		sameRedis := func(ch string) bool { return c.shardFor("app", ch).rdb == c.shardFor("app", "").rdb }
		var near, far string
		for i := range 200 {
			ch := fmt.Sprint("feed", i)
			if sameRedis(ch) && near == "" {
				near = ch
			} else if !sameRedis(ch) && far == "" {
				far = ch
			}
		}
		channels := []string{near}
		if far != "" {
			channels = append(channels, far)
		}
		if (far != "") != (len(c.shards) == 3) {
			t.Fatalf("channels %v: only 3 shards have channels elsewhere", channels)
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
			if want := sameRedis(ch); kept != want {
				t.Fatalf("publish %d on %s: kept %v, want %v", i, ch, kept, want)
			}
			if !kept {
				if err := store.Append(t.Context(), "app", p, []eventlog.Entry{{Channel: ch, Name: "tick", Data: fmt.Sprint(i)}}, now); err != nil {
					t.Fatal(err)
				}
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

// The history appends that wait for one publish call share a script call
// when they are consecutive and of one store, app and policy, at the latest
// of their times; any of the three that differs starts another.
func TestKeepCallsGroupConsecutiveAppendsOfOneAppOnly(t *testing.T) {
	s1, s2 := &EventLogStore{prefix: "a:"}, &EventLogStore{prefix: "b:"}
	p1, p2 := eventlog.Policy{Events: 10}, eventlog.Policy{Events: 20}
	t0 := time.UnixMilli(1_000_000)
	keep := func(s *EventLogStore, app string, p eventlog.Policy, data string, at time.Duration) *keepReq {
		return &keepReq{store: s, app: app, policy: p, now: t0.Add(at), entries: []eventlog.Entry{{Channel: "ch", Name: "e", Data: data}}}
	}
	keeps := []*keepReq{
		keep(s1, "x", p1, "1", 2*time.Millisecond), keep(s1, "x", p1, "2", time.Millisecond),
		keep(s1, "y", p1, "3", 0), keep(s2, "y", p1, "4", 0), keep(s2, "y", p2, "5", 0), keep(s2, "y", p2, "6", 0),
	}
	groups := keepCalls(keeps)
	want := []struct {
		app   string
		datas []string
	}{{"x", []string{"1", "2"}}, {"y", []string{"3"}}, {"y", []string{"4"}}, {"y", []string{"5", "6"}}}
	if len(groups) != len(want) {
		t.Fatalf("%d script calls, want %d", len(groups), len(want))
	}
	for i, g := range groups {
		// Each entry adds its stream to the keys and channel, name and
		// data to the arguments, after the call's own.
		var datas []string
		for j := 9; j < len(g.call.args); j += 3 {
			datas = append(datas, g.call.args[j].(string))
		}
		if g.reqs[0].app != want[i].app || !slices.Equal(datas, want[i].datas) || len(g.reqs) != len(want[i].datas) {
			t.Errorf("call %d: app %s, events %v of %d requests; want %s, %v", i, g.reqs[0].app, datas, len(g.reqs), want[i].app, want[i].datas)
		}
		if !strings.Contains(g.call.keys[0], "{"+want[i].app+"}") || g.call.keys[0] != g.reqs[0].store.key(g.reqs[0].app) {
			t.Errorf("call %d appends to %s", i, g.call.keys[0])
		}
	}
	if at := groups[0].call.args[0]; at != t0.Add(2*time.Millisecond).UnixMilli() {
		t.Errorf("the shared append is at %v, want the latest of its requests' times", at)
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
	store := n.c.EventLog(eventlog.Limits{})
	p := eventlog.Policy{Events: 10, TTL: time.Hour}
	sub := n.connect("app")
	sub.subscribe("news", nil)
	sub.wait("news", "pusher_internal:subscription_succeeded")
	publish := func(data string) error {
		t.Helper()
		kept, err := n.hub.PublishKept(store, p, time.Now(), hub.Message{AppID: "app", Channel: "news", Event: "tick", Data: data})
		if !kept {
			t.Fatalf("publish %s: not kept, the channel is on the history's Redis", data)
		}
		return err
	}
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
