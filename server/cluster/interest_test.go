package cluster

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"testing"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// reads reports whether the node's reader reads the slot of app's channel.
func (n *node) reads(app, channel string) bool {
	in := &n.m().interest
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.from[slotOf(app, channel)] != ""
}

// A node receives the messages of a channel only while it has a subscriber
// of the channel's slot: the publisher's node and a node without
// subscribers read none of them; a node that subscribes gets what comes
// after, once; once its last subscriber of the slot is gone it reads the
// slot no more.
func TestANodeReadsOnlyTheSlotsOfItsSubscriptions(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 3)
	sub := ns[0].connect("app")
	sub.subscribe("news", nil)
	sub.wait("news", "pusher_internal:subscription_succeeded")
	publish := func(event string) {
		t.Helper()
		if err := ns[1].hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: event, Data: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	received := func() []int64 {
		out := make([]int64, len(ns))
		for i, n := range ns {
			out[i] = n.c.Stats().Received
		}
		return out
	}
	before := received()
	const burst = 50
	for i := range burst {
		publish(fmt.Sprint("a", i))
	}
	sub.wait("news", fmt.Sprint("a", burst-1))
	after := received()
	if got := after[0] - before[0]; got < burst {
		t.Fatalf("the subscriber's node received %d messages, want %d at least", got, burst)
	}
	for i := 1; i < 3; i++ {
		if ns[i].reads("app", "news") {
			t.Fatalf("node %d, without subscribers, reads the channel's slot", i+1)
		}
		if after[i] != before[i] {
			t.Fatalf("node %d, without subscribers, received %d messages of the channel", i+1, after[i]-before[i])
		}
	}

	// A subscriber on node 3 gets what is published after its subscription,
	// once, in order.
	late := ns[2].connect("app")
	late.subscribe("news", nil)
	late.wait("news", "pusher_internal:subscription_succeeded")
	for i := range 5 {
		publish(fmt.Sprint("b", i))
	}
	late.wait("news", "b4")
	if got, want := late.events("news"), []string{"pusher_internal:subscription_succeeded", "b0", "b1", "b2", "b3", "b4"}; !slices.Equal(got, want) {
		t.Fatalf("the late subscriber got %v, want %v", got, want)
	}

	// Its last subscriber gone, node 3 stops reading the slot.
	ns[2].hub.Remove(late.conn)
	wait.Until(t, "node 3 stops reading the channel's slot", func() bool { return !ns[2].reads("app", "news") })
	mid := received()
	for i := range burst {
		publish(fmt.Sprint("c", i))
	}
	sub.wait("news", fmt.Sprint("c", burst-1))
	if got := received()[2] - mid[2]; got != 0 {
		t.Fatalf("node 3 received %d messages after its last subscriber left", got)
	}
}

// A subscription refused because the presence channel is full is not
// counted as one of the node's: the node stops reading the slot, as the
// hub forgets the subscription without a Leave.
func TestARefusedSubscriptionIsNotInterest(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	for i := range 3 {
		cl := ns[0].connect("app")
		cl.subscribe("presence-full", &hub.Member{UserID: fmt.Sprint("u", i)})
		cl.wait("presence-full", "pusher_internal:subscription_succeeded")
	}
	late := ns[1].connect("app")
	late.subscribe("presence-full", &hub.Member{UserID: "u9"})
	late.wait("presence-full", "pusher:subscription_error")
	wait.Until(t, "node 2 stops reading the channel's slot", func() bool { return !ns[1].reads("app", "presence-full") })
	in := &ns[1].m().interest
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.entries) != 0 {
		t.Fatalf("the refused subscription is still counted: %v", in.entries)
	}
}

