package cluster

import (
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/internal/recovery"
)

// receiveLoop reads the cluster's stream from where it stopped and hands
// each message to the hub in the stream's order.
func (c *Cluster) receiveLoop() {
	backoff := 50 * time.Millisecond
	last, gen := "", ""
	for c.ctx.Err() == nil {
		if last == "" || c.readerLost.Swap(false) {
			var err error
			if last, gen, err = c.position(last, gen); err != nil {
				c.sleep(&backoff)
				continue
			}
			c.readerReady.Store(true)
		}
		res, err := c.rdb.XRead(c.ctx, &redis.XReadArgs{Streams: []string{c.key("msgs"), last}, Count: 1000, Block: 2 * c.opts.Heartbeat}).Result()
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
			for _, m := range st.Messages {
				last = m.ID
				payload, ok := m.Values["m"].(string)
				if !ok {
					continue
				}
				origin, seq := entryOrigin(m.Values)
				c.handleEntry(payload, origin, seq, now)
			}
		}
		c.seen.sweep(now)
	}
}

// position returns where to read the stream from: on after last, or at the
// first call after the stream's newest message. It asks for a rebuild of
// the node's record when Redis lost its data (its generation changed).
func (c *Cluster) position(last, gen string) (string, string, error) {
	ctx, cancel := c.queryContext()
	defer cancel()
	now, err := c.generation(ctx)
	if err != nil {
		return last, gen, err
	}
	switch {
	case last == "":
		msgs, err := c.rdb.XRevRangeN(ctx, c.key("msgs"), "+", "-", 1).Result()
		if err != nil {
			return last, gen, err
		}
		last = "0-0"
		if len(msgs) > 0 {
			last = msgs[0].ID
		}
	case now != gen:
		// Redis lost its data, the nodes' records included: rebuild this
		// node's record. Reading goes on after last: the new stream's ids
		// come from Redis's clock, so all of it is after last (going back to
		// its start would deliver again what the reader already took from
		// it, when the client's retry hid the restart).
		c.log.Warn("Redis lost its data: the node's record is rebuilt")
		c.needResync.Store(true)
		c.askReplay()
	}
	return last, now, nil
}

func (c *Cluster) sleep(backoff *time.Duration) {
	select {
	case <-c.ctx.Done():
	case <-time.After(*backoff):
	}
	*backoff = min(2**backoff, 2*time.Second)
}

// handleEntry delivers the messages of one stream entry: itself, or those
// of a batch. An entry a node published (origin set) numbers its messages
// from seq, and only those this node has not delivered yet are: an entry
// published again after Redis lost its data may hold some it had.
func (c *Cluster) handleEntry(payload, origin string, seq uint64, now time.Time) {
	fresh := func(i int) bool { return origin == "" || c.seen.fresh(origin, seq+uint64(i), now) }
	if len(payload) == 0 || payload[0] != kindBatch {
		if fresh(0) {
			c.handle(payload)
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
			c.handle(m)
		}
	}
}

// handle delivers one message, not a batch. A malformed one is logged and dropped; a
// panic while handling one is recovered, so that it costs that message
// only.
func (c *Cluster) handle(payload string) {
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
