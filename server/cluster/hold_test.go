package cluster

import (
	"fmt"
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
	if _, ok := n.c.releaseHeld(t.Context(), true); !ok {
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
	prefix := ns[0].c.p
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
