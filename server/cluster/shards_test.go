package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// shardList starts n redis-servers and returns them with their URLs as
// one HERALD_REDIS_URL.
func shardList(t testing.TB, n int) ([]*testredis.Server, string) {
	t.Helper()
	servers := make([]*testredis.Server, n)
	urls := make([]string, n)
	for i := range servers {
		servers[i] = testredis.Start(t)
		urls[i] = servers[i].URL()
	}
	return servers, strings.Join(urls, ",")
}

func withURL(url string) func(*Options) { return func(o *Options) { o.URL = url } }

// Channels spread over the shards (of each topology): events reach every
// subscriber on every node once, in order per channel, batches spanning
// shards included; each shard holds some of the channels and no other's,
// also after a Redis lost its data; the cluster's answers (channels with
// counts, presence users, connections) are exact over all of them;
// sign-ins, the watchlist and terminations work across nodes.
func TestChannelsSpreadOverShards(t *testing.T) {
	for _, tp := range topologies {
		t.Run(tp.name, func(t *testing.T) {
			servers, url := tp.start(t)
			testChannelsSpreadOverShards(t, servers, url)
		})
	}
}

func testChannelsSpreadOverShards(t *testing.T, servers []*testredis.Server, url string) {
	ns := cluster(t, servers[0], 2, withURL(url))
	const channels = 40
	names := make([]string, channels)
	for i := range names {
		names[i] = fmt.Sprint("ch", i)
	}
	names[0], names[1] = "presence-a", "presence-b"
	subs := []*client{ns[0].connect("app"), ns[1].connect("app")}
	for i, cl := range subs {
		for _, name := range names {
			var m *hub.Member
			if hub.IsPresence(name) {
				m = &hub.Member{UserID: fmt.Sprint("u", i), Info: json.RawMessage(`{}`)}
			}
			cl.subscribe(name, m)
		}
		for _, name := range names {
			cl.wait(name, "pusher_internal:subscription_succeeded")
		}
	}
	// One batch over every channel, then one event per channel.
	batch := make([]hub.Message, 0, channels)
	for _, name := range names {
		batch = append(batch, hub.Message{AppID: "app", Channel: name, Event: "first", Data: "{}"})
	}
	if err := ns[0].hub.Publish(batch...); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if err := ns[1].hub.Publish(hub.Message{AppID: "app", Channel: name, Event: "second", Data: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	for i, cl := range subs {
		for _, name := range names {
			cl.wait(name, "second")
			var got []string
			for _, e := range cl.events(name) {
				if !strings.HasPrefix(e, "pusher_internal:member") {
					got = append(got, e)
				}
			}
			if want := []string{"pusher_internal:subscription_succeeded", "first", "second"}; !slices.Equal(got, want) {
				t.Fatalf("client on node %d, %s: %v, want %v", i+1, name, got, want)
			}
		}
	}

	// Each shard holds its channels only, and every channel is on one;
	// also once a shard lost its data and the nodes rebuilt their records.
	shardsHold(t, ns[0].c, names)
	servers[len(servers)-1].Restart()
	wait.Until(t, "the records are rebuilt", func() bool {
		st, err := ns[1].hub.State().Channels("app", "")
		if err != nil || len(st) != channels {
			return false
		}
		for _, s := range st {
			if s.Subscriptions != 2 {
				return false
			}
		}
		return true
	})
	shardsHold(t, ns[0].c, names)

	for i, n := range ns {
		st, err := n.hub.State().Channels("app", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(st) != channels {
			t.Fatalf("node %d lists %d channels, want %d: %+v", i+1, len(st), channels, st)
		}
		for _, s := range st {
			if s.Subscriptions != 2 || (hub.IsPresence(s.Name) && s.Users != 2) {
				t.Fatalf("node %d: %+v", i+1, s)
			}
		}
		if !slices.IsSortedFunc(st, func(a, b hub.ChannelStats) int { return strings.Compare(a.Name, b.Name) }) {
			t.Fatalf("node %d lists channels out of order", i+1)
		}
		users, err := n.hub.State().PresenceUsers("app", "presence-b")
		if err != nil || !slices.Equal(users, []string{"u0", "u1"}) {
			t.Fatalf("node %d: presence users %v %v", i+1, users, err)
		}
	}
	wait.Until(t, "each node counts the other's connection", func() bool {
		a, errA := ns[0].hub.State().Connections("app")
		b, errB := ns[1].hub.State().Connections("app")
		return errA == nil && errB == nil && a == 2 && b == 2
	})

	// Sign-in and the watchlist across nodes, then a termination.
	watcher := ns[0].connect("app")
	if err := ns[0].hub.SignIn(watcher.conn, "w", []string{"bob"}); err != nil {
		t.Fatal(err)
	}
	bob := ns[1].connect("app")
	if err := ns[1].hub.SignIn(bob.conn, "bob", nil); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the watcher hears bob is online", func() bool {
		return strings.Contains(strings.Join(watcher.datas("pusher_internal:watchlist_events"), " "), `"online","user_ids":["bob"]`)
	})
	if err := ns[0].hub.Terminate("app", "bob"); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "bob's connection is closed with 4009", func() bool { return bob.conn.CloseCode() == hub.CloseTerminated.Code })
}

