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

// On a channel of more than hub.CountThrottleAbove subscribers, a change
// within hub.CountThrottleEvery of the last count sent is held back: the
// script answers when its window ends, by Redis's clock, and the node
// sends the count then (deferCount), not before — the flush script sends
// nothing while the window lasts, so a flush a moment early would lose the
// count for good.
func TestAHeldBackSubscriptionCountIsSentWhenItsWindowEnds(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "heldcount:", "n1")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	countOf := func(k int) string { return fmt.Sprintf(`{"subscription_count":%d}`, k) }
	first := n.connect("counted")
	first.subscribe("room", nil)
	for range hub.CountThrottleAbove - 1 {
		n.connect("counted").subscribe("room", nil)
	}
	wait.Until(t, "the first subscriber hears the count of 100", func() bool {
		got := first.datas("pusher_internal:subscription_count")
		return len(got) > 0 && got[len(got)-1] == countOf(hub.CountThrottleAbove)
	})
	// The last count went out 1 s before Redis's now, by what the script
	// keeps: the window ends 4 s from now (CountThrottleEvery is 5 s) —
	// the next subscription is held back. The 4 s are the test's only
	// margin: the check that nothing went out at once must run within
	// them, which a stalled machine could miss, so they are generous.
	now, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	last := now.Add(-hub.CountThrottleEvery + 4*time.Second).UnixMilli()
	if err := rdb.Set(t.Context(), n.m().key("cnt:counted:room"), last, 0).Err(); err != nil {
		t.Fatal(err)
	}
	over := n.connect("counted")
	over.subscribe("room", nil)
	over.wait("room", "pusher_internal:subscription_succeeded")
	if got := first.datas("pusher_internal:subscription_count"); got[len(got)-1] != countOf(hub.CountThrottleAbove) {
		t.Fatalf("the count %s went out at once, within the window", got[len(got)-1])
	}
	wait.Until(t, "the held-back count of 101 heard", func() bool {
		got := first.datas("pusher_internal:subscription_count")
		return got[len(got)-1] == countOf(hub.CountThrottleAbove+1)
	})
	if got := len(n.obs.kinds("room", hub.SubscriptionCount)); got != hub.CountThrottleAbove+1 {
		t.Fatalf("%d subscription_count webhook events, want one per count sent, %d", got, hub.CountThrottleAbove+1)
	}
}
