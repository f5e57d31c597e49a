package cluster

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/cluster/redisconn"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// primaryAndReplica starts a primary and a replica of it, in sync.
func primaryAndReplica(t *testing.T) (primary, replica *testredis.Server) {
	t.Helper()
	primary = testredis.Start(t)
	_, port, _ := net.SplitHostPort(primary.Addr())
	replica = testredis.StartWith(t, "--replicaof", "127.0.0.1", port)
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rc.Close()
	wait.Until(t, "the replica is in sync", func() bool {
		info, err := rc.Info(t.Context(), "replication").Result()
		return err == nil && redisconn.InfoValue(info, "master_link_status") == "up"
	})
	return primary, replica
}

// nodesBehind starts nodes a and b on primary (a Redis), reached through pxA and
// pxB, each keeping a minute of what it published for a replay.
func nodesBehind(t *testing.T, primary *testredis.Server, pxA, pxB *cutProxy) (a, b *node) {
	t.Helper()
	prefix := fmt.Sprintf("f%d:", time.Now().UnixNano())
	long := func(o *Options) { o.ReplayWindow = time.Minute }
	return startNode(t, primary, prefix, "a", withURL(pxA.url()), long), startNode(t, primary, prefix, "b", withURL(pxB.url()), long)
}

// sentinelSetup starts a primary, a replica of it and a Sentinel that
// watches them as master "herald", and waits until the Sentinel knows the
// replica (it could not promote it otherwise).
func sentinelSetup(t *testing.T) (primary, sentinel *testredis.Server) {
	t.Helper()
	primary, _ = primaryAndReplica(t)
	sentinel = testredis.StartSentinel(t, "herald", primary.Addr())
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	defer sc.Close()
	wait.Until(t, "the Sentinel knows the replica", func() bool {
		replicas, err := sc.Replicas(t.Context(), "herald").Result()
		return err == nil && len(replicas) == 1
	})
	return primary, sentinel
}

// Three nodes on a Sentinel-managed Redis, a steady stream of triggers, the
// primary SIGKILLed: the Sentinel promotes the replica, the nodes move to
// it by themselves, every trigger answered 200 reaches every subscriber
// exactly once (what the promotion lost is published again), the others
// were refused as unavailable, and the presence lists agree afterwards.
func TestNodesFollowASentinelFailover(t *testing.T) {
	primary, sentinel := sentinelSetup(t)
	url := "redis-sentinel://" + sentinel.Addr() + "/herald"
	ns := cluster(t, primary, 3, withURL(url))
	subs := make([]*client, len(ns))
	for i, n := range ns {
		subs[i] = n.connect("app")
		subs[i].subscribe("news", nil)
		subs[i].subscribe("presence-room", &hub.Member{UserID: fmt.Sprint("u", i)})
		subs[i].wait("news", "pusher_internal:subscription_succeeded")
		subs[i].wait("presence-room", "pusher_internal:subscription_succeeded")
	}

	pub := startPublishing(t, ns)
	wait.Until(t, "triggers flow", func() bool { return pub.takenSince(time.Time{}) >= 50 })
	primary.Stop() // SIGKILL
	killed := time.Now()
	wait.Until(t, "triggers flow again after the failover", func() bool { return pub.takenSince(killed) >= 50 })
	taken, refused := pub.finish()
	// A node whose heartbeat a busy machine delayed past its timeout may
	// still refuse for a moment after the others publish again.
	wait.Until(t, "the end is published", func() bool {
		return ns[0].hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "end", Data: "{}"}) == nil
	})
	for i, s := range subs {
		s.wait("news", "end")
		s.each(t, fmt.Sprint("node ", i+1), taken)
	}
	t.Logf("%d triggers answered 200, %d refused as unavailable over %v", len(taken), refused.n, refused.last.Sub(refused.first))
	want := []string{"u0", "u1", "u2"}
	wait.Until(t, "the presence lists agree", func() bool {
		for _, n := range ns {
			users, err := n.hub.State().PresenceUsers("app", "presence-room")
			if err != nil || !slices.Equal(users, want) {
				return false
			}
		}
		return true
	})
}