// Messages published together still go in few entries, now in their
// slots' streams: at most one entry per slot and per cache message a
// batch.
func TestPublishesArePackedPerSlot(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	sub := ns[1].connect("app")
	channels := []string{"c0", "c1", "c2", "c3"}
	for _, ch := range channels {
		sub.subscribe(ch, nil)
		sub.wait(ch, "pusher_internal:subscription_succeeded")
	}
	entries := func() int64 { return slotEntries(t, ns[0].c) }
	entries0 := entries()
	const publishers, batches, perBatch = 4, 20, 20
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for b := range batches {
				ms := make([]hub.Message, perBatch)
				for i := range ms {
					ms[i] = hub.Message{AppID: "app", Channel: channels[i%len(channels)], Event: fmt.Sprintf("p%d-%d", p, b*perBatch+i), Data: "{}"}
				}
				if err := ns[0].hub.Publish(ms...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	wait.Until(t, "every message", func() bool {
		for _, ch := range channels {
			if len(sub.events(ch)) != 1+publishers*batches*perBatch/len(channels) {
				return false
			}
		}
		return true
	})
	if n := entries() - entries0; n > int64(len(channels)*publishers*batches) || n == 0 {
		t.Fatalf("%d messages took %d stream entries", publishers*batches*perBatch, n)
	}
}

// slotEntries is how many entries the slot streams of c's Redis (of each
// of its shards) hold.
func slotEntries(t *testing.T, c Cluster) int64 {
	t.Helper()
	var n int64
	for _, m := range members(c) {
		for s := range Slots {
			k, err := m.rdb.XLen(t.Context(), m.key(slotStreams[s])).Result()
			if err != nil {
				t.Fatal(err)
			}
			n += k
		}
	}
	return n
}

// A channel's slot and shard come from the 32-bit FNV-1a hash of its app,
// a unit separator and its name: part of what Redis holds, so every
// version of Herald must spread channels alike.
func TestChannelHashIsFNV1a(t *testing.T) {
	for _, c := range [][2]string{{"app", "news"}, {"1", "presence-room"}, {"", ""}, {"a:1", "private-ü"}} {
		h := fnv.New32a()
		h.Write([]byte(c[0] + "\x1f" + c[1]))
		if got, want := channelHash(c[0], c[1]), h.Sum32(); got != want {
			t.Errorf("channelHash(%q, %q) = %#x, want %#x", c[0], c[1], got, want)
		}
	}
}

// The reader's bookkeeping, without Redis: the joins of a batch ask once
// for each slot the reader does not read yet, in their order, however many
// of them share it; a slot read goes on from the last entry taken, and a
// start leaves it there; a slot not read takes no entry; a slot whose last
// subscription is gone is read no more, and asked for again.
func TestInterestAsksOnceForEachSlotNotRead(t *testing.T) {
	var in interest
	if got, want := in.missing([]int{2, 0, 2, 3, 0}), []int{2, 0, 3}; !slices.Equal(got, want) {
		t.Fatalf("missing = %v, want %v", got, want)
	}
	ch := channelInSlot("app", 2)
	in.join(hub.Join{AppID: "app", Channel: ch, SocketID: "1.1", Token: 1})
	in.start(2, "5-0")
	in.start(2, "9-0")
	in.advance(2, "7-0")
	in.advance(3, "8-0")
	if got, want := in.missing([]int{3, 2, 0, 3}), []int{3, 0}; !slices.Equal(got, want) {
		t.Fatalf("missing = %v, want %v", got, want)
	}
	var listening [Slots]bool
	if !in.changed(&listening) {
		t.Fatal("a slot started is not taken for a change")
	}
	slots, from := in.reading()
	if !slices.Equal(slots, []int{2}) || !slices.Equal(from, []string{"7-0"}) {
		t.Fatalf("reading %v from %v, want [2] from [7-0]", slots, from)
	}
	listening[2] = true
	if in.changed(&listening) {
		t.Fatal("a change while the reader listens on what it reads")
	}
	in.leave("app", ch, "1.1")
	if !in.changed(&listening) {
		t.Fatal("a slot without subscriptions left is not taken for a change")
	}
	if slots, _ := in.reading(); len(slots) != 0 {
		t.Fatalf("reading %v after the last subscription left", slots)
	}
	if got, want := in.missing([]int{2}), []int{2}; !slices.Equal(got, want) {
		t.Fatalf("missing = %v, want %v", got, want)
	}
}
