package cluster

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// A trigger Redis took (answered 200) and then lost, with its data, before
// another node read it still reaches that node: its publisher publishes
// what it published lately again, and the nodes that had it already do not
// deliver it twice. On three shards, the Redis that loses them is the
// shard of the channel. (Not on a Redis Cluster: its clients follow the
// addresses the cluster gives, so a proxy cannot cut one node off; a
// shard there recovers as here, and TestChannelsSpreadOverShards has one
// of its Redis nodes lose its data.)
func TestMessagesRedisLostBeforeANodeReadThemAreDelivered(t *testing.T) {
	for name, shards := range map[string]int{"one Redis": 1, "3 shards": 3} {
		t.Run(name, func(t *testing.T) {
			servers, url := shardList(t, shards)
			k := shardOf("app", "news", shards)
			px := newCutProxy(t, servers[k].Addr())
			urlB := strings.Split(url, ",")
			urlB[k] = px.url()
			testMessagesRedisLost(t, servers[k], px, url, strings.Join(urlB, ","))
		})
	}
}

// testMessagesRedisLost runs the test above: rs is the Redis that loses
// the messages, px cuts b off from it, urlA and urlB are a's and b's
// HERALD_REDIS_URL.
func testMessagesRedisLost(t *testing.T, rs *testredis.Server, px *cutProxy, urlA, urlB string) {
	prefix := fmt.Sprintf("r%d:", time.Now().UnixNano())
	a := startNode(t, nil, prefix, "a", withURL(urlA))
	b := startNode(t, nil, prefix, "b", withURL(urlB))
	subA, subB, publish := newsOnTwoNodes(t, a, b)

	// Node b loses touch with Redis; a's publishes are taken and read by a
	// alone; then Redis restarts without them.
	px.cut()
	wait.Until(t, "b sees Redis down", func() bool { return !b.c.Stats().Up })
	publish("taken-1")
	publish("taken-2")
	subA.wait("news", "taken-2")
	rs.Restart()
	px.resume()

	wait.Until(t, "b is back", func() bool { return b.c.Stats().Up })
	subB.wait("news", "taken-2")
	newsEnds(t, publish, subA, subB, "taken-1", "taken-2")
	if n := a.c.Stats().Replayed; n < 2 {
		t.Errorf("replayed %d messages, want the two Redis lost at least", n)
	}
}

// The replay ring keeps what Redis took in its window, and no more than
// its bytes.
func TestReplayRingForgetsByAgeAndSize(t *testing.T) {
	r := replayRing{window: time.Second, max: 1000}
	t0 := time.Now()
	msg := func(seq uint64) *outMsg { return &outMsg{seq: seq, msg: string(make([]byte, 100))} }
	r.add([]*outMsg{msg(1), msg(2)}, t0)
	r.add([]*outMsg{msg(3)}, t0.Add(time.Second))
	if len(r.msgs) != 3 {
		t.Fatalf("kept %d of 3 within the window", len(r.msgs))
	}
	r.add([]*outMsg{msg(4)}, t0.Add(1500*time.Millisecond))
	if len(r.msgs) != 2 || r.msgs[0].seq != 3 {
		t.Fatalf("after the window: %d kept, first %d; want 3 and 4", len(r.msgs), r.msgs[0].seq)
	}
	for i := range uint64(10) {
		r.add([]*outMsg{msg(5 + i)}, t0.Add(1500*time.Millisecond))
	}
	if held := heldBytes(r.msgs); held > r.max || r.msgs[len(r.msgs)-1].seq != 14 {
		t.Fatalf("over the byte bound: %d bytes kept, last %d", held, r.msgs[len(r.msgs)-1].seq)
	}
	// A cache channel's message holds its app, channel and last event too,
	// and the bound counts them.
	r = replayRing{window: time.Second, max: 1000}
	for i := range uint64(5) {
		m := msg(i + 1)
		m.cache = &cacheUpdate{app: "app", channel: strings.Repeat("c", 290), value: strings.Repeat("v", 300)}
		r.add([]*outMsg{m}, t0)
	}
	if held := heldBytes(r.msgs); held > r.max || len(r.msgs) == 0 || r.msgs[len(r.msgs)-1].seq != 5 {
		t.Fatalf("cache channels' messages over the byte bound: %d messages, %d bytes kept", len(r.msgs), held)
	}
	// Messages that fill the bound to its last byte are all kept.
	size := (&outMsg{msg: strings.Repeat("m", 100)}).size()
	r = replayRing{window: time.Second, max: 3 * size}
	r.add([]*outMsg{{seq: 1, msg: strings.Repeat("m", 100)}, {seq: 2, msg: strings.Repeat("m", 100)}, {seq: 3, msg: strings.Repeat("m", 100)}}, t0)
	if len(r.msgs) != 3 {
		t.Fatalf("%d of 3 messages that fill the bound kept", len(r.msgs))
	}
	// A message larger than the bound is not kept at all.
	r.add([]*outMsg{{seq: 6, msg: strings.Repeat("m", 2000)}}, t0)
	if len(r.msgs) != 0 || r.bytes != 0 {
		t.Fatalf("a message over the bound: %d messages, %d bytes kept, want none", len(r.msgs), r.bytes)
	}
}