// A Sentinel that does not know the master stops the start, naming the
// setting and never printing the password; one that does lets it go on.
// (The forms of a redis-sentinel:// URL are redisconn's TestParseEveryForm.)
func TestBadSentinelSettingsStopTheStart(t *testing.T) {
	_, sentinel := sentinelSetup(t)
	for _, url := range []string{
		"redis-sentinel://:s3cret@" + sentinel.Addr() + "/nosuchmaster",
	} {
		_, err := New(zap.NewNop(), hub.New(zap.NewNop()), Options{URL: url})
		if err == nil {
			t.Fatalf("%s: accepted", url)
		}
		if !strings.HasPrefix(err.Error(), "HERALD_REDIS_URL") || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("%s: %v", url, err)
		}
	}
	cl, err := New(zap.NewNop(), hub.New(zap.NewNop()), Options{URL: "redis-sentinel://" + sentinel.Addr() + "/herald"})
	if err != nil {
		t.Fatalf("a good redis-sentinel:// URL: %v", err)
	}
	c := cl.(*member)
	c.rdb.Close()
}

// A Redis that answers again after an outage may be a promoted replica
// that lacks the last writes of the primary, with the state's generation
// all the same: the publishers publish what they published lately again,
// so a trigger answered 200 that a node had not read still reaches it, and
// the nodes that had it do not deliver it twice. Here the lost writes are
// the stream's entries, deleted while both nodes were away.
func TestMessagesAFailoverLostAreDelivered(t *testing.T) {
	rs := testredis.Start(t)
	pxA, pxB := newCutProxy(t, rs.Addr()), newCutProxy(t, rs.Addr())
	a, b := nodesBehind(t, rs, pxA, pxB)
	subA, subB, publish := newsOnTwoNodes(t, a, b)

	pxB.cut()
	wait.Until(t, "b sees Redis down", func() bool { return !b.c.Stats().Up })
	publish("taken-1")
	publish("taken-2")
	subA.wait("news", "taken-2")
	// The failover: a loses Redis too, and the Redis that comes back has
	// the generation but not the entries.
	pxA.cut()
	wait.Until(t, "a sees Redis down", func() bool { return !a.c.Stats().Up })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.Del(t.Context(), a.m().key(slotStreams[slotOf("app", "news")])).Err(); err != nil {
		t.Fatal(err)
	}
	pxA.resume()
	pxB.resume()
	wait.Until(t, "both are back", func() bool { return a.c.Stats().Up && b.c.Stats().Up })
	subB.wait("news", "taken-2")
	newsEnds(t, publish, subA, subB, "taken-1", "taken-2")
}

// A Redis behind one address (a managed Redis, a proxy, a DNS name) that
// fails over to a replica without the last writes, while the address
// answers all along: the node that made those writes sees no outage, yet
// it sees another server behind the address, so it publishes its window
// again, and a node that had not read them delivers them, once.
func TestMessagesAFailoverBehindOneAddressLostAreDelivered(t *testing.T) {
	primary, replica := primaryAndReplica(t)
	pxA, pxB := newCutProxy(t, primary.Addr()), newCutProxy(t, primary.Addr())
	a, b := nodesBehind(t, primary, pxA, pxB)
	subA, subB, publish := newsOnTwoNodes(t, a, b)

	// The replica has everything up to "before", then stops following:
	// what the primary takes from now on, it will never have.
	promote(t, replica, primary, a.m().key(slotStreams[slotOf("app", "news")]))
	pxB.cut()
	wait.Until(t, "b sees Redis down", func() bool { return !b.c.Stats().Up })
	publish("taken-1")
	publish("taken-2")
	subA.wait("news", "taken-2")

	// The address moves to the promoted replica: a's connections close and
	// its next ones reach the replica at once.
	pxA.failOver(replica.Addr())
	pxB.failOver(replica.Addr())
	pxB.resume()
	// (a may have seen an outage too: a heartbeat in flight on a closed
	// connection. Either way it publishes its window again.)
	wait.Until(t, "both are up", func() bool { return a.c.Stats().Up && b.c.Stats().Up })
	subB.wait("news", "taken-2")
	newsEnds(t, publish, subA, subB, "taken-1", "taken-2")
}

