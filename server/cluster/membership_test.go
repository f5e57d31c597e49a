package cluster

import (
	"slices"
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

// A node's record lock is released by its unlock, at once: the next lock
// of it is taken, not refused as held. Held, it expires by itself within
// 30 seconds: a node that dies holding it (rebuilding its record, or
// taking out another's) does not keep that record locked for good.
func TestUnlockReleasesTheRecordLock(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "locks:", "n1")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	for i := range 2 {
		unlock, err := n.m().lock(t.Context(), "other", false)
		if err != nil {
			t.Fatalf("lock %d: %v", i+1, err)
		}
		ttl, err := rdb.PTTL(t.Context(), n.m().key("lock:", "other")).Result()
		if err != nil || ttl <= 0 || ttl > 30*time.Second {
			t.Fatalf("a held record lock's time to live is %v (%v), want up to 30s", ttl, err)
		}
		if _, err := n.m().lock(t.Context(), "other", false); err != errLocked {
			t.Fatalf("a lock held: %v, want errLocked", err)
		}
		unlock()
	}
}

// A heartbeat that finds the node's record and the cluster's generation as
// the node left them asks for no rebuild: over many heartbeats the node
// rebuilds its record only the once it joined.
func TestSteadyHeartbeatsRebuildNothing(t *testing.T) {
	rs := testredis.Start(t)
	// A record that outlives any stall of a busy machine: it cannot expire
	// between two heartbeats here.
	n := startNode(t, rs, "steady:", "n1", func(o *Options) { o.Heartbeat, o.NodeTTL = 20*time.Millisecond, time.Minute })
	wait.Until(t, "the node joined", func() bool { return n.c.Stats().Up && n.c.Stats().Resyncs == 1 })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	// Each heartbeat renews the record's time to live: count renewals.
	beats, last := 0, time.Duration(0)
	wait.Until(t, "ten heartbeats", func() bool {
		ttl, err := rdb.PTTL(t.Context(), "steady:node:n1").Result()
		if err == nil && ttl > last {
			beats++
		}
		last = ttl
		return beats > 10
	})
	if got := n.c.Stats().Resyncs; got != 1 {
		t.Fatalf("%d rebuilds over ten steady heartbeats, want the one at the start", got)
	}
}

// Changes the writer writes without a failure ask for no rebuild and warn
// of nothing: subscriptions made after the node's record is built are
// written as changes, and the record is rebuilt only the once it joined.
func TestWrittenChangesRebuildNothing(t *testing.T) {
	rs := testredis.Start(t)
	core, logs := observer.New(zapcore.WarnLevel)
	// A record that cannot expire between two heartbeats of a stalled node.
	n := startLoggedNode(t, rs, "written:", "n1", zap.New(core), func(o *Options) { o.NodeTTL = time.Minute })
	wait.Until(t, "the node's record built", func() bool { return n.c.Stats().Resyncs == 1 })
	cl := n.connect("app")
	// One after the other: the writer is done with the first (and with
	// what it does after) before it takes the second.
	for _, ch := range []string{"news", "sport"} {
		cl.subscribe(ch, nil)
		cl.wait(ch, "pusher_internal:subscription_succeeded")
	}
	if warned := logs.All(); len(warned) > 0 {
		t.Fatalf("writing two subscriptions warned: %s %v", warned[0].Message, warned[0].ContextMap())
	}
	if got := n.c.Stats().Resyncs; got != 1 {
		t.Fatalf("%d rebuilds, want the one at the start", got)
	}
}