// heldBytes is what msgs hold: their messages and cache channels' events.
func heldBytes(msgs []*outMsg) int {
	n := 0
	for _, m := range msgs {
		n += len(m.msg)
		if m.cache != nil {
			n += len(m.cache.app) + len(m.cache.channel) + len(m.cache.value)
		}
	}
	return n
}

// A node delivers a message of an origin only once, whatever comes again.
func TestOriginsDeliverEachMessageOnce(t *testing.T) {
	var o origins
	now := time.Now()
	for _, c := range []struct {
		origin string
		seq    uint64
		fresh  bool
	}{{"p1", 1, true}, {"p1", 2, true}, {"p1", 2, false}, {"p1", 1, false}, {"p2", 1, true}, {"p1", 5, true}, {"p1", 4, false}} {
		if got := o.fresh(c.origin, c.seq, now); got != c.fresh {
			t.Fatalf("%s #%d: fresh %v, want %v", c.origin, c.seq, got, c.fresh)
		}
	}
	// Remembered while heard from within originIdle (ten minutes: a
	// replay comes within seconds), the limit included; forgotten after.
	// (A sweep looks at most once a minute.)
	for _, idle := range []time.Duration{time.Minute, originIdle} {
		o.sweep(now.Add(idle))
		if o.fresh("p1", 5, now) {
			t.Fatalf("an origin heard from %v ago is forgotten", idle)
		}
	}
	o.sweep(now.Add(originIdle + time.Minute))
	if !o.fresh("p1", 1, now) {
		t.Fatal("an origin idle past originIdle is still remembered")
	}
}

