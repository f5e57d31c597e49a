package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/cluster/redisconn"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/idempotency"
)

// router is one node's membership of a cluster over several Redis (a list
// of shards, shards.go) or over the shards of one Redis Cluster
// (rediscluster.go): a member on each shard, as on one Redis, and each
// call routed to the member of the channel it concerns (shardFor) or, for
// what is no channel's, to the first (home). Answers that span channels
// merge the members'.
type router struct {
	log     *zap.Logger
	opts    Options
	hub     *hub.Hub
	p       string // the key prefix: the shards'; over a Redis Cluster, the one without a shard's hash tag
	members []*member
	// shared is the Redis Cluster's client, which every member uses and
	// the router closes; nil over a list of shards, whose members each
	// have their own.
	shared     redis.UniversalClient
	releaseLog func() // with shared: the client's log (redisconn.Log)
	relay      atomic.Pointer[ConsoleRelay]
}

var _ Cluster = (*router)(nil)

// shardFor is the member of an app's channel.
func (r *router) shardFor(app, channel string) *member {
	return r.members[shardOf(app, channel, len(r.members))]
}

// home is the member of what is not a channel's.
func (r *router) home() *member { return r.members[0] }

// ID is the node's id.
func (r *router) ID() string { return r.opts.NodeID }

// Start joins the cluster on every shard.
func (r *router) Start() {
	r.hub.SetCluster(r)
	r.log.Info("cluster mode", zap.Strings("redis", redisconn.RedactAll(r.opts.URL)), zap.String("prefix", r.p))
	for _, m := range r.members {
		m.join()
	}
}

// Close leaves the cluster on every shard at once.
func (r *router) Close() error {
	errs := make([]error, len(r.members))
	var wg sync.WaitGroup
	for i, m := range r.members {
		wg.Go(func() { errs[i] = m.Close() })
	}
	wg.Wait()
	if r.shared != nil {
		errs = append(errs, r.shared.Close())
		r.releaseLog()
	}
	return errors.Join(errs...)
}

// Ready reports whether every shard answers, naming those that do not.
func (r *router) Ready(ctx context.Context) error {
	errs := make([]error, len(r.members))
	for i, m := range r.members {
		if err := m.Ready(ctx); err != nil {
			errs[i] = fmt.Errorf("shard %d: %w", i+1, err)
		}
	}
	return errors.Join(errs...)
}

// Publish publishes messages over the shards of their channels, each
// shard's in order; the messages of one shard, the common case, as on one
// Redis. An error means the messages of at least one shard may not have
// reached any node (those of the others may have).
func (r *router) Publish(ms ...hub.Message) error {
	if len(ms) == 0 {
		return nil
	}
	return r.perShard(ms, func(m *member, part []hub.Message) error { return m.Publish(part...) })
}

// publishKept has each shard's script publish and keep the messages of its
// channels, whose history is on the channel's shard (EventLog), as on one
// Redis.
func (r *router) publishKept(s *EventLogStore, p eventlog.Policy, now time.Time, ms []hub.Message) error {
	return r.perShard(ms, func(m *member, part []hub.Message) error { return m.publishKept(s, p, now, part) })
}