// A Redis that answers reads but refuses writes (out of memory) is an
// outage: the node's heartbeat cannot be renewed, so the node is not up
// until Redis takes writes again.
func TestRedisRefusingWritesIsAnOutage(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "oom:", "n1")
	wait.Until(t, "the node is up", func() bool { return n.c.Stats().Up })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := rdb.ConfigSet(t.Context(), kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(t, "the node is down", func() bool { return !n.c.Stats().Up })
	if err := rdb.ConfigSet(t.Context(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the node is up again", func() bool { return n.c.Stats().Up })
}

// A rebuild of the node's record that fails while Redis is otherwise
// healthy is retried after a wait that doubles each time (100 ms, 200 ms,
// 400 ms …), not at once and in a loop, from 100 ms again after a rebuild
// that succeeded; and once Redis takes it, the node rebuilds its record.
func TestFailedRebuildsBackOff(t *testing.T) {
	rs := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	// A rebuild starts with the lock on the node's record, backoff:lock:n1,
	// which nothing else of a lone node writes: with the locks read-only,
	// heartbeats, publishes and reads still work.
	lockReadOnly := []string{"resetkeys", "%R~*", "~backoff:", "~backoff:[^l]*", "~backoff:l[^o]*"}
	setACL(t, rs, lockReadOnly...)
	core, logs := observer.New(zapcore.WarnLevel)
	c := startLoggedNode(t, rs, "backoff:", "n1", zap.New(core)).c
	const failed = "rebuilding the node's record in Redis failed; retrying"
	for round := 1; round <= 2; round++ {
		wait.Until(t, "three more failed rebuilds", func() bool { return logs.FilterMessage(failed).Len() >= 3*round })
		for i, entry := range logs.FilterMessage(failed).All()[3*(round-1) : 3*round] {
			if got, want := entry.ContextMap()["in"], (100*time.Millisecond)<<i; got != want {
				t.Errorf("round %d, failed rebuild %d: retried in %v, want %v", round, i+1, got, want)
			}
		}
		if got := c.Stats().Resyncs; got != int64(round-1) {
			t.Fatalf("round %d: %d rebuilds done while Redis refused them", round, got)
		}
		setACL(t, rs, "allkeys")
		wait.Until(t, "the record rebuilt", func() bool { return c.Stats().Resyncs == int64(round) })
		// Then again: a heartbeat that finds the node's record gone asks
		// for a rebuild.
		setACL(t, rs, lockReadOnly...)
		if err := rdb.Del(t.Context(), "backoff:node:n1").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// A node that closes takes its own record out of Redis as it leaves: its
// heartbeat and its subscriptions are gone when Close returns, without a
// warning, rather than when its heartbeat would have expired.
func TestALeavingNodeTakesItsRecordOut(t *testing.T) {
	rs := testredis.Start(t)
	// The node alone: another would take its record out too, once its
	// heartbeat is gone, and Close then leaves it to that node.
	core, logs := observer.New(zapcore.WarnLevel)
	n := startLoggedNode(t, rs, "leave:", "n2", zap.New(core), func(o *Options) { o.NodeTTL = time.Minute })
	c := n.c
	// A node leaves tidily when it knows Redis answers (it is up).
	wait.Until(t, "the node is up", func() bool { return c.Stats().Up })
	cl := n.connect("app")
	cl.subscribe("news", nil)
	cl.wait("news", "pusher_internal:subscription_succeeded")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if got := rdb.Exists(t.Context(), "leave:node:n2", "leave:ns:n2").Val(); got != 2 {
		t.Fatalf("%d of the node's heartbeat and subscriptions in Redis, want both", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	n.c = nil // closed
	for _, key := range []string{"leave:node:n2", "leave:ns:n2"} {
		if rdb.Exists(t.Context(), key).Val() != 0 {
			t.Errorf("%s left in Redis after Close", key)
		}
	}
	if warned := logs.All(); len(warned) > 0 {
		t.Fatalf("leaving warned: %s %v", warned[0].Message, warned[0].ContextMap())
	}
}

// Close does not wait for the reader's wait for a message to end by
// itself (two heartbeats): here an hour's, which would outlast the test.
func TestCloseWakesTheReader(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "wake:", "n1", func(o *Options) { o.Heartbeat, o.NodeTTL = time.Hour, 2*time.Hour })
	wait.Until(t, "the node is up and its reader listening", func() bool {
		return n.c.Stats().Up && listeners(t, rs) == 1
	})
	if err := n.c.Close(); err != nil {
		t.Fatal(err)
	}
}

// A node that dies is taken out within 6 s, the README's figure, checked
// by its two parts on the defaults rather than by waiting: its heartbeat
// lives 5 s from its last renewal (its PTTL), and every other node looks
// for dead nodes every second (its heartbeat's ticker, ticked here) and
// takes out one whose heartbeat is gone at the first look that finds it
// gone — never while it lives. So a node is out at most 5 s and a look
// after its last beat.
func TestADeadNodeIsTakenOutWithinSixSeconds(t *testing.T) {
	rs := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	const ttl, look = 5 * time.Second, time.Second
	defaults := func(clock *tickClock) func(*Options) {
		return func(o *Options) { o.Heartbeat, o.NodeTTL, o.ticker = 0, 0, clock.ticker }
	}
	// The doomed node beats once, as it joins, and never again: its
	// heartbeat ticker is the test's, never ticked.
	start := time.Now()
	doomed := startNode(t, rs, "dies:", "doomed", defaults(newTickClock(look)))
	left, err := rdb.PTTL(t.Context(), "dies:node:doomed").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Renewed within the time since start, for ttl: as much left, less
	// that time (and a millisecond of rounding).
	if since := time.Since(start); left > ttl || left < ttl-since-time.Millisecond {
		t.Fatalf("the heartbeat lives %v after a beat within %v, want %v", left, since, ttl)
	}

	clock := newTickClock(look)
	watcher := startNode(t, rs, "dies:", "watcher", defaults(clock))
	if got := clock.asked(t, 1); !slices.Equal(got, []time.Duration{look}) {
		t.Fatalf("the watcher's loops tick every %v, want a look every %v", got, look)
	}
	member := watcher.connect("app")
	member.subscribe("presence-room", &hub.Member{UserID: "w"})
	member.wait("presence-room", "pusher_internal:subscription_succeeded")
	gone := doomed.connect("app")
	gone.subscribe("presence-room", &hub.Member{UserID: "gone"})
	member.wait("presence-room", "pusher_internal:member_added")

	doomed.crash()
	// Its heartbeat lives (for a minute now, however slow the machine):
	// looks take nothing out. (Made here, where each is done when it
	// returns, while the watcher's loop waits for a tick.)
	if err := rdb.PExpire(t.Context(), "dies:node:doomed", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		watcher.m().heartbeat()
	}
	wait.Until(t, "no take-out under way", func() bool {
		idle := true
		watcher.m().reaping.Range(func(any, any) bool { idle = false; return false })
		return idle
	})
	if n := watcher.c.Stats().Reaped; n != 0 || member.count("presence-room", "pusher_internal:member_removed") != 0 {
		t.Fatalf("a node whose heartbeat lives was taken out (%d reaped)", n)
	}
	// Its heartbeat gone, as ttl after its last beat: the loop's next
	// look, at its ticker's tick, takes it out, with nothing more ticked.
	if err := rdb.Del(t.Context(), "dies:node:doomed").Err(); err != nil {
		t.Fatal(err)
	}
	clock.tick(t, look, 1)
	member.wait("presence-room", "pusher_internal:member_removed")
	wait.Until(t, "the dead node counted as taken out", func() bool { return watcher.c.Stats().Reaped == 1 })
}

// Taking out a dead node's record warns that the node died and nothing
// else: a node that finds the record locked by another node (taking it
// out already) leaves it to that one without a warning, and takes it out
// itself once the lock is gone, without warning that doing so failed.
func TestTakingOutADeadNodeWarnsOnlyOfItsDeath(t *testing.T) {
	rs := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	core, logs := observer.New(zapcore.WarnLevel)
	// The heartbeat's ticker is the test's, never ticked: the node looks
	// for dead nodes when the test calls its heartbeat.
	n := startLoggedNode(t, rs, "reapwarn:", "n1", zap.New(core), func(o *Options) { o.ticker = newTickClock(o.Heartbeat).ticker })
	idle := func() bool {
		idle := true
		n.m().reaping.Range(func(any, any) bool { idle = false; return false })
		return idle
	}
	// A node listed in the cluster without a heartbeat, whose record
	// another node has locked.
	if err := rdb.SAdd(t.Context(), "reapwarn:nodes", "ghost").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(t.Context(), "reapwarn:lock:ghost", "other/1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	n.m().heartbeat()
	wait.Until(t, "the look at the locked record done", idle)
	if got := n.c.Stats().Reaped; got != 0 {
		t.Fatalf("a dead node whose record another node holds locked was taken out (%d reaped)", got)
	}
	if err := rdb.Del(t.Context(), "reapwarn:lock:ghost").Err(); err != nil {
		t.Fatal(err)
	}
	n.m().heartbeat()
	wait.Until(t, "the dead node taken out", func() bool { return n.c.Stats().Reaped == 1 && idle() })
	const failed = "taking out a dead node's record failed; retrying at the next heartbeat"
	if got := logs.FilterMessage(failed).Len(); got != 0 {
		t.Errorf("%d warnings that taking out the dead node failed, want none", got)
	}
	if got := logs.FilterMessage("a node's heartbeat expired: its clients are gone from the cluster").Len(); got != 1 {
		t.Errorf("%d warnings that the node died, want 1", got)
	}
}

// A node's heartbeat carries its count of connections of every app it has
// some of, and the other nodes count each as that app's: here three apps'
// (one, two and three connections).
func TestHeartbeatsCountEachAppsConnections(t *testing.T) {
	ns := cluster(t, testredis.Start(t), 2)
	apps := map[string]int{"a1": 1, "a2": 2, "a3": 3}
	for app, n := range apps {
		for range n {
			if _, err := ns[0].hub.Connect(app, hub.ConnectOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	wait.Until(t, "the other node counts each app's connections", func() bool {
		for app, n := range apps {
			if ns[1].c.ConnectionsElsewhere(app) != n {
				return false
			}
		}
		return true
	})
}