// cutProxy forwards TCP connections to a server until cut, which closes
// them and refuses new ones until resume: a node behind it loses touch with
// Redis while the others keep it.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: make(map[net.Conn]bool)}
	t.Cleanup(func() {
		ln.Close()
		p.cut()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *cutProxy) url() string { return "redis://" + p.ln.Addr().String() + "/0" }

func (p *cutProxy) serve(c net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.Dial("tcp", target)
	p.mu.Lock()
	// Cut, or moved to another target while dialling: refused, as the
	// connections open then were closed.
	if err != nil || p.down || p.target != target {
		p.mu.Unlock()
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	go func() { io.Copy(up, c); up.Close() }()
	io.Copy(c, up)
	c.Close()
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// failOver forwards new connections to target from now on and closes the
// ones open, but refuses none: a Redis behind one address that fails over
// to its replica while the address answers all along.
func (p *cutProxy) failOver(target string) {
	p.retarget(target)
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// retarget forwards new connections to target from now on; the ones open
// stay on the old one.
func (p *cutProxy) retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

func (p *cutProxy) resume() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// newsOnTwoNodes subscribes a client of each node to "news" and returns
// them with publish, which publishes an event there through a; the event
// "before" has reached b's client already.
func newsOnTwoNodes(t *testing.T, a, b *node) (subA, subB *client, publish func(event string)) {
	t.Helper()
	subA, subB = a.connect("app"), b.connect("app")
	for _, s := range []*client{subA, subB} {
		s.subscribe("news", nil)
		s.wait("news", "pusher_internal:subscription_succeeded")
	}
	publish = func(event string) {
		t.Helper()
		if err := a.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: event, Data: "{}"}); err != nil {
			t.Fatalf("publish %s: %v", event, err)
		}
	}
	publish("before")
	subB.wait("news", "before")
	return subA, subB, publish
}

// newsEnds publishes "after" through publish and checks that the clients
// of newsOnTwoNodes each got "before", then taken, then "after", each once.
func newsEnds(t *testing.T, publish func(event string), subA, subB *client, taken ...string) {
	t.Helper()
	publish("after")
	want := append(append([]string{"pusher_internal:subscription_succeeded", "before"}, taken...), "after")
	for name, s := range map[string]*client{"a": subA, "b": subB} {
		s.wait("news", "after")
		if got := s.events("news"); !slices.Equal(got, want) {
			t.Errorf("subscriber on %s got %v, want %v", name, got, want)
		}
	}
}

// Redis losing its data without going away (FLUSHALL, a replica without the
// data promoted between two heartbeats) is noticed by the heartbeat, which
// finds the cluster's generation gone: the nodes rebuild their state.
func TestStateLostWithoutAnOutageIsRebuilt(t *testing.T) {
	rs := testredis.Start(t)
	ns, _, _ := memberAndSubscriber(t, rs)
	resyncs := ns[0].c.Stats().Resyncs
	wait.Until(t, "each node counts two live nodes", func() bool { return ns[0].c.Stats().Nodes == 2 && ns[1].c.Stats().Nodes == 2 })

	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "node 1 rebuilds its record", func() bool { return ns[0].c.Stats().Resyncs > resyncs })
	wait.Until(t, "the state is rebuilt", func() bool {
		st, err := ns[0].hub.State().Channel("app", "news")
		users, _ := ns[1].hub.State().PresenceUsers("app", "presence-room")
		return err == nil && st.Subscriptions == 1 && slices.Equal(users, []string{"a"})
	})
}

// A node that finds Redis lost its data rebuilds its record in one pass
// and logs it as such: the subscriptions it put back, none in Redis
// before, and that Redis lost its data.
func TestARebuildAfterRedisLostItsDataIsLoggedAsSuch(t *testing.T) {
	rs := testredis.Start(t)
	core, logs := observer.New(zapcore.InfoLevel)
	n := startLoggedNode(t, rs, "rebuilt:", "n1", zap.New(core))
	cl := n.connect("app")
	cl.subscribe("news", nil)
	cl.wait("news", "pusher_internal:subscription_succeeded")
	const rebuilt = "the node's record in Redis is rebuilt"
	wait.Until(t, "the node's record built", func() bool { return logs.FilterMessage(rebuilt).Len() == 1 })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	// The first rebuild logged after the loss is the one.
	wait.Until(t, "the record rebuilt", func() bool { return logs.FilterMessage(rebuilt).Len() >= 2 })
	got := logs.FilterMessage(rebuilt).All()[1].ContextMap()
	want := map[string]any{"subscriptions": int64(1), "sign_ins": int64(0), "in_redis_before": int64(0), "redis_lost_its_data": true}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("the rebuild after the loss logged %s=%v, want %v", k, got[k], v)
		}
	}
}

// A node that finds Redis lost its data publishes what it published lately
// again by itself, before anything new is published, and logs that Redis
// lost its data, not that publishing failed.
func TestAReplayLogsThatRedisLostItsData(t *testing.T) {
	rs := testredis.Start(t)
	core, logs := observer.New(zapcore.InfoLevel)
	n := startLoggedNode(t, rs, "replay:", "n1", zap.New(core), func(o *Options) { o.ReplayWindow = time.Minute })
	// Its record is built: the generation it knows is the one Redis loses.
	wait.Until(t, "the node's record built", func() bool { return n.c.Stats().Resyncs == 1 })
	if err := n.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "tick", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the tick published again", func() bool { return n.c.Stats().Replayed == 1 })
	// Logged as what happened: Redis lost its data (not an outage).
	if got := logs.FilterMessageSnippet("publishing again what this node published").All(); len(got) != 1 || !strings.HasPrefix(got[0].Message, "Redis lost its data") || got[0].Level != zapcore.WarnLevel {
		t.Errorf("logs of the replay: %v, want one warning that Redis lost its data", got)
	}
	if failed := logs.FilterMessageSnippet("failed").All(); len(failed) > 0 {
		t.Errorf("a replay that worked logged %q %v", failed[0].Message, failed[0].ContextMap())
	}
}

