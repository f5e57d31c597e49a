package cluster

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/internal/recovery"
)

// receiveLoop takes the cluster's messages — the cluster-wide stream's,
// and those of the slots where the node has subscriptions (interest.go) —
// and hands each stream's to the hub in the stream's order.
//
// Redis pushes each entry on its stream's channel as a script appends it
// (the prelude's xadd), and the loop listens on the channels of the
// streams it reads: a reading node costs Redis a push per entry, not a
// read command, and the node a read of its connection, not a command and
// its answer. The streams remain the record: whenever the loop may have
// missed entries — when it starts listening on a channel, at its start,
// after its connection failed, when it starts reading a slot — it reads
// the stream from the last entry it took (catchUp), and from then on takes
// a pushed entry only when its id is past that one: nothing is missed,
// nothing is taken twice.
func (c *member) receiveLoop() {
	backoff := 50 * time.Millisecond
	var (
		ps  *redis.PubSub
		gen string
		// last is, per stream (the slots', then the cluster-wide one's),
		// the id of the last entry taken.
		last [Slots + 1]string
		// listening: the slots whose channels ps listens on.
		listening [Slots]bool
	)
	defer func() {
		c.listening.Store(nil)
		if ps != nil {
			ps.Close()
		}
	}()
	streamOfChannel := map[string]int{c.channel(globalStream): Slots, c.channel(wakeStream(c.id)): -1}
	for s := range Slots {
		streamOfChannel[c.channel(slotStreams[s])] = s
	}
	lost := func(err error) {
		if c.ctx.Err() == nil {
			c.log.Debug("reading the cluster's messages failed; listening again", zap.Error(err))
		}
		if ps != nil {
			ps.Close()
			ps = nil
		}
		c.sleep(&backoff)
	}
	for c.ctx.Err() == nil {
		if ps == nil || c.readerLost.Swap(false) {
			if ps != nil {
				ps.Close()
				ps = nil
			}
			listening = [Slots]bool{}
			var err error
			if last[Slots], gen, err = c.position(last[Slots], gen); err != nil {
				c.sleep(&backoff)
				continue
			}
			if ps, err = c.listen(c.channel(wakeStream(c.id)), c.channel(globalStream)); err != nil {
				lost(err)
				continue
			}
			c.listening.Store(ps)
			// What the cluster-wide stream got while the loop did not listen.
			if err := c.catchUp(&last, []int{Slots}); err != nil {
				lost(err)
				continue
			}
			if !c.readerReady.Swap(true) {
				// The writer drops what it is given before the reader is
				// ready and rebuilds the node's record instead: it may
				// do so now, not at its next tick (a node's first
				// subscriptions come as soon as it serves).
				c.ops.wake()
			}
		}
		if err := c.follow(ps, &last, &listening, streamOfChannel); err != nil {
			lost(err)
			continue
		}
		msg, err := ps.ReceiveTimeout(c.ctx, 2*c.opts.Heartbeat)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() && c.ctx.Err() == nil {
				// Nothing for two heartbeats: make sure the connection
				// still answers (its answer comes as a message).
				if err := ps.Ping(c.ctx); err != nil {
					lost(err)
				}
				continue
			}
			lost(err)
			continue
		}
		backoff = 50 * time.Millisecond
		now := time.Now()
		if m, ok := msg.(*redis.Message); ok {
			c.take(m, &last, &listening, streamOfChannel, now)
		}
		for i := range c.seen {
			c.seen[i].sweep(now)
		}
	}
}

// listen returns a connection that listens on channels, once Redis has
// confirmed each.
func (c *member) listen(channels ...string) (*redis.PubSub, error) {
	ctx, cancel := c.queryContext()
	defer cancel()
	var ps *redis.PubSub
	if c.sharded {
		ps = c.rdb.SSubscribe(ctx, channels...)
	} else {
		ps = c.rdb.Subscribe(ctx, channels...)
	}
	if err := awaitListening(ctx, ps, len(channels), nil); err != nil {
		ps.Close()
		return nil, err
	}
	return ps, nil
}