// shardsHold checks that each shard of c holds the channels of names that
// are its own and no other, that every one is held, and that they spread.
func shardsHold(t *testing.T, c Cluster, names []string) {
	t.Helper()
	ms := members(c)
	var all []string
	empty := 0
	for i, m := range ms {
		held, err := m.rdb.HKeys(t.Context(), m.key("ch:app")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(held) == 0 {
			empty++
		}
		for _, name := range held {
			if k := shardOf("app", name, len(ms)); k != i {
				t.Errorf("%s is on shard %d, its shard is %d", name, i+1, k+1)
			}
		}
		all = append(all, held...)
	}
	// A few channels a shard: with three shards each holds some, with
	// sixteen most do.
	if empty > len(ms)/4 {
		t.Errorf("%d of %d shards hold no channel", empty, len(ms))
	}
	slices.Sort(all)
	if want := slices.Sorted(slices.Values(names)); !slices.Equal(all, want) {
		t.Fatalf("the shards hold %v, want %v", all, want)
	}
}

// A node whose list of shards is not the running cluster's (another
// number, another order) is refused by the shards it disagrees with: it
// does not join, its publishes are refused, /readyz says why without a
// password. Once every node of the old list is gone, a new list takes over.
func TestAChangedShardListIsRefused(t *testing.T) {
	servers, url := shardList(t, 3)
	prefix := fmt.Sprintf("s%d:", time.Now().UnixNano())
	a := startNode(t, servers[0], prefix, "a", withURL(url))
	wait.Until(t, "a is up", func() bool { return a.c.Stats().Up })
	urls := strings.Split(url, ",")
	for name, list := range map[string][]string{
		"fewer":     urls[:2],
		"reordered": {urls[1], urls[0], urls[2]},
		"one":       urls[:1],
	} {
		t.Run(name, func(t *testing.T) {
			b := startNode(t, servers[0], prefix, "b-"+name, withURL(strings.Join(list, ",")))
			var err error
			wait.Until(t, "b is refused", func() bool {
				err = b.c.Ready(t.Context())
				return err != nil
			})
			if !strings.Contains(err.Error(), "HERALD_REDIS_URL") || !strings.Contains(err.Error(), "of the running cluster") {
				t.Fatalf("readiness: %v", err)
			}
			if b.c.Stats().Up {
				t.Fatal("a refused node counts as up")
			}
			// A channel of b's first shard, which disagrees in every case.
			channel := "x"
			for i := 0; shardOf("app", channel, len(list)) != 0; i++ {
				channel = fmt.Sprint("x", i)
			}
			if err := b.hub.Publish(hub.Message{AppID: "app", Channel: channel, Event: "e", Data: "{}"}); !errors.Is(err, hub.ErrUnavailable) {
				t.Fatalf("publish through a refused shard: %v", err)
			}
		})
	}
	// Each shard records its place in the list, which is what the others
	// are refused by.
	places := func(want ...string) {
		t.Helper()
		for i, w := range want {
			rdb := redis.NewClient(&redis.Options{Addr: servers[i].Addr()})
			got, err := rdb.Get(t.Context(), prefix+"shard").Result()
			rdb.Close()
			if err != nil || got != w {
				t.Fatalf("shard %d records %q (%v), want %q", i+1, got, err, w)
			}
		}
	}
	places("1/3", "2/3", "3/3")
	// The old list's last node dies (its heartbeat expires, its record
	// stays): a node of a new list, refused until then, takes over.
	c := startNode(t, servers[0], prefix, "c", withURL(strings.Join(urls[:2], ",")))
	wait.Until(t, "c is refused", func() bool {
		err := c.c.Ready(t.Context())
		return err != nil && strings.Contains(err.Error(), "of the running cluster")
	})
	a.crash()
	wait.Until(t, "the new list's node is up", func() bool { return c.c.Stats().Up && c.c.Ready(t.Context()) == nil })
	places("1/2", "2/2", "3/3")
}

// Sign-ins are kept on the first shard: when it loses its data, the nodes
// rebuild them there with the rest of their records.
func TestSignInsAreRebuiltWhenTheFirstShardLosesItsData(t *testing.T) {
	servers, url := shardList(t, 3)
	ns := cluster(t, servers[0], 2, withURL(url))
	cl := ns[0].connect("app")
	if err := ns[0].hub.SignIn(cl.conn, "u", nil); err != nil {
		t.Fatal(err)
	}
	signedIn := func() bool {
		on, err := ns[1].hub.State().SignedIn("app", "u")
		return err == nil && on
	}
	wait.Until(t, "node 2 sees u signed in", signedIn)
	resyncs := ns[0].c.Stats().Resyncs
	servers[0].Restart()
	wait.Until(t, "node 1 rebuilds its records", func() bool { return ns[0].c.Stats().Resyncs > resyncs })
	wait.Until(t, "node 2 sees u signed in again", signedIn)
}

// A node over shards names each one, 1 to n, in what it logs.
func TestANodeOverShardsNamesThemInItsLogs(t *testing.T) {
	_, url := shardList(t, 3)
	core, logs := observer.New(zapcore.InfoLevel)
	n := startLoggedNode(t, nil, "named:", "n1", zap.New(core), withURL(url))
	wait.Until(t, "the node is up on every shard", func() bool { return n.c.Stats().Up })
	if named := shardsNamed(logs); !slices.Equal(named, []int{1, 2, 3}) {
		t.Fatalf("shards named in the logs %v, want 1, 2 and 3", named)
	}
}

// A batch whose events are on two shards, one of them down, is refused as
// unavailable (a 503), whichever shard its first event is on, and whether
// or not the node has noticed the shard is down yet: nothing is lost
// silently (the events of the shard that answers may go out, as the README
// says). The batch goes through again once the shard is back.
func TestABatchOverTwoShardsOneDownIsRefused(t *testing.T) {
	servers, url := shardList(t, 2)
	n := startNode(t, servers[0], "batch:", "n1", withURL(url))
	wait.Until(t, "the node is up on both shards", func() bool { return n.c.Stats().Up })
	on := func(shard int) string {
		for i := 0; ; i++ {
			if name := fmt.Sprint("ch", i); shardOf("app", name, 2) == shard {
				return name
			}
		}
	}
	up, down := on(0), on(1)
	sub := n.connect("app")
	sub.subscribe(up, nil)
	sub.wait(up, "pusher_internal:subscription_succeeded")
	batch := func(event string, channels ...string) error {
		ms := make([]hub.Message, len(channels))
		for i, ch := range channels {
			ms[i] = hub.Message{AppID: "app", Channel: ch, Event: event, Data: "{}"}
		}
		return n.hub.Publish(ms...)
	}

	servers[1].Stop()
	refused := func(when string) {
		t.Helper()
		for _, order := range [][]string{{up, down}, {down, up}} {
			if err := batch("lost", order...); !errors.Is(err, hub.ErrUnavailable) {
				t.Fatalf("%s, a batch on %v (shard %d down): %v, want unavailable", when, order, shardOf("app", down, 2)+1, err)
			}
		}
	}
	refused("before the node noticed")
	wait.Until(t, "the node sees the shard down", func() bool { return !members(n.c)[1].Stats().Up })
	refused("once the node noticed")
	if err := batch("alone", up); err != nil {
		t.Fatalf("a publish on the shard that answers: %v", err)
	}
	sub.wait(up, "alone")

	servers[1].Restart()
	wait.NoError(t, func() error { return batch("back", up, down) })
	sub.wait(up, "back")
}

// Whether a node of the running list lives, which decides if a shard
// refuses a node of another list, is asked of the other nodes' heartbeats
// and never of the asking node's own: its own alone is no other's, and
// another's that lives is one whether or not its own is there.
func TestOtherNodesLiveIsAskedOfTheOthersHeartbeats(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "others:", "me")
	wait.Until(t, "the node is up", func() bool { return n.c.Stats().Up })
	m := n.m()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	live := func(want bool, what string) {
		t.Helper()
		if got, err := m.otherNodesLive(t.Context()); err != nil || got != want {
			t.Fatalf("%s: other nodes live %v (%v), want %v", what, got, err, want)
		}
	}
	live(false, "the node's own heartbeat alone")
	if err := rdb.SAdd(t.Context(), m.key("nodes"), "other").Err(); err != nil {
		t.Fatal(err)
	}
	live(false, "another node whose heartbeat is gone")
	// (The node may have taken the dead one out since: it is added again.)
	if err := rdb.Set(t.Context(), m.key("node:", "other"), "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SAdd(t.Context(), m.key("nodes"), "other").Err(); err != nil {
		t.Fatal(err)
	}
	live(true, "another node whose heartbeat lives")
}

// A node that takes a shard over (the shard had another place, and no node
// of that list lives) is no longer refused from the check that takes it
// over: not a heartbeat later.
func TestATakeoverEndsTheRefusalAtOnce(t *testing.T) {
	rs := testredis.Start(t)
	// No heartbeat but the first: the checks are the test's.
	n := startNode(t, rs, "takeover:", "me", func(o *Options) { o.Heartbeat, o.NodeTTL = time.Hour, 2*time.Hour })
	wait.Until(t, "the node is up", func() bool { return n.c.Stats().Up })
	m := n.m()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.Set(t.Context(), m.key("shard"), "2/3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("refused by an earlier check")
	m.refused.Store(&refusal)
	if err := m.checkShard(t.Context()); err != nil {
		t.Fatalf("the takeover: %v", err)
	}
	if err := n.c.Ready(t.Context()); err != nil {
		t.Fatalf("after the takeover: %v", err)
	}
	if got := rdb.Get(t.Context(), m.key("shard")).Val(); got != "1/1" {
		t.Fatalf("the shard records %q, want 1/1", got)
	}
}
