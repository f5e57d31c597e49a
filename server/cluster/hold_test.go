package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// A node looks for due held-back webhooks when the earliest is due, never
// more often than every 5 ms nor less often than once a hold, once a hold
// while nothing is held, and every 100 ms while Redis does not answer.
func TestNextLookIsWhenTheEarliestHeldEventIsDue(t *testing.T) {
	const hold = 3 * time.Second
	for _, tt := range []struct {
		next     time.Duration
		answered bool
		want     time.Duration
	}{
		{200 * time.Millisecond, true, 200 * time.Millisecond},
		{0, true, 5 * time.Millisecond},
		{time.Millisecond, true, 5 * time.Millisecond},
		{10 * time.Second, true, hold},
		{-1, true, hold},
		{200 * time.Millisecond, false, 100 * time.Millisecond},
	} {
		if got := nextLook(tt.next, tt.answered, hold); got != tt.want {
			t.Errorf("nextLook(%v, %v, %v) = %v, want %v", tt.next, tt.answered, hold, got, tt.want)
		}
	}
}

// The release script's answer of when the earliest held event is due reads
// as milliseconds, and as none held when it is -1 or not a number.
func TestUntilDueReadsTheReleaseScriptsAnswer(t *testing.T) {
	for _, tt := range []struct {
		answer any
		want   time.Duration
	}{
		{"250", 250 * time.Millisecond},
		{"0", 0},
		{"-1", -time.Millisecond},
		{"", -1},
		{nil, -1},
	} {
		if got := untilDue(tt.answer); got != tt.want {
			t.Errorf("untilDue(%#v) = %v, want %v", tt.answer, got, tt.want)
		}
	}
}

