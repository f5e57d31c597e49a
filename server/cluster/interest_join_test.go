package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// channelInSlot returns a channel of app whose messages go to slot s.
func channelInSlot(app string, s int) string {
	for i := 0; ; i++ {
		if ch := fmt.Sprint("chan-", i); slotOf(app, ch) == s {
			return ch
		}
	}
}

// readsNothing reports whether the node's reader reads no slot's stream.
func (n *node) readsNothing() bool {
	in := &n.m().interest
	in.mu.Lock()
	defer in.mu.Unlock()
	return !slices.ContainsFunc(in.from[:], func(id string) bool { return id != "" })
}

// An event published at once after a client got subscription_succeeded
// reaches it, on a node that read no slot of the channel before: the
// node reads the slot from before its answer. In every slot, whether the
// event comes from another node or from the subscriber's own.
func TestTheFirstEventAfterSubscriptionSucceededArrives(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	for s := range Slots {
		for _, from := range []int{1, 0} {
			t.Run(fmt.Sprintf("slot %d, published on node %d", s, from+1), func(t *testing.T) {
				ch := channelInSlot("app", s)
				if !ns[0].readsNothing() {
					t.Fatal("the subscriber's node reads a slot before the subscription")
				}
				sub := ns[0].connect("app")
				sub.subscribe(ch, nil)
				sub.wait(ch, "pusher_internal:subscription_succeeded")
				if err := ns[from].hub.Publish(hub.Message{AppID: "app", Channel: ch, Event: "first", Data: "{}"}); err != nil {
					t.Fatal(err)
				}
				sub.wait(ch, "first")
				if got, want := sub.events(ch), []string{"pusher_internal:subscription_succeeded", "first"}; !slices.Equal(got, want) {
					t.Fatalf("the subscriber got %v, want %v", got, want)
				}
				ns[0].hub.Remove(sub.conn)
				wait.Until(t, "node 1 stops reading every slot", ns[0].readsNothing)
			})
		}
	}
}

// Subscriptions made while the node rebuilds its record in Redis (their
// joins queued behind the rebuild, which waits for the record's lock) are
// answered once it is done, and their node reads their channels: a
// message published then reaches them. Both for a slot the node read
// before and for one it did not.
func TestJoinsQueuedDuringARebuildAreAnsweredAndRead(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	read, unread := channelInSlot("app", 0), channelInSlot("app", 1)
	before := ns[0].connect("app")
	before.subscribe(read, nil)
	before.wait(read, "pusher_internal:subscription_succeeded")
	if ns[0].reads("app", unread) {
		t.Fatalf("node 1 reads the slot of %s before any subscription there", unread)
	}

	// Another holder of node 1's lock (a node taking its record out) keeps
	// the rebuild waiting while the joins are queued.
	lock := ns[0].m().key("lock:", ns[0].c.ID())
	if err := ns[0].m().rdb.Set(t.Context(), lock, "the test", 0).Err(); err != nil {
		t.Fatal(err)
	}
	resyncs := ns[0].c.Stats().Resyncs
	ns[0].m().needResync.Store(true)
	late := ns[0].connect("app")
	late.subscribe(read, nil)
	late.subscribe(unread, nil)
	// Whether the writer takes the joins before the rebuild clears its
	// queue or after, none can be answered while the lock is held.
	if got := late.events(""); len(got) != 0 {
		t.Fatalf("a subscription was answered before the rebuild could run: %v", got)
	}
	if err := ns[0].m().rdb.Del(t.Context(), lock).Err(); err != nil {
		t.Fatal(err)
	}
	late.wait(read, "pusher_internal:subscription_succeeded")
	late.wait(unread, "pusher_internal:subscription_succeeded")
	if got := ns[0].c.Stats().Resyncs; got != resyncs+1 {
		t.Fatalf("%d rebuilds, want 1", got-resyncs)
	}
	for _, ch := range []string{read, unread} {
		if err := ns[1].hub.Publish(hub.Message{AppID: "app", Channel: ch, Event: "after", Data: "{}"}); err != nil {
			t.Fatal(err)
		}
		late.wait(ch, "after")
		if got, want := late.events(ch), []string{"pusher_internal:subscription_succeeded", "after"}; !slices.Equal(got, want) {
			t.Fatalf("on %s the late subscriber got %v, want %v", ch, got, want)
		}
	}
	before.wait(read, "after")
	if n := before.count(read, "after"); n != 1 {
		t.Fatalf("the subscriber from before the rebuild got the message %d times, want once", n)
	}
}

// A subscription made as the node starts, before its reader knows where
// to read from, is answered as soon as the reader does: the writer, which
// cannot rebuild the node's record before that, is woken by the reader
// rather than left to its next tick (a quarter of a heartbeat, here an
// hour) — after a rolling restart, clients subscribe at once.
func TestASubscriptionAsTheNodeStartsIsAnsweredWithoutATick(t *testing.T) {
	rs := testredis.Start(t)
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	slow := func(o *Options) { o.Heartbeat, o.NodeTTL = time.Hour, 2*time.Hour }
	other := startNode(t, rs, prefix, "n2", slow)
	n := startNode(t, rs, prefix, "n1", slow)
	sub := n.connect("app")
	sub.subscribe("news", nil)
	sub.wait("news", "pusher_internal:subscription_succeeded")
	if err := other.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "first", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	sub.wait("news", "first")
}