// awaitListening waits for Redis to confirm n more channels listened on,
// handing the messages that come meanwhile to other (when not nil).
func awaitListening(ctx context.Context, ps *redis.PubSub, n int, other func(*redis.Message)) error {
	for n > 0 {
		msg, err := ps.Receive(ctx)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				n--
			}
		case *redis.Message:
			if other != nil {
				other(m)
			}
		}
	}
	return nil
}

// follow has ps listen on the channels of the slots the node reads, and
// no others: a slot it starts reading is read from where interest says
// (the newest entry before the joins that need it, or the last taken),
// and its stream caught up once its channel is listened on.
func (c *member) follow(ps *redis.PubSub, last *[Slots + 1]string, listening *[Slots]bool, streamOfChannel map[string]int) error {
	if !c.interest.changed(listening) {
		return nil
	}
	slots, from := c.interest.reading()
	var reading [Slots]bool
	var start []int
	var startChannels []string
	for i, s := range slots {
		reading[s] = true
		if !listening[s] {
			start = append(start, s)
			startChannels = append(startChannels, c.channel(slotStreams[s]))
			last[s] = from[i]
		}
	}
	var stop []string
	for s := range listening {
		if listening[s] && !reading[s] {
			listening[s] = false
			stop = append(stop, c.channel(slotStreams[s]))
		}
	}
	ctx, cancel := c.queryContext()
	defer cancel()
	if len(stop) > 0 {
		// The messages that come before Redis has it are not taken (take):
		// the slot is not listened on.
		if err := c.subscribe(ctx, ps, false, stop); err != nil {
			return err
		}
	}
	if len(start) == 0 {
		return nil
	}
	if err := c.subscribe(ctx, ps, true, startChannels); err != nil {
		return err
	}
	// A message of a slot being started that comes before Redis confirms
	// its channel was pushed to an earlier listening (stopped since): take
	// drops it, as the slot is not listened on yet, and the catch-up that
	// follows the confirmation reads its entry, appended before it was
	// pushed, in the stream's order. Taking it now would move the slot's
	// read position past entries before it. The other channels' messages
	// are taken as they come.
	err := awaitListening(ctx, ps, len(start), func(m *redis.Message) {
		c.take(m, last, listening, streamOfChannel, time.Now())
	})
	if err != nil {
		return err
	}
	for _, s := range start {
		listening[s] = true
	}
	return c.catchUp(last, start)
}

// subscribe has ps listen on channels (on), or stop listening, as the
// member's Redis wants it: shard channels on a Redis Cluster.
func (c *member) subscribe(ctx context.Context, ps *redis.PubSub, on bool, channels []string) error {
	switch {
	case on && c.sharded:
		return ps.SSubscribe(ctx, channels...)
	case on:
		return ps.Subscribe(ctx, channels...)
	case c.sharded:
		return ps.SUnsubscribe(ctx, channels...)
	}
	return ps.Unsubscribe(ctx, channels...)
}

// catchUp reads the given streams (by index: a slot, or Slots for the
// cluster-wide one) after the last entry taken from each, to their ends.
func (c *member) catchUp(last *[Slots + 1]string, streams []int) error {
	keys := make([]string, 0, 2*len(streams))
	for _, s := range streams {
		keys = append(keys, c.key(streamOf(s)))
	}
	for _, s := range streams {
		keys = append(keys, last[s])
	}
	for {
		ctx, cancel := c.queryContext()
		res, err := c.rdb.XRead(ctx, &redis.XReadArgs{Streams: keys, Count: catchUpPage, Block: -1}).Result()
		cancel()
		if isNil(err) {
			return nil
		}
		if err != nil {
			return err
		}
		now := time.Now()
		more := false
		for _, st := range res {
			for i, key := range keys[:len(streams)] {
				if st.Stream != key {
					continue
				}
				s := streams[i]
				for _, m := range st.Messages {
					e, ok := entryOf(m.Values)
					if !ok {
						// Taken all the same, with nothing to deliver: the
						// read goes on after it.
						c.log.Warn("malformed cluster message dropped", zap.String("id", m.ID))
					}
					c.takeEntry(s, m.ID, e, last, now)
				}
				keys[len(streams)+i] = last[s]
				more = more || len(st.Messages) == catchUpPage
			}
		}
		if !more {
			return nil
		}
	}
}

