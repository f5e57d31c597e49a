package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// history is what store keeps of app's channel, oldest first: the data
// of each event and its id.
func history(t *testing.T, store *EventLogStore, app, channel string, p eventlog.Policy) (datas, ids []string) {
	t.Helper()
	page, err := store.Read(t.Context(), app, channel, p, eventlog.Query{OldestFirst: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Events {
		datas, ids = append(datas, e.Data), append(ids, e.ID.String())
	}
	return datas, ids
}

// loopSender is a member the test does not start, whose publish loop's
// send it calls itself with publish calls it builds: the loop packs what
// waits together only when calls come at once.
type loopSender struct {
	t   *testing.T
	pub *member
	now time.Time
}

// newLoopSender makes one, on rs with the key prefix px.
func newLoopSender(t *testing.T, rs *testredis.Server, px string) *loopSender {
	c, err := New(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), hub.New(zap.NewNop()), Options{URL: rs.URL(), Prefix: px, NodeID: "publisher"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &loopSender{t: t, pub: c.(*member), now: time.Now()}
}

// call is a publish call of app keeping its events in store under p.
func (s *loopSender) call(store *EventLogStore, app string, p eventlog.Policy) *keepReq {
	return &keepReq{store: store, app: app, policy: p, now: s.now}
}

// msg is a tick of data on app's channel, kept by call k (nil: plain).
func (s *loopSender) msg(k *keepReq, app, channel, data string) *outMsg {
	m := outMsgs([]hub.Message{{AppID: app, Channel: channel, Event: "tick", Data: data}})[0]
	if k != nil {
		m.keep, m.entry = k, eventlog.Entry{Channel: channel, Name: "tick", Data: data}
	}
	return m
}

// send numbers msgs as the loop does and sends them in one script call.
func (s *loopSender) send(msgs ...*outMsg) {
	s.t.Helper()
	for _, m := range msgs {
		s.pub.seq[m.slot]++
		m.seq = s.pub.seq[m.slot]
	}
	if err := s.pub.send(msgs); err != nil {
		s.t.Fatal(err)
	}
}

// The publish loop sends the messages of many calls in one script call,
// those of one slot's stream numbered one after another and packed in
// entries together; the kept events are still appended to their own app's
// history under their own call's policy: a plain message before or between
// them is kept nowhere, another app's kept events only in that app's
// history, those of a call of the same app under another policy by that
// policy, and the subscriber of a kept event gets the id it has there.
func TestPublishKeptCallsSentTogetherKeepEachItsOwn(t *testing.T) {
	rs := testredis.Start(t)
	px := fmt.Sprintf("t%d:", time.Now().UnixNano())
	n := startNode(t, rs, px, "n1")
	s := newLoopSender(t, rs, px)

	// Channels of both apps in one slot.
	slot := slotOf("app", "plain")
	inSlot := func(app, name string) string {
		for i := 0; ; i++ {
			if ch := fmt.Sprint(name, i); slotOf(app, ch) == slot {
				return ch
			}
		}
	}
	plainCh, keptCh, smallCh, otherCh := inSlot("app", "plain"), inSlot("app", "kept"), inSlot("app", "small"), inSlot("other", "kept")
	store := n.c.EventLog(eventlog.Limits{})
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	otherP := eventlog.Policy{Events: 50, TTL: 2 * time.Hour}
	smallP := eventlog.Policy{Events: 1, TTL: time.Hour}
	plainSub := recoverable(n, plainCh, p, time.Minute, nil)
	keptSub := recoverable(n, keptCh, p, time.Minute, nil)

	call, msg := func(app string, p eventlog.Policy) *keepReq { return s.call(store, app, p) }, s.msg
	send := func(keeps []*keepReq, msgs ...*outMsg) {
		t.Helper()
		s.send(msgs...)
		for _, k := range keeps {
			if k.err != nil {
				t.Fatalf("the append of %s's call: %v", k.app, k.err)
			}
		}
	}
	k1, k2 := call("app", p), call("other", p)
	send([]*keepReq{k1, k2}, msg(nil, "app", plainCh, "p1"), msg(k1, "app", keptCh, "a1"), msg(nil, "app", plainCh, "p2"),
		msg(k2, "other", otherCh, "b1"), msg(k2, "other", otherCh, "b2"))
	k3, k4, k5 := call("app", p), call("other", otherP), call("app", smallP)
	send([]*keepReq{k3, k4, k5}, msg(k3, "app", keptCh, "a2"), msg(nil, "app", plainCh, "p3"),
		msg(k5, "app", smallCh, "s1"), msg(k5, "app", smallCh, "s2"), msg(k4, "other", otherCh, "b3"))

	keptDatas, keptIDs := history(t, store, "app", keptCh, p)
	if !slices.Equal(keptDatas, []string{"a1", "a2"}) {
		t.Errorf("app's history of %s: %v, want a1 a2", keptCh, keptDatas)
	}
	if got, _ := history(t, store, "app", plainCh, p); len(got) != 0 {
		t.Errorf("app's history of %s, published plain: %v, want none", plainCh, got)
	}
	if got, _ := history(t, store, "other", otherCh, otherP); !slices.Equal(got, []string{"b1", "b2", "b3"}) {
		t.Errorf("other's history of %s: %v, want b1 b2 b3", otherCh, got)
	}
	if got, _ := history(t, store, "app", smallCh, p); !slices.Equal(got, []string{"s2"}) {
		t.Errorf("app's history of %s, kept one event deep: %v, want s2", smallCh, got)
	}
	if got, _ := history(t, store, "app", otherCh, p); len(got) != 0 {
		t.Errorf("app's history of other's %s: %v, want none", otherCh, got)
	}
	wait.Until(t, "every tick delivered", func() bool { return len(plainSub.datas()) == 3 && len(keptSub.datas()) == 2 })
	if got := plainSub.positions(); len(got) != 0 {
		t.Errorf("plain ticks came with positions %v", got)
	}
	if got := keptSub.positions(); !slices.Equal(got, keptIDs) {
		t.Errorf("kept ticks came with positions %v, want their ids %v", got, keptIDs)
	}
}

// The kept messages of the publish calls of one app and policy that wait
// for one script call go in one history append; when that append fails,
// each of those calls is told (each logs that its events were not kept),
// not the first alone, and a call of another app whose append worked is
// not.
func TestAFailedAppendIsTheErrorOfEachCallItCarries(t *testing.T) {
	rs := testredis.Start(t)
	s := newLoopSender(t, rs, "failedappend:")
	store := s.pub.EventLog(eventlog.Limits{})
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	// The app's history record made a string: its append fails (WRONGTYPE).
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.Set(t.Context(), store.key("app"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	k1, k2, k3, other := s.call(store, "app", p), s.call(store, "app", p), s.call(store, "app", p), s.call(store, "other", p)
	s.send(s.msg(k1, "app", "news", "1"), s.msg(k2, "app", "news", "2"), s.msg(k2, "app", "feed", "3"),
		s.msg(k3, "app", "news", "4"), s.msg(other, "other", "news", "5"))
	for i, k := range []*keepReq{k1, k2, k3} {
		if k.err == nil || !strings.Contains(k.err.Error(), "WRONGTYPE") {
			t.Errorf("call %d of the failed append: error %v, want WRONGTYPE", i+1, k.err)
		}
	}
	if other.err != nil {
		t.Errorf("the other app's call, kept: error %v", other.err)
	}
}

// Only a publish call with history appends carries a token (which tells
// it sent again, and must not append twice): a call of plain messages,
// most of the cluster's, writes nothing to Redis but its entries.
func TestOnlyACallWithAppendsWritesAToken(t *testing.T) {
	rs := testredis.Start(t)
	s := newLoopSender(t, rs, "token:")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	token := func() string {
		t.Helper()
		v, err := rdb.Get(t.Context(), s.pub.key("ptok:", s.pub.epoch)).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return v
	}
	s.send(s.msg(nil, "app", "news", "1"), s.msg(nil, "app", "feed", "2"))
	if v := token(); v != "" {
		t.Fatalf("a call of plain messages wrote the token %q", v)
	}
	store := s.pub.EventLog(eventlog.Limits{})
	s.send(s.msg(s.call(store, "app", eventlog.Policy{Events: 100, TTL: time.Hour}), "app", "news", "3"))
	kept := token()
	if kept == "" {
		t.Fatal("a call with a history append wrote no token")
	}
	s.send(s.msg(nil, "app", "news", "4"))
	if v := token(); v != kept {
		t.Fatalf("a call of plain messages after it wrote the token %q (was %q)", v, kept)
	}
}

// A node that publishes its window again (Redis answers again after an
// outage: replayAnyway) appends nothing to the channel history: it holds
// each kept event once, with the id it had.
func TestReplayKeepsNothingTwice(t *testing.T) {
	n := startNode(t, testredis.Start(t), "replaykept:", "n1", func(o *Options) { o.ReplayWindow = time.Hour })
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	store := n.c.EventLog(eventlog.Limits{})
	publish := keptPublisher(t, n, store, p)
	sub := recoverable(n, "news", p, time.Minute, nil)
	for i := range 3 {
		publish("news", fmt.Sprint(i), "")
	}
	wait.Until(t, "the ticks delivered", func() bool { return len(sub.datas()) == 3 })
	datas, ids := history(t, store, "app", "news", p)
	if len(datas) != 3 {
		t.Fatalf("history %v before the replay, want 3 events", datas)
	}
	replayed := n.c.Stats().Replayed
	n.m().replayAnyway()
	wait.Until(t, "the window published again", func() bool { return n.c.Stats().Replayed == replayed+3 })
	if gotDatas, gotIDs := history(t, store, "app", "news", p); !slices.Equal(gotDatas, datas) || !slices.Equal(gotIDs, ids) {
		t.Fatalf("history after the replay %v %v, want %v %v", gotDatas, gotIDs, datas, ids)
	}
}

// The events of one trigger on a channel go out in one stream entry (a
// batch): a recoverable subscriber gets a position of its own for each,
// their ids in the history, in order, and a resume from the middle of the
// batch replays exactly the rest.
func TestClusterRecoveryWithinABatchedEntry(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	store := ns[1].c.EventLog(eventlog.Limits{})
	sub := recoverable(ns[0], "feed", p, time.Minute, nil)
	var ms []hub.Message
	for i := 1; i <= 4; i++ {
		ms = append(ms, hub.Message{AppID: "app", Channel: "feed", Event: "tick", Data: fmt.Sprint(i)})
	}
	if kept, err := ns[1].hub.PublishKept(store, p, time.Now(), ms...); err != nil || !kept {
		t.Fatalf("publish: kept %v, %v", kept, err)
	}
	wait.Until(t, "the batch delivered", func() bool { return len(sub.datas()) == 4 })
	_, ids := history(t, store, "app", "feed", p)
	// One entry of the channel's stream holds the four, with their ids.
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	entries, err := rdb.XRange(t.Context(), prefix(ns[1].c)+slotStreams[slotOf("app", "feed")], "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, e := range entries {
		if got, _ := entryOf(e.Values); got.positions != "" {
			kept = append(kept, got.positions)
		}
	}
	if want := strings.Join(ids, " "); len(kept) != 1 || kept[0] != want {
		t.Fatalf("entries with positions %q, want one with %q", kept, want)
	}
	if got := sub.positions(); !slices.Equal(got, ids) {
		t.Fatalf("positions %v, want the ids %v", got, ids)
	}
	sub.keepFirst(2)
	ns[0].hub.Remove(sub.conn)
	again := recoverable(ns[1], "feed", p, time.Minute, sub)
	if reason, replayed := again.outcome(); reason != "" || replayed != 2 {
		t.Fatalf("resume: %q, %d replayed; want recovered, 2", reason, replayed)
	}
	if got := again.datas(); !slices.Equal(got, []string{"3", "4"}) {
		t.Fatalf("the resume replayed %v, want 3 4", got)
	}
}

// A kept event of a cache channel goes out in an entry of its own (it is
// also the channel's last event, kept for new subscribers): another node's
// recoverable subscriber gets it with its id in the history, and a new
// subscriber gets it from the cache.
func TestAKeptCacheChannelEventCarriesItsPosition(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	store := ns[1].c.EventLog(eventlog.Limits{})
	const channel = "cache-feed"
	sub := recoverable(ns[0], channel, p, time.Minute, nil)
	m := hub.Message{AppID: "app", Channel: channel, Event: "tick", Data: "1", Cache: true}
	if kept, err := ns[1].hub.PublishKept(store, p, time.Now(), m); err != nil || !kept {
		t.Fatalf("publish: kept %v, %v", kept, err)
	}
	wait.Until(t, "the event delivered", func() bool { return len(sub.datas()) == 1 })
	_, ids := history(t, store, "app", channel, p)
	if len(ids) != 1 {
		t.Fatalf("the history holds %v, want the one event", ids)
	}
	if got := sub.positions(); !slices.Equal(got, ids) {
		t.Fatalf("positions %v, want the event's id %v", got, ids)
	}
	late := ns[0].connect("app")
	late.subscribe(channel, nil)
	late.wait(channel, "tick")
}
