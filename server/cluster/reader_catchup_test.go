package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// Tests of the pub/sub reader's catch-ups (receive.go): what a node missed
// while it did not listen is read from the streams, once, in order. Most
// of them append entries the node never hears of (an XADD without its
// push, as if the push was lost with the node's connection), then close
// the node's listening connection from Redis (CLIENT KILL), as a network
// failure would, and look at what the node delivers once it listens again.

// appendUnpushed appends entries to stream (its key), each of a message
// m only, without pushing them on the stream's channel: entries a node's
// reader missed.
func appendUnpushed(t *testing.T, rdb *redis.Client, stream string, msgs ...string) {
	t.Helper()
	pipe := rdb.Pipeline()
	for _, m := range msgs {
		pipe.XAdd(t.Context(), &redis.XAddArgs{Stream: stream, Values: []any{"f", fieldsOf("m", m)}})
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// listenAgain waits until each of channels has n listeners (the nodes'
// readers), closes every pub/sub connection of rdb's Redis, as a network
// failure would, and waits until each channel has n listeners again, all
// on new connections: the readers listen again, and have confirmed those
// channels (a slot's channel is listened on once the cluster-wide stream
// is caught up, and caught up itself right after).
func listenAgain(t *testing.T, rdb *redis.Client, n int64, channels ...string) {
	t.Helper()
	listened := listenedOn(t, rdb, n, channels...)
	listeners := func() []string {
		list, err := rdb.Do(t.Context(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, line := range strings.Split(list, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "id=") {
				ids = append(ids, f[0])
			}
		}
		return ids
	}
	wait.Until(t, "the readers listen", listened)
	killed := listeners()
	if err := rdb.Do(t.Context(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the readers listen again", func() bool {
		return !slices.ContainsFunc(listeners(), func(id string) bool { return slices.Contains(killed, id) }) && listened()
	})
}

// listenedOn is a condition for wait.Until: each of channels has n
// listeners.
func listenedOn(t *testing.T, rdb *redis.Client, n int64, channels ...string) func() bool {
	return func() bool {
		now, err := rdb.PubSubNumSub(t.Context(), channels...).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range channels {
			if now[ch] != n {
				return false
			}
		}
		return true
	}
}

// receivedExactly waits for the last of want on channel, then fails t
// unless cl got want there: those events, in that order, nothing else.
func receivedExactly(t *testing.T, cl *client, channel string, want ...string) {
	t.Helper()
	cl.wait(channel, want[len(want)-1])
	// A long list is told by its length and ends.
	show := func(events []string) string {
		if len(events) <= 8 {
			return fmt.Sprint(events)
		}
		return fmt.Sprintf("%d events %v … %v", len(events), events[:3], events[len(events)-3:])
	}
	if got := cl.events(channel); !slices.Equal(got, want) {
		t.Fatalf("the subscriber got %s on %s, want %s", show(got), channel, show(want))
	}
}

// newsReader starts a node under prefix on a Redis of its own, with a
// client subscribed to "news", and returns them with the node's member and
// a client of the Redis.
func newsReader(t *testing.T, prefix string) (*node, *member, *client, *redis.Client) {
	t.Helper()
	rs := testredis.Start(t)
	n := startNode(t, rs, prefix, "n1")
	cl := n.connect("app")
	cl.subscribe("news", nil)
	cl.wait("news", "pusher_internal:subscription_succeeded")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return n, n.m(), cl, rdb
}

// A node that listens again catches a slot's stream up to its end, page
// after page (catchUpPage entries each): the 1,500 entries it missed reach
// the subscriber, in order, before an event published after.
func TestACatchUpReadsEveryPageOfASlot(t *testing.T) {
	n, m, cl, rdb := newsReader(t, "pages:")

	const missed = catchUpPage + catchUpPage/2
	want := []string{"pusher_internal:subscription_succeeded"}
	msgs := make([]string, missed)
	for i := range msgs {
		want = append(want, fmt.Sprintf("e%04d", i))
		msgs[i] = encodeEvent(hub.Message{AppID: "app", Channel: "news", Event: want[i+1], Data: "{}"})
	}
	slot := slotStreams[slotOf("app", "news")]
	appendUnpushed(t, rdb, m.key(slot), msgs...)
	listenAgain(t, rdb, 1, m.channel(slot))
	if err := n.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "after", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	receivedExactly(t, cl, "news", append(want, "after")...)
}

// A catch-up of several slots at once (a node listening again) reads each
// slot's stream on from its own page: the 1,500 entries the second of two
// slots missed reach its subscriber, in order, before an event published
// after.
func TestACatchUpOfTwoSlotsReadsEveryPageOfEach(t *testing.T) {
	n, m, cl, rdb := newsReader(t, "twopages:")
	first, second := channelInSlot("app", 0), channelInSlot("app", 1)
	for _, ch := range []string{first, second} {
		cl.subscribe(ch, nil)
		cl.wait(ch, "pusher_internal:subscription_succeeded")
	}
	const missed = catchUpPage + catchUpPage/2
	want := []string{"pusher_internal:subscription_succeeded"}
	msgs := make([]string, missed)
	for i := range msgs {
		want = append(want, fmt.Sprintf("e%04d", i))
		msgs[i] = encodeEvent(hub.Message{AppID: "app", Channel: second, Event: want[i+1], Data: "{}"})
	}
	appendUnpushed(t, rdb, m.key(slotStreams[0]), encodeEvent(hub.Message{AppID: "app", Channel: first, Event: "missed", Data: "{}"}))
	appendUnpushed(t, rdb, m.key(slotStreams[1]), msgs...)
	listenAgain(t, rdb, 1, m.channel(slotStreams[0]), m.channel(slotStreams[1]))
	for _, ch := range []string{first, second} {
		if err := n.hub.Publish(hub.Message{AppID: "app", Channel: ch, Event: "after", Data: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	receivedExactly(t, cl, first, "pusher_internal:subscription_succeeded", "missed", "after")
	receivedExactly(t, cl, second, append(want, "after")...)
}

// An entry a catch-up cannot read (its field f is not fields and values)
// is dropped and the catch-up goes on after it: the events around a page
// of such entries (catchUpPage) reach the subscriber, in order.
func TestACatchUpDropsAnEntryItCannotRead(t *testing.T) {
	n, m, cl, rdb := newsReader(t, "unread:")
	slot := slotStreams[slotOf("app", "news")]
	event := func(name string) string {
		return encodeEvent(hub.Message{AppID: "app", Channel: "news", Event: name, Data: "{}"})
	}
	appendUnpushed(t, rdb, m.key(slot), event("before"))
	pipe := rdb.Pipeline()
	for range catchUpPage {
		pipe.XAdd(t.Context(), &redis.XAddArgs{Stream: m.key(slot), Values: []any{"f", "9:short"}})
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatal(err)
	}
	appendUnpushed(t, rdb, m.key(slot), event("past"))
	listenAgain(t, rdb, 1, m.channel(slot))
	if err := n.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "after", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	receivedExactly(t, cl, "news", "pusher_internal:subscription_succeeded", "before", "past", "after")
}

// A node that listens again catches the cluster-wide stream up too: a
// termination it missed closes the user's connection, before a later one.
func TestACatchUpReadsTheClusterWideStream(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "wide:", "n1")
	m := n.m()
	users := map[string]*client{}
	for _, u := range []string{"missed", "later"} {
		users[u] = n.connect("app")
		if err := n.hub.SignIn(users[u].conn, u, nil); err != nil {
			t.Fatal(err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	// The reader in place: it reads the stream on from an entry before
	// the one appended next.
	wait.Until(t, "the node listens", listenedOn(t, rdb, 1, m.channel(globalStream)))

	appendUnpushed(t, rdb, m.key(globalStream), encodeFields(kindTerminate, "app", "missed"))
	listenAgain(t, rdb, 1, m.channel(globalStream))
	if err := n.hub.Terminate("app", "later"); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the later termination", func() bool { return users["later"].conn.CloseCode() == hub.CloseTerminated.Code })
	if got := users["missed"].conn.CloseCode(); got != hub.CloseTerminated.Code {
		t.Fatalf("the missed termination's connection has close code %d, want %d", got, hub.CloseTerminated.Code)
	}
}

// A node that listens again reads a slot on from the last entry it took,
// not from where it started reading the slot: a member_added, which
// carries no origin to tell it was delivered, reaches a subscriber once.
func TestACatchUpReadsASlotFromTheLastEntryTaken(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	w := ns[1].connect("app")
	w.subscribe("presence-room", &hub.Member{UserID: "w"})
	w.wait("presence-room", "pusher_internal:subscription_succeeded")
	a := ns[0].connect("app")
	a.subscribe("presence-room", &hub.Member{UserID: "a"})
	w.wait("presence-room", "pusher_internal:member_added")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()

	listenAgain(t, rdb, 2, ns[1].m().channel(slotStreams[slotOf("app", "presence-room")]))
	if err := ns[0].hub.Publish(hub.Message{AppID: "app", Channel: "presence-room", Event: "after", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	receivedExactly(t, w, "presence-room", "pusher_internal:subscription_succeeded", "pusher_internal:member_added", "after")
}

// unstartedReader returns a member under prefix, on a Redis of its own,
// that is not started (its reader is driven by hand: follow), with a
// client of its hub subscribed to "news", and a client of the Redis. The
// hub is not in cluster mode: the member delivers what it takes to it.
func unstartedReader(t *testing.T, prefix string) (*member, *client, *redis.Client) {
	t.Helper()
	rs := testredis.Start(t)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	n := &node{t: t, hub: hub.New(log)}
	t.Cleanup(n.hub.Close)
	c, err := New(log, n.hub, Options{URL: rs.URL(), NodeID: "n1", Prefix: prefix, Settings: testSettings})
	if err != nil {
		t.Fatal(err)
	}
	m := c.(*member)
	t.Cleanup(func() { m.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { rdb.Close() })
	cl := n.connect("app")
	cl.subscribe("news", nil)
	return m, cl, rdb
}

// A slot the reader starts reading in the same round as it stops reading
// another is started in that round: once follow returns, the reader
// listens on the new slot's channel, not the old one's, and has caught the
// new slot's stream up (an entry appended before is delivered). A reader
// that stopped there would start it only after its next message or ping,
// up to two heartbeats later.
func TestAReaderStartsASlotInTheRoundItStopsAnother(t *testing.T) {
	m, cl, rdb := unstartedReader(t, "swap:")
	s := slotOf("app", "news")
	old := (s + 1) % Slots
	// The reader listens on old, which has no subscription left.
	ps, err := m.listen(m.channel(slotStreams[old]))
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	var last [Slots + 1]string
	var listening [Slots]bool
	listening[old] = true
	appendUnpushed(t, rdb, m.key(slotStreams[s]), encodeEvent(hub.Message{AppID: "app", Channel: "news", Event: "older", Data: "{}"}))
	m.interest.join(hub.Join{AppID: "app", Channel: "news", SocketID: cl.conn.SocketID(), Token: 1})
	m.interest.start(s, "0-0")

	streamOfChannel := map[string]int{m.channel(slotStreams[s]): s, m.channel(slotStreams[old]): old}
	if err := m.follow(ps, &last, &listening, streamOfChannel); err != nil {
		t.Fatal(err)
	}
	if !listening[s] || listening[old] {
		t.Fatalf("after one round the reader listens on slots %v, want slot %d only", listening, s)
	}
	receivedExactly(t, cl, "news", "pusher_internal:subscription_succeeded", "older")
}

// A pushed entry of a slot the reader starts reading, which comes before
// Redis confirms the slot's channel (pushed to an earlier listening), is
// not taken before the slot's catch-up: an older entry of the slot, after
// where the reader starts, that was never pushed, is delivered, and
// first.
//
// follow is driven by hand, on a member not started, as only then can the
// push be made to wait ahead of the confirmation.
func TestAPushAheadOfItsSlotsConfirmationWaitsForTheCatchUp(t *testing.T) {
	m, cl, rdb := unstartedReader(t, "ahead:")
	s := slotOf("app", "news")
	stream, channel := m.key(slotStreams[s]), m.channel(slotStreams[s])
	event := func(name string) string {
		return encodeEvent(hub.Message{AppID: "app", Channel: "news", Event: name, Data: "{}"})
	}

	// The reader reads the slot from its start, its connection still
	// listening on the slot's channel from before.
	m.interest.join(hub.Join{AppID: "app", Channel: "news", SocketID: cl.conn.SocketID(), Token: 1})
	m.interest.start(s, "0-0")
	ps, err := m.listen(channel)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	appendUnpushed(t, rdb, stream, event("older"))
	appendEntry(t, rdb, m, stream, "m", event("pushed"))

	var last [Slots + 1]string
	var listening [Slots]bool
	if err := m.follow(ps, &last, &listening, map[string]int{channel: s}); err != nil {
		t.Fatal(err)
	}
	receivedExactly(t, cl, "news", "pusher_internal:subscription_succeeded", "older", "pushed")
}

// A message of a channel already listened on that comes while the reader
// waits for Redis to confirm a slot it starts reading is taken as it comes:
// an event pushed on the cluster-wide stream's channel ahead of the
// confirmation is delivered, and the stream's read position moved past it
// (a reader that dropped it would never read it: that stream is caught up
// only when the reader listens anew).
//
// follow is driven by hand, on a member not started, as in
// TestAPushAheadOfItsSlotsConfirmationWaitsForTheCatchUp.
func TestAMessageWhileASlotIsConfirmedIsTaken(t *testing.T) {
	m, cl, rdb := unstartedReader(t, "meanwhile:")
	s := slotOf("app", "news")
	global := m.channel(globalStream)

	ps, err := m.listen(global)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	// Pushed before follow asks for the slot's channel: Redis sends it to
	// ps ahead of the confirmation.
	appendEntry(t, rdb, m, m.key(globalStream), "m", encodeEvent(hub.Message{AppID: "app", Channel: "news", Event: "meanwhile", Data: "{}"}))
	m.interest.join(hub.Join{AppID: "app", Channel: "news", SocketID: cl.conn.SocketID(), Token: 1})
	m.interest.start(s, "0-0")

	var last [Slots + 1]string
	var listening [Slots]bool
	if err := m.follow(ps, &last, &listening, map[string]int{global: Slots, m.channel(slotStreams[s]): s}); err != nil {
		t.Fatal(err)
	}
	if last[Slots] == "" {
		t.Fatal("the cluster-wide stream's message that came before the slot's confirmation was not taken")
	}
	receivedExactly(t, cl, "news", "pusher_internal:subscription_succeeded", "meanwhile")
}

// A node that starts reads the cluster-wide stream from its newest entry:
// what went to every node before it was up (terminations here) is not
// taken. It takes its subscription's answer and an event published after,
// and nothing else.
func TestANodeStartsReadingTheClusterWideStreamAtItsEnd(t *testing.T) {
	rs := testredis.Start(t)
	first := startNode(t, rs, "late:", "n1")
	wait.Until(t, "the first node is up", func() bool { return first.c.Stats().Up })
	for i := range 3 {
		if err := first.hub.Terminate("app", fmt.Sprint("gone", i)); err != nil {
			t.Fatal(err)
		}
	}
	late := startNode(t, rs, "late:", "n2")
	cl := late.connect("app")
	cl.subscribe("news", nil)
	// Answered: the late node's reader has read the cluster-wide stream
	// from where it starts (before it read the slot's).
	cl.wait("news", "pusher_internal:subscription_succeeded")
	if err := first.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "after", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	cl.wait("news", "after")
	if got := late.c.Stats().Received; got != 2 {
		t.Fatalf("the late node took %d messages, want 2: its subscription's answer and after", got)
	}
}