// catchUpPage is how many entries of a stream one read of catchUp takes.
const catchUpPage = 1000

// take takes a message pushed on a stream's channel: the entry's id, then
// its fields and values. A slot's message is taken only while its channel
// is listened on (confirmed, and not being stopped): one that comes before
// is in the catch-up that follows, one that comes after is of a slot no
// longer read.
func (c *member) take(m *redis.Message, last *[Slots + 1]string, listening *[Slots]bool, streamOfChannel map[string]int, now time.Time) {
	s, ok := streamOfChannel[m.Channel]
	if !ok || s < 0 || (s < Slots && !listening[s]) {
		return // the wake-up channel's, or of a slot not listened on
	}
	f, err := fields(m.Payload)
	if err != nil || len(f)%2 != 1 {
		c.log.Warn("malformed cluster message dropped", zap.Int("bytes", len(m.Payload)))
		return
	}
	c.takeEntry(s, f[0], entryOfFields(f[1:]), last, now)
}

// takeEntry hands stream s's entry id to the hub, unless it was taken
// already.
func (c *member) takeEntry(s int, id string, e entry, last *[Slots + 1]string, now time.Time) {
	if !idAfter(id, last[s]) {
		return
	}
	last[s] = id
	if s < Slots {
		c.interest.advance(s, id)
	}
	if e.msg == "" {
		return
	}
	origin, seq := entryOrigin(e.origin, e.seq)
	c.handleEntry(&c.seen[s], e.msg, origin, seq, e.positions, now)
}

// entry is a stream entry's fields: m the message, o its origin, s the
// number of its first message, p the positions of its events.
type entry struct{ msg, origin, seq, positions string }

func (e *entry) set(field, value string) {
	switch field {
	case "m":
		e.msg = value
	case "o":
		e.origin = value
	case "s":
		e.seq = value
	case "p":
		e.positions = value
	}
}

// entryFields is a stream entry's field f (see prelude) for a message
// published by origin, numbered from seq: its fields and values but the
// positions, which the script adds.
func entryFields(msg, origin string, seq uint64) string {
	b := make([]byte, 0, len(msg)+len(origin)+40)
	b = appendField(b, "m")
	b = appendField(b, msg)
	b = appendField(b, "o")
	b = appendField(b, origin)
	b = appendField(b, "s")
	b = appendField(b, strconv.FormatUint(seq, 10))
	return string(b)
}

// entryOf is the entry of a stream entry's values as go-redis reads them,
// and whether its field f could be read.
func entryOf(values map[string]any) (entry, bool) {
	s, _ := values["f"].(string)
	f, err := fields(s)
	if err != nil || len(f)%2 != 0 {
		return entry{}, false
	}
	return entryOfFields(f), true
}

// entryOfFields is the entry of fields and values, in pairs.
func entryOfFields(f []string) entry {
	var e entry
	for i := 0; i+1 < len(f); i += 2 {
		e.set(f[i], f[i+1])
	}
	return e
}

// idAfter reports whether stream id a comes after b (any id after "").
// Stream ids have the form of eventlog.IDs; one that cannot be read is
// taken unless it is b itself.
func idAfter(a, b string) bool {
	if b == "" {
		return true
	}
	ai, errA := eventlog.ParseID(a)
	bi, errB := eventlog.ParseID(b)
	if errA != nil || errB != nil {
		return a != b
	}
	return bi.Less(ai)
}

// position returns where to read the cluster-wide stream from: after
// global, or after its newest entry at the first call. It asks for a
// rebuild of the node's record when Redis lost its data (its generation
// changed).
func (c *member) position(global, gen string) (string, string, error) {
	ctx, cancel := c.queryContext()
	defer cancel()
	now, err := c.generation(ctx)
	if err != nil {
		return global, gen, err
	}
	switch {
	case global == "":
		msgs, err := c.rdb.XRevRangeN(ctx, c.key(globalStream), "+", "-", 1).Result()
		if err != nil && !isNil(err) {
			return global, gen, err
		}
		global = newestID(msgs)
	case now != gen:
		// Redis lost its data, the nodes' records included: rebuild this
		// node's record. Reading goes on after where it was in each stream:
		// the new streams' ids come from Redis's clock, so all of them are
		// after (going back to their start would deliver again what the
		// reader already took from them, when the client's retry hid the
		// restart).
		c.log.Warn("Redis lost its data: the node's record is rebuilt")
		c.needResync.Store(true)
		c.askReplay()
	}
	return global, now, nil
}

