package cluster

import (
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/internal/recovery"
)

// receiveLoop reads the cluster's streams — the cluster-wide one, the
// node's wake-up stream and the streams of the slots it has subscriptions
// in (interest.go) — from where it stopped, and hands each stream's
// messages to the hub in the stream's order.
func (c *member) receiveLoop() {
	backoff := 50 * time.Millisecond
	var global, wake, gen string
	streams := make([]string, 0, 2*(Slots+2))
	for c.ctx.Err() == nil {
		if global == "" || c.readerLost.Swap(false) {
			var err error
			if global, wake, gen, err = c.position(global, wake, gen); err != nil {
				c.sleep(&backoff)
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
		slots, from := c.interest.reading()
		streams = append(streams[:0], c.key(globalStream), c.key("in:", c.id))
		for _, s := range slots {
			streams = append(streams, c.key(slotStreams[s]))
		}
		streams = append(streams, global, wake)
		streams = append(streams, from...)
		res, err := c.rdb.XRead(c.ctx, &redis.XReadArgs{Streams: streams, Count: 1000, Block: 2 * c.opts.Heartbeat}).Result()
		if err != nil {
			if isNil(err) || c.ctx.Err() != nil {
				continue // nothing new, or closing
			}
			c.readerLost.Store(true)
			c.sleep(&backoff)
			continue
		}
		backoff = 50 * time.Millisecond
		now := time.Now()
		for _, st := range res {
			if len(st.Messages) == 0 {
				continue
			}
			last := st.Messages[len(st.Messages)-1].ID
			slot := -1
			switch st.Stream {
			case streams[0]:
				global, slot = last, Slots
			case streams[1]:
				wake = last
				continue // only wakes the reader
			default:
				for i, s := range slots {
					if st.Stream == streams[2+i] {
						slot = s
						break
					}
				}
			}
			if slot < 0 {
				continue
			}
			for _, m := range st.Messages {
				payload, ok := m.Values["m"].(string)
				if !ok {
					continue
				}
				origin, seq := entryOrigin(m.Values)
				positions, _ := m.Values["p"].(string)
				c.handleEntry(&c.seen[slot], payload, origin, seq, positions, now)
			}
			if slot < Slots {
				c.interest.advance(slot, last)
			}
		}
		for i := range c.seen {
			c.seen[i].sweep(now)
		}
	}
}

// position returns where to read the cluster-wide and wake-up streams
// from: on after global and wake, or at the first call after their newest
// messages. It asks for a rebuild of the node's record when Redis lost its
// data (its generation changed).
func (c *member) position(global, wake, gen string) (string, string, string, error) {
	ctx, cancel := c.queryContext()
	defer cancel()
	now, err := c.generation(ctx)
	if err != nil {
		return global, wake, gen, err
	}
	switch {
	case global == "":
		pipe := c.rdb.Pipeline()
		g := pipe.XRevRangeN(ctx, c.key(globalStream), "+", "-", 1)
		w := pipe.XRevRangeN(ctx, c.key("in:", c.id), "+", "-", 1)
		if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
			return global, wake, gen, err
		}
		global, wake = newestID(g.Val()), newestID(w.Val())
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
	return global, wake, now, nil
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
	published, publishErrors, received, replayed atomic64
	resyncs, reaped, outages                     atomic64
	panics                                       recovery.Counter
}
