package cluster

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// armedWriter drains its connection at once when woken, until armed: then
// its next Wake panics, as a transport with a bug would.
type armedWriter struct {
	c     *hub.Conn
	armed atomic.Bool
}

func (w *armedWriter) Wake() {
	defer w.c.WriterDone()
	if w.armed.Swap(false) {
		panic("transport bug")
	}
	for {
		_, reason, idle := w.c.Drain(nil)
		if idle || reason != nil {
			return
		}
	}
}

func (w *armedWriter) Overflow() {}

// A panic while a node handles one message from the cluster costs that
// message only: it is recovered and counted (herald_panics_total's
// part="cluster" is Stats().Panics), and the node goes on delivering the
// messages after it.
func TestPanicHandlingAClusterMessageIsCountedAndDeliveryGoesOn(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	w := &armedWriter{}
	conn, err := ns[1].hub.Connect("app", hub.ConnectOptions{Writer: w})
	if err != nil {
		t.Fatal(err)
	}
	w.c = conn
	if err := ns[1].hub.SignIn(conn, "u", nil); err != nil {
		t.Fatal(err)
	}
	reader := ns[1].connect("app")
	reader.subscribe("news", nil)
	reader.wait("news", "pusher_internal:subscription_succeeded")

	// Node 1 asks for u's connections to be closed: on node 2 closing the
	// one connection wakes its writer, which panics.
	w.armed.Store(true)
	if err := ns[0].hub.Terminate("app", "u"); err != nil {
		t.Fatal(err)
	}
	if err := ns[0].hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "after", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	reader.wait("news", "after")
	wait.Until(t, "the panic to be counted", func() bool { return ns[1].c.Stats().Panics == 1 })
	if w.armed.Load() {
		t.Fatal("the terminate message never reached the connection's writer")
	}
	if got := conn.CloseCode(); got != hub.CloseTerminated.Code {
		t.Fatalf("close code %d, want %d", got, hub.CloseTerminated.Code)
	}
	if n := ns[0].c.Stats().Panics; n != 0 {
		t.Fatalf("node 1 counted %d panics", n)
	}
}

// Once in place, a node's reader only reads: with the cluster's generation
// made read-only (a Redis ACL), messages published after are still
// delivered (only a reader that lost its place looks at the generation
// again, which writes it when Redis has none).
func TestAReaderInPlaceOnlyReads(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	cl := ns[1].connect("app")
	cl.subscribe("news", nil)
	cl.wait("news", "pusher_internal:subscription_succeeded")
	// A node's first publish learns the generation it publishes under.
	if err := ns[0].hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "before", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	cl.wait("news", "before")
	prefix := prefix(ns[0].c)
	setACL(t, rs, "resetkeys", "%R~*", "~"+prefix, "~"+prefix+"[^g]*", "~"+prefix+"g[^e]*")
	// Two waits of each node ended since (a reader waits at most two
	// heartbeats for a message, then pings): the readers have gone round
	// their loop under the rule.
	pings := commandStats(t, rs, "ping", "calls")
	wait.Until(t, "the readers wait again", func() bool { return commandStats(t, rs, "ping", "calls") >= pings+4 })
	if err := ns[0].hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "after", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	cl.wait("news", "after")
}