// promote makes replica a primary once it holds stream as primary has it.
func promote(t *testing.T, replica, primary *testredis.Server, stream string) {
	t.Helper()
	newest := func(addr string) string {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		return newestID(rdb.XRevRangeN(t.Context(), stream, "+", "-", 1).Val())
	}
	wait.Until(t, "the replica has what the primary has", func() bool { return newest(replica.Addr()) == newest(primary.Addr()) })
	rr := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rr.Close()
	if err := rr.ReplicaOf(t.Context(), "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
}

// The same failover done by roles, behind one address that keeps its
// connections open: the replica is promoted, the address sends new
// connections to it, and the old primary, demoted, answers writes with
// READONLY and its blocked reads with an error. An event the old primary
// took in between is lost with its data. The nodes leave the connections
// that answer READONLY and go on on the new primary; every publish answered
// without error reaches the subscribers of both nodes once, the lost one
// included.
func TestNodesFollowADemotedPrimaryBehindOneAddress(t *testing.T) {
	primary, replica := primaryAndReplica(t)
	px := newCutProxy(t, primary.Addr())
	a, b := nodesBehind(t, primary, px, px)
	subA, subB, publish := newsOnTwoNodes(t, a, b)

	stream := a.m().key(slotStreams[slotOf("app", "news")])
	promote(t, replica, primary, stream)
	publish("between") // taken by the old primary alone
	subB.wait("news", "between")
	px.retarget(replica.Addr())
	rp := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	defer rp.Close()
	_, replicaPort, _ := net.SplitHostPort(replica.Addr())
	if err := rp.ReplicaOf(t.Context(), "127.0.0.1", replicaPort).Err(); err != nil {
		t.Fatal(err)
	}

	// Each publish is tried again while the node answers unavailable: a
	// node keeps connections to the demoted primary, whose writes fail
	// (READONLY, so nothing is taken twice) until it has left them all.
	publishVia := func(n *node, ev string) {
		t.Helper()
		wait.Until(t, ev+" goes through "+n.c.ID(), func() bool {
			err := n.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: ev, Data: "{}"})
			if err != nil && !errors.Is(err, hub.ErrUnavailable) {
				t.Fatalf("publish: %v", err)
			}
			return err == nil
		})
	}
	taken := []string{"between"}
	for i, n := range []*node{a, b, a, b} {
		ev := fmt.Sprint("then-", i)
		publishVia(n, ev)
		taken = append(taken, ev)
	}
	newsEnds(t, func(ev string) { publishVia(a, ev) }, subA, subB, taken...)
	// Both nodes had read "between" from the old primary, so they delivered
	// it once; a published it again on the promoted replica, for a node
	// that had not.
	rr := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rr.Close()
	entries, err := rr.XRange(t.Context(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var republished bool
	for _, e := range entries {
		if got, _ := entryOf(e.Values); strings.Contains(got.msg, "between") {
			republished = true
		}
	}
	if !republished {
		t.Error("the promoted replica never got the event the old primary alone took")
	}
}

// A Redis that restarts from its snapshot answers LOADING until it has
// read it: the nodes take that for an outage (publishes refused as
// unavailable, nothing else), go on once it is loaded, and every publish
// answered without error reaches the subscribers of both nodes once, those
// after the snapshot included.
func TestNodesWaitForARedisLoadingItsData(t *testing.T) {
	// 4,000 keys read at 500 µs each: about 2 s of LOADING, with clients
	// answered every KiB read (by default only every 2 MiB: they would
	// wait, not be told LOADING).
	rs := testredis.StartWith(t, "--key-load-delay", "500", "--loading-process-events-interval-bytes", "1024")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	pipe := rdb.Pipeline()
	for i := range 4000 {
		pipe.Set(t.Context(), fmt.Sprint("filler:", i), i, 0)
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("l%d:", time.Now().UnixNano())
	a, b := startNode(t, rs, prefix, "a"), startNode(t, rs, prefix, "b")
	subA, subB, _ := newsOnTwoNodes(t, a, b)
	if err := rdb.Save(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}

	pub := startPublishing(t, []*node{a, b})
	wait.Until(t, "publishes go through", func() bool { return pub.takenSince(time.Time{}) >= 10 })
	rs.Restart() // returns once the server answers PING: loaded
	restarted := time.Now()
	wait.Until(t, "publishes go through again", func() bool { return pub.takenSince(restarted) >= 10 })
	taken, _ := pub.finish()
	// The nodes' calls met LOADING (Redis counts the calls it rejected).
	stats := rdb.Info(t.Context(), "commandstats").Val()
	if rejected := redisconn.InfoValue(stats, "cmdstat_evalsha"); !strings.Contains(rejected, "rejected_calls=") || strings.Contains(rejected, "rejected_calls=0,") {
		t.Fatalf("no script call met LOADING: cmdstat_evalsha %q", rejected)
	}
	for name, s := range map[string]*client{"a": subA, "b": subB} {
		s.wait("news", taken[len(taken)-1])
		s.each(t, name, taken)
	}
}

// steadyPublisher publishes events e0, e1, … to "news" through its nodes in
// turn, as triggers from clients that retry would come, until finish.
type steadyPublisher struct {
	t          *testing.T
	stop       chan struct{}
	done       chan struct{}
	mu         sync.Mutex
	taken      []string    // answered without error, in order
	at         []time.Time // when each of taken was answered
	refused    refusals
	unexpected []error // failed otherwise
}

// refusals counts the publishes refused as unavailable, and when the
// first and the last were.
type refusals struct {
	n           int
	first, last time.Time
}

func startPublishing(t *testing.T, nodes []*node) *steadyPublisher {
	p := &steadyPublisher{t: t, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			case <-time.After(5 * time.Millisecond): // a client, not a spin
			}
			ev := fmt.Sprint("e", i)
			err := nodes[i%len(nodes)].hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: ev, Data: "{}"})
			now := time.Now()
			p.mu.Lock()
			switch {
			case err == nil:
				p.taken, p.at = append(p.taken, ev), append(p.at, now)
			case errors.Is(err, hub.ErrUnavailable):
				if p.refused.n == 0 {
					p.refused.first = now
				}
				p.refused.n++
				p.refused.last = now
			default:
				p.unexpected = append(p.unexpected, err)
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// takenSince is how many publishes were answered without error after since.
func (p *steadyPublisher) takenSince(since time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, at := range p.at {
		if at.After(since) {
			n++
		}
	}
	return n
}

// finish stops publishing and returns what was taken and refused; a
// publish that failed otherwise than unavailable fails the test.
func (p *steadyPublisher) finish() ([]string, refusals) {
	p.t.Helper()
	close(p.stop)
	<-p.done
	if len(p.unexpected) > 0 {
		p.t.Fatalf("publishes failed otherwise than unavailable: %v", p.unexpected)
	}
	return p.taken, p.refused
}

// each checks that the client got every one of taken on "news" once, and
// no event twice; who names it in failures.
func (cl *client) each(t *testing.T, who string, taken []string) {
	t.Helper()
	got := make(map[string]int)
	for _, e := range cl.events("news") {
		got[e]++
		if got[e] > 1 {
			t.Fatalf("subscriber on %s got %s twice", who, e)
		}
	}
	for _, e := range taken {
		if got[e] != 1 {
			t.Fatalf("subscriber on %s missed %s, answered 200 (of %d)", who, e, len(taken))
		}
	}
}

// A node whose address first leads to a replica (read-only) and then, for
// new connections, to the primary (a failover done before it started):
// its heartbeats fail on the replica, with READONLY, which makes the
// client leave those connections, and it joins the cluster through the
// primary once the address leads there. (No held-webhook look runs in the
// hour's hold, so the heartbeat is the node's only write.)
func TestANodeLeavesConnectionsThatAnswerReadOnly(t *testing.T) {
	primary, replica := primaryAndReplica(t)
	px := newCutProxy(t, replica.Addr())
	n := startNode(t, primary, fmt.Sprintf("ro%d:", time.Now().UnixNano()), "a", withURL(px.url()), func(o *Options) { o.Hold = time.Hour })
	rr := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rr.Close()
	wait.Until(t, "the replica refused a heartbeat", func() bool {
		return redisconn.InfoValue(rr.Info(t.Context(), "errorstats").Val(), "errorstat_READONLY") != ""
	})
	if n.c.Stats().Up {
		t.Fatal("a node on a read-only replica is up")
	}
	px.retarget(primary.Addr())
	wait.Until(t, "the node is up through the primary", func() bool { return n.c.Stats().Up })
}
