package cluster

import (
	"encoding/json"
	"errors"
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

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// node is one member of a test cluster: a hub, its cluster membership and
// the channel events its observer saw.
type node struct {
	t   *testing.T
	hub *hub.Hub
	c   Cluster
	obs *recorder
}

// m is the node's member on one Redis (the test's cluster is on one).
func (n *node) m() *member { return n.c.(*member) }

// members are a cluster's members: a router's, or the member itself.
func members(c Cluster) []*member {
	if r, ok := c.(*router); ok {
		return r.members
	}
	return []*member{c.(*member)}
}

// url is the HERALD_REDIS_URL a cluster was made with.
func url(c Cluster) string {
	if r, ok := c.(*router); ok {
		return r.opts.URL
	}
	return c.(*member).opts.URL
}

// prefix is the start of a cluster's keys (without a shard's hash tag).
func prefix(c Cluster) string {
	if r, ok := c.(*router); ok {
		return r.p
	}
	return c.(*member).p
}

// recorder keeps the channel events an observer saw.
type recorder struct {
	mu  sync.Mutex
	evs []hub.Event
}

func (r *recorder) Observe(ev hub.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

// kinds returns the events seen of the given kinds on channel, as
// "kind:user" strings.
func (r *recorder) kinds(channel string, kinds ...hub.EventKind) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.evs {
		if ev.Channel == channel && slices.Contains(kinds, ev.Kind) {
			out = append(out, string(ev.Kind)+":"+ev.UserID)
		}
	}
	return out
}

var testSettings = func(appID string) AppSettings {
	return AppSettings{SubscriptionCount: appID == "counted", MaxPresenceMembers: 3}
}

// startNode starts a node of the cluster named by prefix on rs (or at
// the URL tune sets), with a short webhook hold unless tune changes the
// options.
func startNode(t *testing.T, rs *testredis.Server, prefix, id string, tune ...func(*Options)) *node {
	t.Helper()
	return startLoggedNode(t, rs, prefix, id, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(id), tune...)
}

// startLoggedNode is startNode with the node's Cluster logging to log, for
// tests that look at what it logs.
func startLoggedNode(t *testing.T, rs *testredis.Server, prefix, id string, log *zap.Logger, tune ...func(*Options)) *node {
	t.Helper()
	h := hub.New(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(id))
	obs := &recorder{}
	h.SetObserver(obs)
	opts := Options{
		// A heartbeat lasts 20 beats: a live node stalled by the race
		// detector on a busy machine is not taken for dead.
		NodeID: id, Prefix: prefix, Heartbeat: 100 * time.Millisecond, NodeTTL: 2 * time.Second,
		Hold: 300 * time.Millisecond, Settings: testSettings,
	}
	if rs != nil {
		opts.URL = rs.URL()
	}
	for _, f := range tune {
		f(&opts)
	}
	c, err := New(log, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	n := &node{t: t, hub: h, c: c, obs: obs}
	t.Cleanup(func() {
		if n.c != nil {
			n.c.Close()
		}
		h.Close()
	})
	return n
}

// crash stops the node as SIGKILL would: no goodbye, its record stays in
// Redis until another node finds its heartbeat expired.
func (n *node) crash() {
	for _, m := range members(n.c) {
		m.cancel()
		m.wg.Wait()
		if !m.sharedRDB {
			m.rdb.Close()
		}
	}
	if r, ok := n.c.(*router); ok && r.shared != nil {
		r.shared.Close()
	}
	n.c = nil
}

// client is a connection on a node, with every frame it received.
type client struct {
	n      *node
	conn   *hub.Conn
	mu     sync.Mutex
	frames []frame
}

type frame struct {
	Event   string `json:"event"`
	Channel string `json:"channel"`
	Data    string `json:"data"`
	UserID  string `json:"user_id"`
}

func (n *node) connect(appID string) *client {
	n.t.Helper()
	c, err := n.hub.Connect(appID, hub.ConnectOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return &client{n: n, conn: c}
}

// take moves the frames queued for the connection to cl.frames.
func (cl *client) take() {
	raw, _ := cl.conn.Take(nil)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, b := range raw {
		var f frame
		if err := json.Unmarshal(b, &f); err != nil {
			cl.n.t.Fatalf("frame %q: %v", b, err)
		}
		cl.frames = append(cl.frames, f)
	}
}

// events returns the names of the events received on channel (all
// channels when empty), in order.
func (cl *client) events(channel string) []string {
	cl.take()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []string
	for _, f := range cl.frames {
		if channel == "" || f.Channel == channel {
			out = append(out, f.Event)
		}
	}
	return out
}

// frame returns the first frame of event on channel, waiting for it.
func (cl *client) wait(channel, event string) frame {
	cl.n.t.Helper()
	var got frame
	wait.Until(cl.n.t, cl.conn.SocketID()+" gets "+event+" on "+channel, func() bool {
		cl.take()
		cl.mu.Lock()
		defer cl.mu.Unlock()
		for _, f := range cl.frames {
			if f.Channel == channel && f.Event == event {
				got = f
				return true
			}
		}
		return false
	})
	return got
}

func (cl *client) count(channel, event string) int {
	n := 0
	for _, e := range cl.events(channel) {
		if e == event {
			n++
		}
	}
	return n
}

func (cl *client) subscribe(channel string, m *hub.Member) {
	cl.n.t.Helper()
	if err := cl.n.hub.Subscribe(cl.conn, channel, hub.SubscribeOptions{Member: m, MaxMembers: 3, FullRefusal: []byte(`{"event":"pusher:subscription_error","channel":"` + channel + `","data":"full"}`)}); err != nil {
		cl.n.t.Fatal(err)
	}
}

// cluster starts n nodes of a fresh cluster on one Redis.
func cluster(t *testing.T, rs *testredis.Server, n int, tune ...func(*Options)) []*node {
	t.Helper()
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	nodes := make([]*node, n)
	for i := range nodes {
		nodes[i] = startNode(t, rs, prefix, fmt.Sprintf("n%d", i+1), tune...)
	}
	return nodes
}

func TestEventsReachEverySubscriberOnEveryNodeOnce(t *testing.T) {
	onEachTopology(t, testEventsReachEverySubscriberOnEveryNodeOnce)
}

func testEventsReachEverySubscriberOnEveryNodeOnce(t *testing.T, cluster startCluster) {
	ns := cluster(3)
	var clients []*client
	for _, n := range ns {
		cl := n.connect("app")
		cl.subscribe("news", nil)
		cl.wait("news", "pusher_internal:subscription_succeeded")
		clients = append(clients, cl)
	}
	// Nothing to publish is no error, and publishes nothing.
	if err := ns[0].c.Publish(); err != nil {
		t.Fatalf("publishing nothing: %v", err)
	}
	// From every node, in order, one excluding a socket on another node.
	for i := range 5 {
		m := hub.Message{AppID: "app", Channel: "news", Event: fmt.Sprintf("e%d", i), Data: "{}"}
		if i == 4 {
			m.ExcludeSocketID = clients[2].conn.SocketID()
		}
		if err := ns[i%3].hub.Publish(m); err != nil {
			t.Fatal(err)
		}
	}
	for i, cl := range clients {
		last := "e4"
		if i == 2 {
			last = "e3"
		}
		cl.wait("news", last)
	}
	for _, n := range ns {
		n.hub.Flush()
	}
	for i, cl := range clients {
		want := []string{"pusher_internal:subscription_succeeded", "e0", "e1", "e2", "e3", "e4"}
		if i == 2 {
			want = want[:5]
		}
		if got := cl.events("news"); !slices.Equal(got, want) {
			t.Errorf("client on node %d got %v, want %v", i+1, got, want)
		}
	}
}

func TestPublishesPackedTogetherArriveInOrder(t *testing.T) {
	onEachTopology(t, testPublishesPackedTogetherArriveInOrder)
}

func testPublishesPackedTogetherArriveInOrder(t *testing.T, cluster startCluster) {
	ns := cluster(2)
	const publishers, batches, perBatch = 6, 20, 10
	sub := ns[1].connect("app")
	for _, ch := range []string{"c0", "c1", "cache-c"} {
		sub.subscribe(ch, nil)
		sub.wait(ch, "pusher_internal:subscription_succeeded")
	}
	entries0 := slotEntries(t, ns[0].c)
	// Batches from several publishers at once, a cache channel's message
	// (a script of its own) in the middle of each.
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for b := range batches {
				ms := make([]hub.Message, perBatch)
				for i := range ms {
					ms[i] = hub.Message{AppID: "app", Channel: fmt.Sprint("c", p%2), Event: fmt.Sprintf("p%d-%d", p, b*perBatch+i), Data: "{}"}
				}
				ms[perBatch/2].Channel, ms[perBatch/2].Cache = "cache-c", true
				if err := ns[0].hub.Publish(ms...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	total := publishers * batches * perBatch
	published := func() []frame {
		sub.take()
		sub.mu.Lock()
		defer sub.mu.Unlock()
		var out []frame
		for _, f := range sub.frames {
			if !strings.HasPrefix(f.Event, "pusher") {
				out = append(out, f)
			}
		}
		return out
	}
	wait.Until(t, "every message", func() bool { return len(published()) == total })
	// Each publisher's messages on each channel in its order, each once.
	last := make(map[string]int)
	for _, f := range published() {
		var p, i int
		if _, err := fmt.Sscanf(f.Event, "p%d-%d", &p, &i); err != nil {
			t.Fatalf("event %q", f.Event)
		}
		k := fmt.Sprint(p, f.Channel)
		if prev, ok := last[k]; ok && i <= prev {
			t.Fatalf("publisher %d's message %d on %s arrived after its message %d", p, i, f.Channel, prev)
		}
		last[k] = i
	}
	// At most three entries a batch over the slots' streams: before the
	// cache message, itself, after it — fewer when batches of several
	// publishers went together.
	if n := slotEntries(t, ns[0].c) - entries0; n > int64(3*publishers*batches) || n == 0 {
		t.Fatalf("%d messages took %d stream entries", total, n)
	}
}

// Publishes that wait for the publish loop go to Redis together: one
// call, and one stream entry for the messages of a slot.
func TestPublishesThatWaitTogetherShareOneEntry(t *testing.T) {
	rs := testredis.Start(t)
	h := hub.New(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	defer h.Close()
	cl, err := New(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), h, Options{URL: rs.URL(), NodeID: "n1", Prefix: "together:", Settings: testSettings})
	if err != nil {
		t.Fatal(err)
	}
	c := cl.(*member)
	defer c.Close()
	// Eight publishes wait before the loop runs, as they would behind a
	// call on its way to Redis.
	const waiting = 8
	reqs := make([]*pubReq, waiting)
	for i := range reqs {
		m := hub.Message{AppID: "app", Channel: "news", Event: fmt.Sprint("e", i), Data: "{}"}
		reqs[i] = &pubReq{msgs: outMsgs([]hub.Message{m}), done: make(chan error, 1)}
		c.pub <- reqs[i]
	}
	c.Start()
	for i, r := range reqs {
		if err := <-r.done; err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if n := slotEntries(t, c); n != 1 {
		t.Fatalf("%d waiting publishes of one channel took %d stream entries, want 1", waiting, n)
	}
}

func TestPresenceIsExactAcrossNodes(t *testing.T) {
	onEachTopology(t, testPresenceIsExactAcrossNodes)
}

func testPresenceIsExactAcrossNodes(t *testing.T, cluster startCluster) {
	ns := cluster(2)
	watcher := ns[0].connect("app")
	watcher.subscribe("presence-room", &hub.Member{UserID: "w", Info: json.RawMessage(`{"n":"W"}`)})
	watcher.wait("presence-room", "pusher_internal:subscription_succeeded")

	// One user on two nodes is one member.
	u1 := ns[0].connect("app")
	u1.subscribe("presence-room", &hub.Member{UserID: "u", Info: json.RawMessage(`{"n":"U"}`)})
	u2 := ns[1].connect("app")
	u2.subscribe("presence-room", &hub.Member{UserID: "u", Info: json.RawMessage(`{"n":"U"}`)})
	ok := u2.wait("presence-room", "pusher_internal:subscription_succeeded")
	var set struct {
		Presence struct {
			IDs   []string                   `json:"ids"`
			Hash  map[string]json.RawMessage `json:"hash"`
			Count int                        `json:"count"`
		} `json:"presence"`
	}
	if err := json.Unmarshal([]byte(ok.Data), &set); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(set.Presence.IDs, []string{"u", "w"}) || set.Presence.Count != 2 || string(set.Presence.Hash["w"]) != `{"n":"W"}` {
		t.Fatalf("the second node's member list is %s", ok.Data)
	}
	watcher.wait("presence-room", "pusher_internal:member_added")
	for _, n := range ns {
		users, err := n.hub.State().PresenceUsers("app", "presence-room")
		if err != nil || !slices.Equal(users, []string{"u", "w"}) {
			t.Fatalf("users from %s: %v %v", n.c.ID(), users, err)
		}
	}
	// Each node's metrics count the members of its own connections:
	// w and u on the first, u on the second.
	for i, want := range []int{2, 1} {
		if st := ns[i].hub.AppStats(); len(st) != 1 || st[0].PresenceMembers != want {
			t.Fatalf("node %d's app stats %+v, want %d presence members", i+1, st, want)
		}
	}
	// The first connection leaving is no member_removed; the last is.
	ns[0].hub.Remove(u1.conn)
	marker := ns[1].connect("app")
	marker.subscribe("presence-room", &hub.Member{UserID: "m"})
	// m's member_added is after u1's leave was applied.
	wait.Until(t, "m is a member", func() bool { return watcher.count("presence-room", "pusher_internal:member_added") == 2 })
	ns[1].hub.Remove(u2.conn)
	watcher.wait("presence-room", "pusher_internal:member_removed")
	ns[1].hub.Flush()
	if n := watcher.count("presence-room", "pusher_internal:member_removed"); n != 1 {
		t.Fatalf("watcher got %d member_removed, want 1", n)
	}
	// Each webhook event once over both nodes (member_removed after the
	// hold).
	var all []string
	wait.Until(t, "the member_removed webhook", func() bool {
		all = nil
		for _, n := range ns {
			all = append(all, n.obs.kinds("presence-room", hub.MemberAdded, hub.MemberRemoved, hub.ChannelOccupied)...)
		}
		return slices.Contains(all, "member_removed:u")
	})
	slices.Sort(all)
	want := []string{"channel_occupied:", "member_added:m", "member_added:u", "member_added:w", "member_removed:u"}
	if !slices.Equal(all, want) {
		t.Fatalf("webhook events %v, want %v", all, want)
	}
}

func TestPresenceLimitHoldsOverTheCluster(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	for i := range 3 {
		cl := ns[i%2].connect("app")
		cl.subscribe("presence-full", &hub.Member{UserID: fmt.Sprint("u", i)})
		cl.wait("presence-full", "pusher_internal:subscription_succeeded")
	}
	late := ns[1].connect("app")
	late.subscribe("presence-full", &hub.Member{UserID: "u9"})
	late.wait("presence-full", "pusher:subscription_error")
	if _, ok := late.conn.Subscription("presence-full"); ok || late.conn.SubscriptionCount() != 0 {
		t.Fatal("a refused subscription is still recorded")
	}
	// A user already in counts once more connection, not one more member.
	again := ns[1].connect("app")
	again.subscribe("presence-full", &hub.Member{UserID: "u0"})
	again.wait("presence-full", "pusher_internal:subscription_succeeded")
}

func TestOccupiedAndVacatedOncePerCluster(t *testing.T) {
	onEachTopology(t, testOccupiedAndVacatedOncePerCluster)
}

func testOccupiedAndVacatedOncePerCluster(t *testing.T, cluster startCluster) {
	ns := cluster(3)
	var clients []*client
	for _, n := range ns {
		cl := n.connect("app")
		cl.subscribe("busy", nil)
		cl.wait("busy", "pusher_internal:subscription_succeeded")
		clients = append(clients, cl)
	}
	st, err := ns[1].hub.State().Channel("app", "busy")
	if err != nil || st.Subscriptions != 3 || !st.Occupied {
		t.Fatalf("channel state %+v %v", st, err)
	}
	for i, cl := range clients {
		ns[i].hub.Remove(cl.conn)
	}
	wait.Until(t, "the channel is vacated", func() bool {
		n := 0
		for _, nd := range ns {
			n += len(nd.obs.kinds("busy", hub.ChannelVacated))
		}
		return n == 1
	})
	var occupied, vacated int
	for _, nd := range ns {
		occupied += len(nd.obs.kinds("busy", hub.ChannelOccupied))
		vacated += len(nd.obs.kinds("busy", hub.ChannelVacated))
	}
	if occupied != 1 || vacated != 1 {
		t.Fatalf("occupied %d times, vacated %d times; want once each", occupied, vacated)
	}
	list, err := ns[0].hub.State().Channels("app", "")
	if err != nil || len(list) != 0 {
		t.Fatalf("channels after everyone left: %+v %v", list, err)
	}
}

func TestComingBackOnAnotherNodeWithinTheHoldIsReportedAsNeither(t *testing.T) {
	rs := testredis.Start(t)
	// The default hold: the coming back must surely fall within it.
	ns := cluster(t, rs, 2, func(o *Options) { o.Hold = DefaultHold })
	watcher := ns[1].connect("app")
	watcher.subscribe("presence-room", &hub.Member{UserID: "w"})
	watcher.wait("presence-room", "pusher_internal:subscription_succeeded")
	first := ns[0].connect("app")
	first.subscribe("presence-room", &hub.Member{UserID: "alice"})
	first.subscribe("lobby", nil)
	first.wait("lobby", "pusher_internal:subscription_succeeded")
	watcher.wait("presence-room", "pusher_internal:member_added")

	// alice reconnects, landing on the other node.
	ns[0].hub.Remove(first.conn)
	watcher.wait("presence-room", "pusher_internal:member_removed") // the clients see her go at once
	again := ns[1].connect("app")
	again.subscribe("presence-room", &hub.Member{UserID: "alice"})
	again.subscribe("lobby", nil)
	again.wait("lobby", "pusher_internal:subscription_succeeded")
	if held, err := ns[0].m().rdb.ZRange(t.Context(), ns[0].m().key("held"), 0, -1).Result(); err != nil || len(held) != 0 {
		t.Fatalf("held webhooks after alice came back: %q %v", held, err)
	}
	// A channel left for good is reported after the hold: once it is,
	// anything else due before it would have been too.
	marker := ns[0].connect("app")
	marker.subscribe("marker", nil)
	marker.wait("marker", "pusher_internal:subscription_succeeded")
	ns[0].hub.Remove(marker.conn)
	wait.Until(t, "the marker's vacated webhook", func() bool {
		return len(ns[0].obs.kinds("marker", hub.ChannelVacated))+len(ns[1].obs.kinds("marker", hub.ChannelVacated)) == 1
	})
	var all []string
	for _, n := range ns {
		all = append(all, n.obs.kinds("presence-room", hub.MemberAdded, hub.MemberRemoved)...)
		all = append(all, n.obs.kinds("lobby", hub.ChannelOccupied, hub.ChannelVacated)...)
	}
	slices.Sort(all)
	if want := []string{"channel_occupied:", "member_added:alice", "member_added:w"}; !slices.Equal(all, want) {
		t.Fatalf("webhook events %v, want %v", all, want)
	}
}

func TestSubscriptionCountOverTheCluster(t *testing.T) {
	onEachTopology(t, testSubscriptionCountOverTheCluster)
}

func testSubscriptionCountOverTheCluster(t *testing.T, cluster startCluster) {
	ns := cluster(2)
	// What each client heard on room: events, with the counts' data.
	heard := func(cl *client) string {
		cl.take()
		cl.mu.Lock()
		defer cl.mu.Unlock()
		var out []string
		for _, f := range cl.frames {
			if f.Event == "pusher_internal:subscription_count" {
				out = append(out, f.Data)
			} else {
				out = append(out, f.Event)
			}
		}
		return strings.Join(out, " ")
	}
	a := ns[0].connect("counted")
	a.subscribe("room", nil)
	// A subscriber gets the count of its own subscription too, after
	// subscription_succeeded, as on one node.
	want := `pusher_internal:subscription_succeeded {"subscription_count":1}`
	wait.Until(t, "a hears the count of 1", func() bool { return heard(a) == want })
	b := ns[1].connect("counted")
	b.subscribe("room", nil)
	want += ` {"subscription_count":2}`
	wait.Until(t, "a hears the count of 2", func() bool { return heard(a) == want })
	wait.Until(t, "b hears the count of 2", func() bool {
		return heard(b) == `pusher_internal:subscription_succeeded {"subscription_count":2}`
	})
	var counts int
	for _, nd := range ns {
		counts += len(nd.obs.kinds("room", hub.SubscriptionCount))
	}
	if counts != 2 {
		t.Fatalf("%d subscription_count webhook events, want 2 (one per change)", counts)
	}
	// b's node dies: the node that takes its record out reports the count
	// without b's subscription, to a and to the webhook.
	before := len(ns[0].obs.kinds("room", hub.SubscriptionCount))
	ns[1].crash()
	want += ` {"subscription_count":1}`
	wait.Until(t, "a hears the count of 1", func() bool { return heard(a) == want })
	wait.Until(t, "the reaper's subscription_count webhook", func() bool {
		return len(ns[0].obs.kinds("room", hub.SubscriptionCount)) == before+1
	})
}

func TestCacheChannelOverTheCluster(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	miss := ns[1].connect("app")
	miss.subscribe("cache-prices", nil)
	miss.wait("cache-prices", "pusher:cache_miss")
	if got := ns[1].obs.kinds("cache-prices", hub.CacheMiss); len(got) != 1 {
		t.Fatalf("cache_miss webhook events %v", got)
	}
	if err := ns[0].hub.Publish(hub.Message{AppID: "app", Channel: "cache-prices", Event: "price", Data: "42", Cache: true}); err != nil {
		t.Fatal(err)
	}
	miss.wait("cache-prices", "price")
	late := ns[1].connect("app")
	late.subscribe("cache-prices", nil)
	if f := late.wait("cache-prices", "price"); f.Data != "42" {
		t.Fatalf("cached event data %q", f.Data)
	}
	// Kept 30 minutes (the README's figure), by its PTTL in Redis: a
	// minute's slack for a busy machine, none for a wrong unit.
	data, ttl, ok, err := ns[0].hub.State().CachedEvent("app", "cache-prices")
	if err != nil || !ok || data != "42" || ttl <= 29*time.Minute || ttl > 30*time.Minute {
		t.Fatalf("CachedEvent = %q %v %v %v, want 42 kept for up to 30 minutes", data, ttl, ok, err)
	}
}

func TestUsersAcrossNodes(t *testing.T) {
	onEachTopology(t, testUsersAcrossNodes)
}

func testUsersAcrossNodes(t *testing.T, cluster startCluster) {
	ns := cluster(2)
	watcher := ns[0].connect("app")
	if err := ns[0].hub.SignIn(watcher.conn, "w", []string{"u", "v"}, hub.EventFrame("pusher:signin_success", "", "{}", "")); err != nil {
		t.Fatal(err)
	}
	watcher.wait("", "pusher:signin_success")
	f := watcher.wait("", "pusher_internal:watchlist_events")
	if !strings.Contains(f.Data, `"offline","user_ids":["u","v"]`) {
		t.Fatalf("initial watchlist state %s", f.Data)
	}
	// u signs in twice on the other node: online once.
	u1, u2 := ns[1].connect("app"), ns[1].connect("app")
	ns[1].hub.SignIn(u1.conn, "u", nil)
	ns[1].hub.SignIn(u2.conn, "u", nil)
	wait.Until(t, "u is online for the watcher", func() bool {
		return strings.Contains(strings.Join(watcher.datas("pusher_internal:watchlist_events"), " "), `"online","user_ids":["u"]`)
	})
	// Terminate from the watcher's node closes both of u's connections.
	if err := ns[0].hub.Terminate("app", "u"); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "u's connections are closed with 4009", func() bool {
		return u1.conn.CloseCode() == hub.CloseTerminated.Code && u2.conn.CloseCode() == hub.CloseTerminated.Code
	})
	ns[1].hub.Remove(u1.conn)
	ns[1].hub.Remove(u2.conn)
	wait.Until(t, "u is offline for the watcher", func() bool {
		return strings.Contains(strings.Join(watcher.datas("pusher_internal:watchlist_events"), " "), `"offline","user_ids":["u"]`)
	})
	if n := len(watcher.datas("pusher_internal:watchlist_events")); n != 3 {
		t.Fatalf("watcher got %d watchlist events, want 3 (initial, online, offline)", n)
	}
}

func (cl *client) datas(event string) []string {
	cl.take()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []string
	for _, f := range cl.frames {
		if f.Event == event {
			out = append(out, f.Data)
		}
	}
	return out
}

func TestConnectionQuotaOverTheCluster(t *testing.T) {
	onEachTopology(t, testConnectionQuotaOverTheCluster)
}

func testConnectionQuotaOverTheCluster(t *testing.T, cluster startCluster) {
	ns := cluster(2)
	var first []*hub.Conn
	for range 2 {
		c, err := ns[0].hub.Connect("app", hub.ConnectOptions{MaxConns: 3})
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, c)
	}
	wait.Until(t, "the other node counts them", func() bool { return ns[1].c.ConnectionsElsewhere("app") == 2 })
	if _, err := ns[1].hub.Connect("app", hub.ConnectOptions{MaxConns: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns[1].hub.Connect("app", hub.ConnectOptions{MaxConns: 3}); !errors.Is(err, hub.ErrOverQuota) {
		t.Fatalf("the 4th connection of the cluster: %v, want ErrOverQuota", err)
	}
	if n, err := ns[1].hub.State().Connections("app"); err != nil || n != 3 {
		t.Fatalf("Connections = %d %v", n, err)
	}
	// The first node's connections gone, the other counts none of them.
	for _, c := range first {
		ns[0].hub.Remove(c)
	}
	wait.Until(t, "the other node counts none", func() bool { return ns[1].c.ConnectionsElsewhere("app") == 0 })
	if _, err := ns[1].hub.Connect("app", hub.ConnectOptions{MaxConns: 3}); err != nil {
		t.Fatalf("a connection under the quota again: %v", err)
	}
}

func TestDeadNodeConverges(t *testing.T) {
	onEachTopology(t, testDeadNodeConverges)
}

func testDeadNodeConverges(t *testing.T, cluster startCluster) {
	ns := cluster(2)
	watcher := ns[0].connect("app")
	watcher.subscribe("presence-room", &hub.Member{UserID: "w"})
	watcher.wait("presence-room", "pusher_internal:subscription_succeeded")
	if err := ns[0].hub.SignIn(watcher.conn, "w", []string{"gone"}); err != nil {
		t.Fatal(err)
	}
	doomed := ns[1].connect("app")
	doomed.subscribe("presence-room", &hub.Member{UserID: "gone"})
	doomed.subscribe("lonely", nil)
	ns[1].hub.SignIn(doomed.conn, "gone", nil)
	watcher.wait("presence-room", "pusher_internal:member_added")
	wait.Until(t, "gone is online", func() bool {
		return strings.Contains(strings.Join(watcher.datas("pusher_internal:watchlist_events"), " "), `"online","user_ids":["gone"]`)
	})
	doomed.wait("lonely", "pusher_internal:subscription_succeeded")

	ns[1].crash()
	watcher.wait("presence-room", "pusher_internal:member_removed")
	wait.Until(t, "gone is offline", func() bool {
		return strings.Contains(strings.Join(watcher.datas("pusher_internal:watchlist_events"), " "), `"offline","user_ids":["gone"]`)
	})
	// Over shards, the two channels may be reaped apart, in any order.
	wait.Until(t, "lonely is vacated", func() bool { return len(ns[0].obs.kinds("lonely", hub.ChannelVacated)) == 1 })
	wait.Until(t, "gone's member_removed webhook", func() bool { return len(ns[0].obs.kinds("presence-room", hub.MemberRemoved)) > 0 })
	if got := ns[0].obs.kinds("presence-room", hub.MemberRemoved); !slices.Equal(got, []string{"member_removed:gone"}) {
		t.Fatalf("member_removed webhook events %v", got)
	}
	users, err := ns[0].hub.State().PresenceUsers("app", "presence-room")
	if err != nil || !slices.Equal(users, []string{"w"}) {
		t.Fatalf("users after the crash: %v %v", users, err)
	}
	// The reaper counts the node once its whole record is out, a moment
	// after the events it reported went out: once on each shard.
	shards := int64(len(members(ns[0].c)))
	wait.Until(t, "n2 counted as reaped", func() bool { return ns[0].c.Stats().Reaped == shards })

	// The node comes back with the same id: nothing of the old one returns.
	back := startNode(t, nil, prefix(ns[0].c), "n2", withURL(url(ns[0].c)))
	wait.Until(t, "the new n2 is live", func() bool { return back.c.Stats().Resyncs >= 1 })
	if st, err := ns[0].hub.State().Channel("app", "lonely"); err != nil || st.Occupied {
		t.Fatalf("lonely after n2 restarted: %+v %v", st, err)
	}
}

// memberAndSubscriber starts two nodes on rs: on the first a member "a"
// of presence-room, on the second a subscriber of news, both answered.
func memberAndSubscriber(t *testing.T, rs *testredis.Server) (ns []*node, a, b *client) {
	t.Helper()
	ns = cluster(t, rs, 2)
	a = ns[0].connect("app")
	a.subscribe("presence-room", &hub.Member{UserID: "a"})
	b = ns[1].connect("app")
	b.subscribe("news", nil)
	a.wait("presence-room", "pusher_internal:subscription_succeeded")
	b.wait("news", "pusher_internal:subscription_succeeded")
	return ns, a, b
}

func TestRedisRestartRefusesThenRebuilds(t *testing.T) {
	rs := testredis.Start(t)
	ns, _, b := memberAndSubscriber(t, rs)

	rs.Stop()
	wait.Until(t, "both nodes see Redis down", func() bool { return !ns[0].c.Stats().Up && !ns[1].c.Stats().Up })
	if err := ns[0].hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "lost", Data: "{}"}); !errors.Is(err, hub.ErrUnavailable) {
		t.Fatalf("publish while Redis is down: %v, want ErrUnavailable", err)
	}
	if _, err := ns[0].hub.State().Channels("app", ""); !errors.Is(err, hub.ErrUnavailable) {
		t.Fatalf("query while Redis is down: %v, want ErrUnavailable", err)
	}
	// A subscription made during the outage completes once Redis is back.
	late := ns[0].connect("app")
	late.subscribe("news", nil)

	rs.Restart()
	late.wait("news", "pusher_internal:subscription_succeeded")
	wait.Until(t, "the state is rebuilt", func() bool {
		st, err := ns[0].hub.State().Channel("app", "news")
		users, _ := ns[1].hub.State().PresenceUsers("app", "presence-room")
		return err == nil && st.Subscriptions == 2 && slices.Equal(users, []string{"a"})
	})
	if err := ns[0].hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "after", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	b.wait("news", "after")
	late.wait("news", "after")
	if n := b.count("news", "lost"); n != 0 {
		t.Fatal("a refused publish was delivered")
	}
	// Rebuilding after Redis lost its data sends no events: nothing
	// changed for the clients.
	if got := ns[0].obs.kinds("presence-room", hub.MemberAdded); len(got) != 1 {
		t.Fatalf("member_added webhook events %v, want the one before the restart", got)
	}
}

// Options left empty take the defaults, the README's figures: keys under
// herald:, a node's heartbeat record that lives 5 s (by its PTTL), renewed
// every second, the webhook hold of 3 s, and a replay window of the last
// 3 s and 32 MiB.
func TestOptionsDefaults(t *testing.T) {
	rs := testredis.Start(t)
	cl, err := New(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), hub.New(zap.NewNop()), Options{URL: rs.URL(), NodeID: "n1", Settings: testSettings})
	if err != nil {
		t.Fatal(err)
	}
	c := cl.(*member)
	if o := c.opts; o.Prefix != "herald:" || o.Heartbeat != time.Second || o.NodeTTL != 5*time.Second || o.Hold != 3*time.Second ||
		o.ReplayWindow != 3*time.Second || o.ReplayBytes != 32<<20 {
		t.Fatalf("options %+v, want the defaults", o)
	}
	c.Start()
	defer c.Close()
	wait.Until(t, "the node is up", func() bool { return c.Stats().Up })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	ttl, err := rdb.PTTL(t.Context(), "herald:node:n1").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Renewed every second, so more than a second left unless the machine
	// stalled for four.
	if ttl <= time.Second || ttl > 5*time.Second {
		t.Fatalf("the node's record lives %v, want up to 5s", ttl)
	}
}

// A query of the HTTP API (channels, presence users, a cached event) waits
// 2 s at most for Redis: its context's deadline.
func TestQueriesWaitTwoSecondsAtMost(t *testing.T) {
	cl, err := New(zap.NewNop(), hub.New(zap.NewNop()), Options{URL: "redis://127.0.0.1:1/0"})
	if err != nil {
		t.Fatal(err)
	}
	c := cl.(*member)
	defer c.Close()
	ctx, cancel := c.queryContext()
	defer cancel()
	deadline, ok := ctx.Deadline()
	if left := time.Until(deadline); !ok || left > 2*time.Second || left < time.Second {
		t.Fatalf("a query's deadline is %v away (%v), want 2 s", left, ok)
	}
}

// A heartbeat cut short by Close (the node's context ends while it waits
// for Redis) is no outage: the node stays up, counts and logs none, and
// Close, which takes the node's record out only while Redis answers, takes
// it out.
func TestAHeartbeatCutShortByCloseIsNoOutage(t *testing.T) {
	rs := testredis.Start(t)
	core, logs := observer.New(zapcore.WarnLevel)
	n := startLoggedNode(t, rs, "cutbeat:", "n1", zap.New(core))
	c := n.m()
	wait.Until(t, "the node is up", func() bool { return c.Stats().Up })
	// Close's first step, then a heartbeat: it fails on the ended context.
	c.cancel()
	c.heartbeat()
	if st := c.Stats(); !st.Up || st.Outages != 0 {
		t.Fatalf("after a heartbeat cut short: up %v, %d outages; want up, none", st.Up, st.Outages)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	n.c = nil // closed
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if rdb.Exists(t.Context(), "cutbeat:node:n1").Val() != 0 {
		t.Error("the node's record left in Redis after Close")
	}
	if logged := logs.All(); len(logged) > 0 {
		t.Fatalf("closing logged: %s %v", logged[0].Message, logged[0].ContextMap())
	}
}

// A script Redis does not have (it restarted, or flushed its scripts) is
// sent again in full after the calls that followed it in its pipeline,
// which changes their order: the node's record is then rebuilt. A script
// sent again as the pipeline's last call changed no order: no rebuild.
// Either way every call has Redis's answer.
func TestAScriptSentAgainAfterLaterCallsAsksForARebuild(t *testing.T) {
	rs := testredis.Start(t)
	// Heartbeats an hour apart: the writer, idle, looks at the rebuild
	// flag only when the test asks it to.
	n := startNode(t, rs, "retried:", "n1", func(o *Options) { o.Heartbeat, o.NodeTTL = time.Hour, 2*time.Hour })
	c := n.m()
	wait.Until(t, "the node's record to be written", func() bool { return c.Stats().Up && c.Stats().Resyncs == 1 && !c.needResync.Load() })
	// Scripts never loaded (NOSCRIPT), each case its own: Redis keeps a
	// script it was sent in full.
	unknown := func(n int) *redis.Script { return redis.NewScript(fmt.Sprintf("return 'script' -- %d", n)) }
	for _, tc := range []struct {
		name    string
		calls   []*call
		rebuild bool
	}{
		{"retried before another", []*call{{script: unknown(1)}, {args: []any{"echo", "plain"}}}, true},
		{"retried last", []*call{{args: []any{"echo", "plain"}}, {script: unknown(2)}}, false},
	} {
		c.needResync.Store(false)
		c.exec(t.Context(), tc.calls)
		if got := c.needResync.Load(); got != tc.rebuild {
			t.Errorf("%s: a rebuild asked for %v, want %v", tc.name, got, tc.rebuild)
		}
		for i, cl := range tc.calls {
			if cl.err != nil || (cl.val != "script" && cl.val != "plain") {
				t.Errorf("%s: call %d answered %v, %v", tc.name, i, cl.val, cl.err)
			}
		}
	}
}

// Each change of Redis answering is counted and logged once, by the
// heartbeat that finds it: an outage at the first heartbeat Redis does not
// answer, its end at the first it answers again; heartbeats that find no
// change say nothing.
func TestEachChangeOfRedisAnsweringIsLoggedOnce(t *testing.T) {
	rs := testredis.Start(t)
	core, logs := observer.New(zapcore.InfoLevel)
	// Heartbeats an hour apart: the test beats.
	n := startLoggedNode(t, rs, "beats:", "n1", zap.New(core), func(o *Options) { o.Heartbeat, o.NodeTTL = time.Hour, 2*time.Hour })
	c := n.m()
	check := func(when string, up bool, outages int64, answers, refuses int) {
		t.Helper()
		st := c.Stats()
		gotAnswers := logs.FilterMessage("Redis answers: in the cluster").Len()
		gotRefuses := logs.FilterMessageSnippet("Redis does not answer").Len()
		if st.Up != up || st.Outages != outages || gotAnswers != answers || gotRefuses != refuses {
			t.Fatalf("%s: up %v, %d outages, logged %d times that Redis answers and %d that it does not; want %v, %d, %d, %d",
				when, st.Up, st.Outages, gotAnswers, gotRefuses, up, outages, answers, refuses)
		}
	}
	check("started", true, 0, 1, 0) // Start's heartbeat
	c.heartbeat()
	check("a heartbeat on", true, 0, 1, 0)
	rs.Stop()
	c.heartbeat()
	check("Redis stopped", false, 1, 1, 1)
	c.heartbeat()
	check("a heartbeat on", false, 1, 1, 1)
	rs.Restart()
	c.heartbeat()
	check("Redis back", true, 1, 2, 1)
	c.heartbeat()
	check("a heartbeat on", true, 1, 2, 1)
}