// A reader whose reads fail waits before it tries again, twice as long each
// time (from 50 ms to 2 s), rather than in a loop: over the node's next 20
// heartbeats (2 s), Redis refuses it a handful of reads, not thousands; and
// once a read works, the next failure waits 50 ms again. A reader in place
// only listens: its connection is closed (as a network failure would) for
// it to read again, a catch-up that Redis refuses.
func TestAFailingReaderBacksOff(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "readfail:", "n1")
	wait.Until(t, "the node is up", func() bool { return n.c.Stats().Up })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	// Each heartbeat renews the node's record with one SET (in its
	// script), the one SET of an idle node: it counts the node's own time.
	// Twice: from the start, and again after reads that worked (the wait
	// starts from 50 ms again).
	var cl *client
	for round := 1; round <= 2; round++ {
		setACL(t, rs, "-xread")
		beats0, refused0 := commandStats(t, rs, "set", "calls"), commandStats(t, rs, "xread", "rejected_calls")
		if err := rdb.Do(t.Context(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		wait.Until(t, "20 heartbeats", func() bool { return commandStats(t, rs, "set", "calls")-beats0 >= 20 })
		if refused := commandStats(t, rs, "xread", "rejected_calls") - refused0; refused == 0 || refused > 15 {
			t.Fatalf("round %d: %d reads refused over 20 heartbeats, want a few (50 ms, 100 ms, … apart)", round, refused)
		}
		setACL(t, rs, "+xread")
		if cl == nil {
			cl = n.connect("app")
			cl.subscribe("news", nil)
			cl.wait("news", "pusher_internal:subscription_succeeded")
		}
		event := fmt.Sprintf("after-%d", round)
		if err := n.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: event, Data: "{}"}); err != nil {
			t.Fatal(err)
		}
		cl.wait("news", event)
	}
	// A reader that lost its place finds the cluster's generation as it
	// was: nothing to rebuild (the one rebuild is the node's first).
	if got := n.c.Stats().Resyncs; got != 1 {
		t.Fatalf("%d rebuilds of the node's record, want 1: Redis lost no data", got)
	}
}