// newestID is the id of the newest of msgs (at most one, newest first), or
// 0-0 when there is none: where to read a stream from to read what comes
// next.
func newestID(msgs []redis.XMessage) string {
	if len(msgs) > 0 {
		return msgs[0].ID
	}
	return "0-0"
}

func (c *member) sleep(backoff *time.Duration) {
	select {
	case <-c.ctx.Done():
	case <-time.After(*backoff):
	}
	*backoff = min(2**backoff, 2*time.Second)
}

// handleEntry delivers the messages of one stream entry, whose origins
// seen tracks: itself, or those
// of a batch. An entry a node published (origin set) numbers its messages
// from seq, and only those this node has not delivered yet are: an entry
// published again after Redis lost its data may hold some it had.
// positions, when the entry's events were kept in their channels'
// history, are their ids, one per message, space-separated ("-" for one
// that was not).
func (c *member) handleEntry(seen *origins, payload, origin string, seq uint64, positions string, now time.Time) {
	fresh := func(i int) bool { return origin == "" || seen.fresh(origin, seq+uint64(i), now) }
	var ids []string
	if positions != "" {
		ids = strings.Fields(positions)
	}
	position := func(i int) string {
		if i < len(ids) && ids[i] != "-" {
			return ids[i]
		}
		return ""
	}
	if len(payload) == 0 || payload[0] != kindBatch {
		if fresh(0) {
			c.handle(payload, position(0))
		}
		return
	}
	f, err := fields(payload[1:])
	if err != nil {
		c.log.Warn("malformed cluster message dropped", zap.Int("bytes", len(payload)))
		return
	}
	for i, m := range f {
		if fresh(i) && len(m) > 0 && m[0] != kindBatch { // one level only
			c.handle(m, position(i))
		}
	}
}

// handle delivers one message, not a batch, an event with its position in
// its channel's history when it has one. A malformed one is logged and
// dropped; a panic while handling one is recovered, so that it costs that
// message only.
func (c *member) handle(payload, position string) {
	defer c.stats.panics.Recover(c.log, "cluster message")
	if len(payload) == 0 {
		return
	}
	c.stats.received.Add(1)
	if (payload[0] == kindSnapshot || payload[0] == kindSignIn) && !startsWithField(payload[1:], c.id) {
		return // an answer to another node, whose members need not be parsed here
	}
	f, err := fields(payload[1:])
	if err != nil {
		c.log.Warn("malformed cluster message dropped", zap.Int("bytes", len(payload)))
		return
	}
	switch payload[0] {
	case kindEvent:
		m, err := decodeEvent(f)
		if err != nil {
			c.log.Warn("malformed cluster event dropped")
			return
		}
		if position != "" {
			// A malformed id leaves the event without one: delivered, and a
			// recovery over it fails closed.
			m.Position, _ = eventlog.ParseID(position)
		}
		c.hub.Receive(m)
	case kindSnapshot:
		if len(f) == 0 || f[0] != c.id {
			return // another node's
		}
		s, err := decodeSnapshot(f[1:])
		if err != nil {
			c.log.Warn("malformed subscription answer dropped")
			return
		}
		c.interest.answered(s)
		c.hub.ReceiveSnapshot(s)
	case kindSignIn:
		if len(f) >= 3 && f[0] == c.id {
			c.hub.CompleteSignIn(f[1], f[2], f[3:])
		}
	case kindWatch:
		if len(f) == 3 {
			c.hub.UserOnline(f[0], f[1], f[2] == "1")
		}
	case kindTerminate:
		if len(f) == 2 {
			c.hub.TerminateUser(f[0], f[1])
		}
	}
}

// counters are the cluster's figures for the metrics.
type counters struct {
	published, publishCalls, publishErrors atomic64
	received, replayed                     atomic64
	resyncs, reaped, outages               atomic64
	panics                                 recovery.Counter
}
