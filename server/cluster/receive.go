package cluster

import (
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/internal/recovery"
)

// receiveLoop reads the cluster's channel and the node's own, and hands each
// message to the hub in the order Redis sent them. The pub/sub connection
// reconnects by itself; every (re)subscription asks for a resync, since
// answers sent while it was down are lost.
func (c *Cluster) receiveLoop() {
	ps := c.rdb.Subscribe(c.ctx, c.key("msgs"), c.key("to:", c.id))
	defer ps.Close()
	backoff := 50 * time.Millisecond
	for c.ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(c.ctx, 2*c.opts.Heartbeat)
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Quiet: make sure the connection still works.
				if err := ps.Ping(c.ctx); err == nil {
					continue
				}
			}
			c.needResync.Store(true)
			select {
			case <-c.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				c.needResync.Store(true)
			}
		case *redis.Message:
			c.stats.received.Add(1)
			c.handle(m.Payload)
		}
	}
}

// handle delivers one message. A malformed one is logged and dropped; a
// panic while handling one is recovered, so that it costs that message
// only.
func (c *Cluster) handle(payload string) {
	defer c.stats.panics.Recover(c.log, "cluster message")
	if len(payload) == 0 {
		return
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
		s, err := decodeSnapshot(f)
		if err != nil {
			c.log.Warn("malformed subscription answer dropped")
			return
		}
		c.hub.ReceiveSnapshot(s)
	case kindSignIn:
		if len(f) >= 2 {
			c.hub.CompleteSignIn(f[0], f[1], f[2:])
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
	published, publishErrors, received atomic64
	resyncs, reaped, outages           atomic64
	panics                             recovery.Counter
}
