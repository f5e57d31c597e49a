package cluster

import (
	"context"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/cluster/redisconn"
	"github.com/heraldrt/herald/server/hub"
)

// Shards. Options.URL may list several Redis instances, comma-separated,
// the same list in the same order on every node: each one is a shard, and
// a channel lives on one of them (shardOf), with everything that concerns
// it — its streams, its subscriptions, presence members, cached event,
// held-back webhooks and its share of each node's record. The first shard
// is also the home of what is not a channel's: signed-in users and the
// watchlist, terminations, the nodes' connection counts and the console's
// relay.
//
// The node is a member of the cluster on each shard as it would be on one
// Redis (its own heartbeat, reader, writer, replay and rebuild per shard),
// and the node's router (router.go) sends each call to the shard it
// concerns; so a shard that fails or loses its data costs its channels
// only, and its recovery is the one of a single Redis. Cluster-wide answers that span
// channels (GET /channels) merge the shards' answers, which never overlap.
//
// Each shard records, in P shard, which shard of how many it is. A node
// whose list gives it another place is refused by that shard (it stays out
// of the cluster there, /readyz says why) while a node of the running list
// lives; once none does, the first node of the new list takes it over.

// newSharded returns the node's membership of a cluster over shards.
func newSharded(log *zap.Logger, h *hub.Hub, opts Options, shards []redisconn.Shard) *router {
	r := &router{log: log.With(zap.String("node", opts.NodeID)), opts: opts, hub: h}
	for i, shard := range shards {
		r.members = append(r.members, newShard(log.With(zap.Int("shard", i+1)), h, opts, shard, i, len(shards)))
	}
	r.p = r.members[0].p
	return r
}

// shardOf is the shard of an app's channel among n. It hashes as slotOf
// does, but takes other bits, so that the slots of a shard are not a
// fixed subset.
func shardOf(app, channel string, n int) int {
	if n <= 1 {
		return 0
	}
	return int((channelHash(app, channel) / Slots) % uint32(n))
}

// owns reports whether a channel's state is kept on this shard.
func (c *member) owns(app, channel string) bool {
	return shardOf(app, channel, c.shardCount) == c.shardIndex
}

// checkShard has this Redis take the node as its shard, or refuse it: the
// Redis is another shard of the running cluster (the node has another list
// of shards) and a node of that list lives.
func (c *member) checkShard(ctx context.Context) error {
	want := fmt.Sprintf("%d/%d", c.shardIndex+1, c.shardCount)
	k := c.key("shard")
	got, err := c.rdb.Get(ctx, k).Result()
	if err != nil && !isNil(err) {
		return err
	}
	if got == want {
		c.refused.Store(nil)
		return nil
	}
	if got != "" {
		live, err := c.otherNodesLive(ctx)
		if err != nil {
			return err
		}
		if live {
			err := fmt.Errorf("HERALD_REDIS_URL: %s is shard %s of the running cluster, but this node's list makes it shard %s: every node needs the same list of Redis URLs in the same order (to change it, stop every node first)",
				redisconn.Redact(c.opts.URL), got, want)
			c.refused.Store(&err)
			return err
		}
		c.log.Warn("this Redis was another shard of a cluster none of whose nodes live: it is this list's now", zap.String("was", got), zap.String("now", want))
	}
	if err := c.rdb.Set(ctx, k, want, 0).Err(); err != nil {
		return err
	}
	c.refused.Store(nil)
	return nil
}

// otherNodesLive reports whether a node other than this one has a live
// heartbeat on this Redis.
func (c *member) otherNodesLive(ctx context.Context) (bool, error) {
	nodes, err := c.rdb.SMembers(ctx, c.key("nodes")).Result()
	if err != nil {
		return false, err
	}
	nodes = slices.DeleteFunc(nodes, func(n string) bool { return n == c.id })
	if len(nodes) == 0 {
		return false, nil
	}
	keys := make([]string, len(nodes))
	for i, n := range nodes {
		keys[i] = c.key("node:", n)
	}
	n, err := c.rdb.Exists(ctx, keys...).Result()
	return n > 0, err
}