// A publish that finds Redis lost its data before the node noticed (its
// heartbeat has not come yet) still goes through: the node publishes what
// it published lately again, under Redis's new generation, then this one.
func TestAPublishRightAfterDataLossGoesThrough(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "lost:", "n1", func(o *Options) {
		o.Heartbeat, o.NodeTTL, o.ReplayWindow = time.Hour, 2*time.Hour, time.Hour
	})
	wait.Until(t, "the node is up", func() bool { return n.c.Stats().Up })
	publish := func(event string) error {
		return n.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: event, Data: "{}"})
	}
	if err := publish("before"); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := publish("after"); err != nil {
		t.Fatalf("a publish right after Redis lost its data: %v", err)
	}
	entries, err := rdb.XRange(t.Context(), "lost:"+slotStreams[slotOf("app", "news")], "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, e := range entries {
		got, _ := entryOf(e.Values)
		m := got.msg
		f, err := fields(m[1:])
		if err != nil {
			t.Fatal(err)
		}
		ev, err := decodeEvent(f)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev.Event)
	}
	if !slices.Equal(events, []string{"before", "after"}) || n.c.Stats().Replayed != 1 {
		t.Fatalf("the channel's stream holds %v (%d replayed), want before again, then after", events, n.c.Stats().Replayed)
	}
}

// When Redis answers again after an outage, a node publishes what it
// published in the window again (the Redis that answers may be a promoted
// replica without the last writes) and says so; a node that keeps nothing
// to publish again says nothing.
func TestAfterAnOutageANodeSaysWhatItPublishesAgain(t *testing.T) {
	rs := testredis.Start(t)
	logged := func(id string, replayBytes int) (*node, *observer.ObservedLogs) {
		core, logs := observer.New(zapcore.InfoLevel)
		n := startLoggedNode(t, rs, "outage:", id, zap.New(core), func(o *Options) { o.ReplayWindow, o.ReplayBytes = time.Hour, replayBytes })
		wait.Until(t, id+" up", func() bool { return n.c.Stats().Up })
		if err := n.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "tick", Data: "{}"}); err != nil {
			t.Fatal(err)
		}
		return n, logs
	}
	a, aLogs := logged("a", 0)
	b, bLogs := logged("b", 1) // every message is over its bound: it keeps none
	// Every command refused but those that set the rules back.
	setACL(t, rs, "-@all", "+@connection", "+acl")
	wait.Until(t, "both nodes see Redis down", func() bool { return !a.c.Stats().Up && !b.c.Stats().Up })
	setACL(t, rs, "+@all")
	wait.Until(t, "both nodes done publishing again", func() bool {
		return a.c.Stats().Up && b.c.Stats().Up && !a.m().forceReplay.Load() && !b.m().forceReplay.Load()
	})
	const again = "Redis answers again: publishing again"
	if got := aLogs.FilterMessageSnippet(again).All(); len(got) != 1 || got[0].ContextMap()["messages"] != int64(1) || a.c.Stats().Replayed != 1 {
		t.Errorf("node a logged %v and published %d again, want that it publishes its 1 message again", got, a.c.Stats().Replayed)
	}
	if got := bLogs.FilterMessageSnippet(again).Len(); got != 0 || b.c.Stats().Replayed != 0 {
		t.Errorf("node b, which keeps nothing, logged %d times that it publishes again", got)
	}
}

// A cache channel's event published again after Redis lost its data (the
// node's replay) comes with its origin like any other: a node that
// delivered it already does not deliver it twice.
func TestAReplayedCacheChannelEventIsDeliveredOnce(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2, func(o *Options) { o.ReplayWindow = time.Minute })
	a, b := ns[0], ns[1]
	const channel = "cache-news"
	sub := b.connect("app")
	sub.subscribe(channel, nil)
	sub.wait(channel, "pusher_internal:subscription_succeeded")
	publish := func(event string) {
		t.Helper()
		if err := a.hub.Publish(hub.Message{AppID: "app", Channel: channel, Event: event, Data: "{}", Cache: true}); err != nil {
			t.Fatalf("publish %s: %v", event, err)
		}
	}
	publish("tick")
	sub.wait(channel, "tick")
	replayed := a.c.Stats().Replayed
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the tick published again", func() bool { return a.c.Stats().Replayed > replayed })
	publish("after")
	sub.wait(channel, "after")
	var ticks int
	for _, e := range sub.events(channel) {
		if e == "tick" {
			ticks++
		}
	}
	if ticks != 1 {
		t.Fatalf("the subscriber got the tick %d times: %v", ticks, sub.events(channel))
	}
}
