package cluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/hub"
)

// queryTimeout bounds one query of the HTTP API to Redis.
const queryTimeout = 2 * time.Second

func (c *member) queryContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, queryTimeout)
}

func unavailable(err error) error { return fmt.Errorf("%w: %v", hub.ErrUnavailable, err) }

// Channel returns the state of one channel over the cluster.
func (c *member) Channel(appID, name string) (hub.ChannelStats, error) {
	ctx, cancel := c.queryContext()
	defer cancel()
	st := hub.ChannelStats{Name: name}
	pipe := c.rdb.Pipeline()
	subs := pipe.HGet(ctx, c.key("ch:", appID), name)
	var users *redis.IntCmd
	if hub.IsPresence(name) {
		users = pipe.HLen(ctx, c.key("pm:", appID, ":", name))
	}
	pipe.Exec(ctx)
	n, err := subs.Int()
	if err != nil && !isNil(err) {
		return st, unavailable(err)
	}
	st.Subscriptions, st.Occupied = n, n > 0
	if users != nil {
		if err := users.Err(); err != nil {
			return st, unavailable(err)
		}
		st.Users = int(users.Val())
	}
	return st, nil
}

// Channels returns the occupied channels of appID over the cluster whose
// names start with prefix, sorted by name.
func (c *member) Channels(appID, prefix string) ([]hub.ChannelStats, error) {
	ctx, cancel := c.queryContext()
	defer cancel()
	all, err := c.rdb.HGetAll(ctx, c.key("ch:", appID)).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([]hub.ChannelStats, 0, len(all))
	for name, v := range all {
		n, _ := strconv.Atoi(v)
		if n > 0 && strings.HasPrefix(name, prefix) {
			out = append(out, hub.ChannelStats{Name: name, Occupied: true, Subscriptions: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	pipe := c.rdb.Pipeline()
	users := make(map[int]*redis.IntCmd)
	for i, st := range out {
		if hub.IsPresence(st.Name) {
			users[i] = pipe.HLen(ctx, c.key("pm:", appID, ":", st.Name))
		}
	}
	if len(users) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, unavailable(err)
		}
		for i, cmd := range users {
			out[i].Users = int(cmd.Val())
		}
	}
	return out, nil
}

// PresenceUsers returns the distinct users of a presence channel over the
// cluster, sorted.
func (c *member) PresenceUsers(appID, name string) ([]string, error) {
	ctx, cancel := c.queryContext()
	defer cancel()
	ids, err := c.rdb.HKeys(ctx, c.key("pm:", appID, ":", name)).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	sort.Strings(ids)
	return ids, nil
}

// CachedEvent returns a cache channel's last event and its time to live.
func (c *member) CachedEvent(appID, name string) (string, time.Duration, bool, error) {
	ctx, cancel := c.queryContext()
	defer cancel()
	k := c.key("cache:", appID, ":", name)
	pipe := c.rdb.Pipeline()
	get := pipe.Get(ctx, k)
	ttl := pipe.PTTL(ctx, k)
	pipe.Exec(ctx)
	v, err := get.Result()
	if isNil(err) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, unavailable(err)
	}
	f, err := fields(v)
	if err != nil || len(f) != 2 || ttl.Val() <= 0 {
		return "", 0, false, nil
	}
	return f[1], ttl.Val(), true, nil
}

// Connections returns the connections of appID over the cluster: this
// node's now, the others' as of the last heartbeat.
func (c *member) Connections(appID string) (int, error) {
	if !c.healthy.Load() {
		return 0, hub.ErrUnavailable
	}
	return c.hub.Connections(appID) + c.ConnectionsElsewhere(appID), nil
}

// atomic64 is a counter.
type atomic64 = atomic.Int64

// Stats are the cluster's figures, for the metrics. Over shards, each
// count is the sum of the shards' own: a dead node reaped, a rebuild or an
// outage counts once for each shard it concerned.
type Stats struct {
	Up            bool  // Redis answered the last heartbeat
	Nodes         int64 // live nodes, this one included
	Published     int64 // messages published
	PublishCalls  int64 // script calls that carried them, replays left out (Redis's CPU goes by calls)
	PublishErrors int64 // publishes refused because Redis failed
	Received      int64 // messages received
	Resyncs       int64 // times the node's record was rebuilt
	Replayed      int64 // messages published again after Redis lost its data
	Reaped        int64 // dead nodes whose record this node took out
	Outages       int64 // times Redis stopped answering
	Panics        int64 // panics recovered while handling a message
	// Console is the console relay's counts (zero without a relay).
	Console RelayStats
}

// Stats returns the cluster's figures.
func (c *member) Stats() Stats {
	return Stats{
		Up:            c.healthy.Load(),
		Nodes:         c.nodes.Load(),
		Published:     c.stats.published.Load(),
		PublishCalls:  c.stats.publishCalls.Load(),
		PublishErrors: c.stats.publishErrors.Load(),
		Received:      c.stats.received.Load(),
		Resyncs:       c.stats.resyncs.Load(),
		Replayed:      c.stats.replayed.Load(),
		Reaped:        c.stats.reaped.Load(),
		Outages:       c.stats.outages.Load(),
		Panics:        c.stats.panics.Count(),
		Console:       c.relay.Load().Stats(),
	}
}