// One release takes out every held-back webhook that is due, a page of
// 256 at a time, not only the first page.
func TestReleaseTakesEveryPage(t *testing.T) {
	rs := testredis.Start(t)
	// A hold of an hour: the node's own loop releases nothing meanwhile.
	n := startNode(t, rs, "pages:", "n1", func(o *Options) { o.Hold = time.Hour })
	const channels = 300
	cl := n.connect("app")
	for i := range channels {
		name := fmt.Sprintf("ch-%d", i)
		cl.subscribe(name, nil)
		cl.wait(name, "pusher_internal:subscription_succeeded")
		n.hub.Unsubscribe(cl.conn, name)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	wait.Until(t, "every channel_vacated held", func() bool {
		held, _ := rdb.ZCard(t.Context(), "pages:held").Result()
		return held == channels
	})
	if _, ok := n.m().releaseHeld(t.Context(), true); !ok {
		t.Fatal("releaseHeld: Redis did not answer")
	}
	vacated := 0
	for i := range channels {
		vacated += len(n.obs.kinds(fmt.Sprintf("ch-%d", i), hub.ChannelVacated))
	}
	if held, _ := rdb.ZCard(t.Context(), "pages:held").Result(); vacated != channels || held != 0 {
		t.Fatalf("one release: %d channel_vacated out, %d left held; want %d and 0", vacated, held, channels)
	}
}

// The last node to leave the cluster reports the webhooks still held back
// as it closes, as one node does at shutdown: no node is left to report
// them when they are due. A node that leaves others behind leaves them to
// the others.
func TestTheLastNodeToLeaveReportsWhatIsHeld(t *testing.T) {
	rs := testredis.Start(t)
	// A hold of an hour: nothing is reported but by Close.
	ns := cluster(t, rs, 2, func(o *Options) { o.Hold = time.Hour })
	wait.Until(t, "each node counts two", func() bool { return ns[0].c.Stats().Nodes == 2 && ns[1].c.Stats().Nodes == 2 })
	for i, n := range ns {
		name := fmt.Sprintf("ch-%d", i)
		cl := n.connect("app")
		cl.subscribe(name, nil)
		cl.wait(name, "pusher_internal:subscription_succeeded")
		n.hub.Unsubscribe(cl.conn, name)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	prefix := prefix(ns[0].c)
	wait.Until(t, "both channel_vacated held", func() bool { return rdb.ZCard(t.Context(), prefix+"held").Val() == 2 })

	if err := ns[1].c.Close(); err != nil {
		t.Fatal(err)
	}
	if held := rdb.ZCard(t.Context(), prefix+"held").Val(); held != 2 {
		t.Fatalf("%d held after a node left the other behind, want 2", held)
	}
	wait.Until(t, "node 1 counts one", func() bool { return ns[0].c.Stats().Nodes == 1 })
	if err := ns[0].c.Close(); err != nil {
		t.Fatal(err)
	}
	vacated := len(ns[0].obs.kinds("ch-0", hub.ChannelVacated)) + len(ns[0].obs.kinds("ch-1", hub.ChannelVacated))
	if held := rdb.ZCard(t.Context(), prefix+"held").Val(); vacated != 2 || held != 0 {
		t.Fatalf("the last node left: %d channel_vacated reported, %d left held; want 2 and 0", vacated, held)
	}
}

// loopClock is a release loop's timer that the test runs: each wait the
// loop asks for is recorded, and ends only when the test fires it.
type loopClock struct {
	mu    sync.Mutex
	waits []chan time.Time
	asked []time.Duration
	seen  int
}

func (lc *loopClock) after(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	lc.mu.Lock()
	lc.waits, lc.asked = append(lc.waits, ch), append(lc.asked, d)
	lc.mu.Unlock()
	return ch
}

// next waits for the loop to ask for its next wait and returns how long
// it asked for; fire ends that wait.
func (lc *loopClock) next(t *testing.T) time.Duration {
	t.Helper()
	var d time.Duration
	wait.Until(t, "the release loop asks for its next wait", func() bool {
		lc.mu.Lock()
		defer lc.mu.Unlock()
		if len(lc.asked) <= lc.seen {
			return false
		}
		d = lc.asked[lc.seen]
		lc.seen++
		return true
	})
	return d
}

// fire ends the last wait next returned, as if it had passed.
func (lc *loopClock) fire() {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.waits[lc.seen-1] <- time.Now()
}

// redisMillis is Redis's clock, in the milliseconds of the held set's scores.
func redisMillis(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	now, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// A channel_vacated is held for the node's hold by Redis's clock, and the
// node's release loop, whose clock the test runs, looks again when the
// earliest held event is due rather than a whole hold later: it reports
// the event at that look, then waits a hold with nothing held, and looks
// every holdTick while Redis does not answer. Redis's clock cannot be
// moved, so the test moves the held event's due time instead.
func TestAHeldWebhookGoesOutWhenItIsDue(t *testing.T) {
	rs := testredis.Start(t)
	clock := &loopClock{}
	const hold = time.Hour
	n := startNode(t, rs, "due:", "n1", func(o *Options) { o.Hold, o.after = hold, clock.after })
	// Nothing held, Redis answering: the loop looks again in a hold (its
	// first look may have found Redis not answering yet).
	wait.Until(t, "the node is up", func() bool { return n.c.Stats().Up })
	d := clock.next(t)
	if d == holdTick {
		clock.fire()
		d = clock.next(t)
	}
	if d != hold {
		t.Fatalf("with nothing held the loop looks again in %v, want a hold (%v)", d, hold)
	}

	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	cl := n.connect("app")
	cl.subscribe("ch", nil)
	cl.wait("ch", "pusher_internal:subscription_succeeded")
	before := redisMillis(t, rdb)
	n.hub.Unsubscribe(cl.conn, "ch")
	var held []redis.Z
	wait.Until(t, "the channel_vacated held", func() bool {
		held = rdb.ZRangeWithScores(t.Context(), "due:held", 0, -1).Val()
		return len(held) == 1
	})
	after := redisMillis(t, rdb)
	if due := int64(held[0].Score); due < before+hold.Milliseconds() || due > after+hold.Milliseconds() {
		t.Fatalf("held until %d, want a hold (%v) after the leave, between %d and %d by Redis's clock", due, hold, before+hold.Milliseconds(), after+hold.Milliseconds())
	}
	member := held[0].Member

	// Ten minutes of the hold left at the loop's next look: it looks again
	// in ten minutes, not in a hold.
	const left = 10 * time.Minute
	rdb.ZAddXX(t.Context(), "due:held", redis.Z{Score: float64(redisMillis(t, rdb) + left.Milliseconds()), Member: member})
	clock.fire()
	if d = clock.next(t); d > left || d < left-time.Minute {
		t.Fatalf("with the earliest held event due in %v the loop looks again in %v", left, d)
	}
	if got := n.obs.kinds("ch", hub.ChannelVacated); len(got) != 0 {
		t.Fatalf("%v reported before it was due", got)
	}

	// Due: the next look reports it, and nothing is left held.
	rdb.ZAddXX(t.Context(), "due:held", redis.Z{Score: float64(redisMillis(t, rdb) - 1), Member: member})
	clock.fire()
	if d = clock.next(t); d != hold {
		t.Fatalf("with nothing held the loop looks again in %v, want a hold (%v)", d, hold)
	}
	if got := n.obs.kinds("ch", hub.ChannelVacated); len(got) != 1 {
		t.Fatalf("the look after the event was due reported %v, want one channel_vacated", got)
	}
	if left := rdb.ZCard(t.Context(), "due:held").Val(); left != 0 {
		t.Fatalf("%d held after the release", left)
	}

	// Redis gone: the loop looks again every holdTick.
	rs.Stop()
	wait.Until(t, "the node sees Redis gone", func() bool { return !n.c.Stats().Up })
	clock.fire()
	if d = clock.next(t); d != holdTick {
		t.Fatalf("with Redis gone the loop looks again in %v, want %v", d, holdTick)
	}
}