// A stream entry that no node would write — a batch holding an empty
// message or a batch, fields that run past the entry, an unknown kind, a
// push that is not fields or lacks its id — is dropped, and what follows
// it is delivered.
func TestMalformedStreamEntriesAreDropped(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "garbled:", "n1")
	cl := n.connect("app")
	cl.subscribe("news", nil)
	cl.wait("news", "pusher_internal:subscription_succeeded")
	event := func(name string) string {
		return encodeEvent(hub.Message{AppID: "app", Channel: "news", Event: name, Data: "{}"})
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	stream := "garbled:" + slotStreams[slotOf("app", "news")]
	for _, payload := range []string{
		encodeFields(kindBatch, "", event("first"), encodeFields(kindBatch, event("nested"))),
		"B5:ab",
		"E3:app",
		"Qwhat",
		"",
		event("last"),
	} {
		appendEntry(t, rdb, n.c.(*member), stream, "m", payload)
		if payload == "" {
			// Pushes a node would not make: not fields, and fields
			// without the entry's id.
			channel := n.c.(*member).channel(slotStreams[slotOf("app", "news")])
			for _, push := range []string{"garbage", encodeFields(0, "m", event("unnumbered"))[1:]} {
				if err := rdb.Publish(t.Context(), channel, push).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	cl.wait("news", "last")
	if got := cl.events("news"); !slices.Equal(got, []string{"pusher_internal:subscription_succeeded", "first", "last"}) {
		t.Fatalf("events %v, want first and last only", got)
	}
}

// appendEntry appends an entry of the given fields and values to stream
// (its key) and pushes it on the stream's channel, as the scripts do.
func appendEntry(t *testing.T, rdb *redis.Client, c *member, stream string, values ...string) {
	t.Helper()
	f := fieldsOf(values...)
	id, err := rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: stream, Values: []any{"f", f}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Publish(t.Context(), stream+c.chanAt, string(appendField(nil, id))+f).Err(); err != nil {
		t.Fatal(err)
	}
}

// fieldsOf is a stream entry's field f (see prelude) of the given fields
// and values.
func fieldsOf(values ...string) string {
	var b []byte
	for _, v := range values {
		b = appendField(b, v)
	}
	return string(b)
}

// Pub/sub channels are the Redis server's, not a database's: two clusters
// on two databases of one Redis, under one prefix, do not hear each other
// (each stream's channel names its database).
func TestClustersOnTwoDatabasesOfOneRedisKeepApart(t *testing.T) {
	rs := testredis.Start(t)
	base := strings.TrimSuffix(rs.URL(), "/0")
	var subs []*client
	var nodes []*node
	for db := range 2 {
		n := startNode(t, rs, "apart:", fmt.Sprint("n", db), withURL(fmt.Sprintf("%s/%d", base, db)))
		cl := n.connect("app")
		cl.subscribe("news", nil)
		cl.wait("news", "pusher_internal:subscription_succeeded")
		nodes, subs = append(nodes, n), append(subs, cl)
	}
	for db, n := range nodes {
		for _, ev := range []string{"only", "last"} {
			if err := n.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: fmt.Sprint(ev, "-", db), Data: "{}"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for db, cl := range subs {
		cl.wait("news", fmt.Sprint("last-", db))
		want := []string{"pusher_internal:subscription_succeeded", fmt.Sprint("only-", db), fmt.Sprint("last-", db)}
		if got := cl.events("news"); !slices.Equal(got, want) {
			t.Errorf("database %d's subscriber got %v, want %v", db, got, want)
		}
	}
}

// A pushed entry is taken only past the last one taken: an equal id is the
// same entry again (pushed and read by a catch-up), and ids compare as
// numbers, not text.
func TestAnEntryIsTakenOnlyPastTheLastOne(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"5-1", "", true},
		{"5-1", "5-1", false},
		{"5-10", "5-9", true},
		{"5-9", "5-10", false},
		{"10-0", "9-99", true},
		{"9-99", "10-0", false},
		// An id that cannot be read is taken unless it is the last one.
		{"x", "5-1", true},
		{"5-1", "x", true},
		{"x", "x", false},
	} {
		if got := idAfter(tc.a, tc.b); got != tc.want {
			t.Errorf("idAfter(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// A wake-up of the reader (a join in a slot it does not read yet) is a
// sign to look at what it reads, not a stream's message: with a slot read
// already, the wake-ups of joins in the other slots are taken for none
// (nothing logged as malformed), and each join is answered.
func TestAWakeUpIsNotTakenForAMessage(t *testing.T) {
	rs := testredis.Start(t)
	core, logs := observer.New(zapcore.WarnLevel)
	n := startLoggedNode(t, rs, "wake:", "n1", zap.New(core))
	cl := n.connect("app")
	for _, s := range []int{1, 0, 2, 3} {
		ch := channelInSlot("app", s)
		cl.subscribe(ch, nil)
		cl.wait(ch, "pusher_internal:subscription_succeeded")
	}
	if got := logs.FilterMessage("malformed cluster message dropped").Len(); got != 0 {
		t.Fatalf("%d messages dropped as malformed, want none: a wake-up was taken for a slot's message", got)
	}
}

// A reader that waited two heartbeats for nothing checks its connection
// with a ping and, answered, keeps it: over three such waits, it listens
// on no channel again (a reader that took the ping's answer for a failure
// would listen anew, and catch every stream up, after each).
func TestAnIdleReaderKeepsItsConnection(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "idle:", "n1")
	cl := n.connect("app")
	cl.subscribe("news", nil)
	cl.wait("news", "pusher_internal:subscription_succeeded")
	listens, pings := commandStats(t, rs, "subscribe", "calls"), commandStats(t, rs, "ping", "calls")
	wait.Until(t, "three pings", func() bool { return commandStats(t, rs, "ping", "calls") >= pings+3 })
	if got := commandStats(t, rs, "subscribe", "calls") - listens; got != 0 {
		t.Fatalf("the idle reader listened %d more times, want 0", got)
	}
}

// A reader is in place only once Redis confirmed the channels it listens
// on: while Redis refuses its SUBSCRIBE (an ACL), the node does not take
// its reader for ready (its writer would rebuild the node's record, whose
// answers could not reach it), and it is once Redis takes it.
func TestAReaderIsReadyOnlyOnceItsChannelsAreConfirmed(t *testing.T) {
	rs := testredis.Start(t)
	setACL(t, rs, "-subscribe")
	n := startNode(t, rs, "confirmed:", "n1")
	// The reader sets itself ready before it goes on, so before its next
	// try: two refusals leave no room for a first one taken as listening.
	wait.Until(t, "two refused listens", func() bool { return commandStats(t, rs, "subscribe", "rejected_calls") >= 2 })
	if n.m().readerReady.Load() {
		t.Fatal("the reader took itself for ready while Redis refused its channels")
	}
	setACL(t, rs, "+subscribe")
	cl := n.connect("app")
	cl.subscribe("news", nil)
	cl.wait("news", "pusher_internal:subscription_succeeded")
}