// perShard hands each shard's messages of ms, in order, to do with its
// member: at once when they are on several shards. It returns their
// errors joined.
func (r *router) perShard(ms []hub.Message, do func(m *member, part []hub.Message) error) error {
	by := make(map[int][]hub.Message)
	for _, m := range ms {
		k := shardOf(m.AppID, m.Channel, len(r.members))
		by[k] = append(by[k], m)
	}
	if len(by) == 1 {
		k := shardOf(ms[0].AppID, ms[0].Channel, len(r.members))
		return do(r.members[k], ms)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(r.members))
	for k, part := range by {
		wg.Go(func() { errs[k] = do(r.members[k], part) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Terminate publishes the request on the first shard, which every node
// reads.
func (r *router) Terminate(appID, userID string) error { return r.home().Terminate(appID, userID) }

// Join records a subscription on its channel's shard.
func (r *router) Join(j hub.Join) { r.shardFor(j.AppID, j.Channel).Join(j) }

// Leave records an unsubscription on its channel's shard.
func (r *router) Leave(l hub.Leave) { r.shardFor(l.AppID, l.Channel).Leave(l) }

// SignIn records a sign-in on the first shard.
func (r *router) SignIn(s hub.SignInRequest) { r.home().SignIn(s) }

// SignOut records the end of a signed-in connection on the first shard.
func (r *router) SignOut(s hub.SignOutRequest) { r.home().SignOut(s) }

// ConnectionsElsewhere is the first shard's count.
func (r *router) ConnectionsElsewhere(appID string) int {
	return r.home().ConnectionsElsewhere(appID)
}

// Channel returns the state of one channel, from its shard.
func (r *router) Channel(appID, name string) (hub.ChannelStats, error) {
	return r.shardFor(appID, name).Channel(appID, name)
}

// Channels merges the occupied channels of every shard.
func (r *router) Channels(appID, prefix string) ([]hub.ChannelStats, error) {
	var wg sync.WaitGroup
	parts := make([][]hub.ChannelStats, len(r.members))
	errs := make([]error, len(r.members))
	for i, m := range r.members {
		wg.Go(func() { parts[i], errs[i] = m.Channels(appID, prefix) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := slices.Concat(parts...)
	slices.SortFunc(out, func(a, b hub.ChannelStats) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// PresenceUsers returns a presence channel's users, from its shard.
func (r *router) PresenceUsers(appID, name string) ([]string, error) {
	return r.shardFor(appID, name).PresenceUsers(appID, name)
}

// CachedEvent returns a cache channel's last event, from its shard.
func (r *router) CachedEvent(appID, name string) (string, time.Duration, bool, error) {
	return r.shardFor(appID, name).CachedEvent(appID, name)
}

// Connections returns the first shard's count.
func (r *router) Connections(appID string) (int, error) { return r.home().Connections(appID) }

// SignedIn asks the first shard, where every sign-in is counted.
func (r *router) SignedIn(appID, userID string) (bool, error) {
	return r.home().SignedIn(appID, userID)
}

// Stats adds up the shards' figures; the cluster is up when every shard
// is.
func (r *router) Stats() Stats {
	out := Stats{Up: true, Nodes: r.home().nodes.Load(), Console: r.relay.Load().Stats()}
	for _, m := range r.members {
		st := m.Stats()
		out.Up = out.Up && st.Up
		out.Published += st.Published
		out.PublishCalls += st.PublishCalls
		out.PublishErrors += st.PublishErrors
		out.Received += st.Received
		out.Resyncs += st.Resyncs
		out.Replayed += st.Replayed
		out.Reaped += st.Reaped
		out.Outages += st.Outages
		out.Panics += st.Panics
	}
	return out
}

// ConsoleRelay relays console events over the first shard.
func (r *router) ConsoleRelay(deliver func(appID string, events []json.RawMessage, dropped int)) *ConsoleRelay {
	rl := r.home().ConsoleRelay(deliver)
	r.relay.Store(rl)
	return rl
}

// EventLog returns the store of the cluster's channel histories, each
// channel's on its shard under the shard's prefix (over a Redis Cluster,
// in the shard's hash slot): with its stream, so that the script that
// publishes an event appends it and a subscription's join reads it. An
// app's limits are split evenly over the shards.
func (r *router) EventLog(limits eventlog.Limits) *EventLogStore {
	s := newEventLogStore(func(app, channel string) (redis.Cmdable, string, int) {
		i := shardOf(app, channel, len(r.members))
		return r.members[i].rdb, r.members[i].p, i
	}, len(r.members), limits)
	s.cluster = r
	return s
}

// Idempotency returns the store of the cluster's Idempotency-Key headers:
// each scope's (an app's, a Push instance's) on the shard its id hashes
// to, under that shard's prefix (over a Redis Cluster, in the shard's hash
// slot), as a channel's keys are on the channel's shard.
func (r *router) Idempotency(opts idempotency.Options) *IdempotencyStore {
	return newIdempotencyStore(func(scope string) (redis.Scripter, string) {
		m := r.shardFor(scope, "")
		return m.rdb, m.p
	}, opts)
}
