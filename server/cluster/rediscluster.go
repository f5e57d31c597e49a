package cluster

import (
	"strconv"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/cluster/redisconn"
	"github.com/heraldrt/herald/server/hub"
)

// Redis Cluster. HERALD_REDIS_URL=redis-cluster://[:password@]host:port[,host:port…]
// names some nodes of a Redis Cluster (seeds: the client learns the rest
// from them). The channels are spread over ClusterShards shards as over a
// list of Redis URLs (shards.go), each shard's keys under a prefix with a
// hash tag of its own (herald:{s3.12}:…), so that all of one shard's keys
// are in one hash slot: its scripts, transactions, the shard channels its
// entries are published on (SPUBLISH, SSUBSCRIBE) and the reader's catch-up
// XREAD over its streams each run on one Redis node, as they must in a
// Redis Cluster. Every script call names a key of the prefix (member.route), by
// which the client sends it to that node.
//
// The tags are chosen so that shard i's slot is in the i-th of
// ClusterShards equal parts of the 16,384 slots: redis-cli --cluster create
// gives each primary an equal run of slots, so the shards spread evenly
// over up to ClusterShards primaries. Moving slots (resharding, a failover
// to a replica) moves whole shards; the client follows MOVED answers.

// ClusterShards is the number of shards over a Redis Cluster, on every
// node: changing it moves every channel to another shard, so nodes with
// different counts cannot share a Redis Cluster.
const ClusterShards = 16

// newRedisCluster returns the node's membership of a cluster over the
// Redis Cluster of shard: ClusterShards shards over one client.
func newRedisCluster(log *zap.Logger, h *hub.Hub, opts Options, shard redisconn.Shard) *router {
	// The shards' readers listen on connections outside the pool (go-redis
	// keeps subscriptions apart) and take one from it only to catch up.
	rdb := shard.Client(redisconn.ClientOptions{})
	base := opts.Prefix
	if base == "" {
		base = DefaultPrefix
	}
	r := &router{log: log.With(zap.String("node", opts.NodeID)), shared: rdb, opts: opts, hub: h, p: base}
	for i, tag := range shardTags(ClusterShards) {
		o := opts
		o.Prefix = base + "{" + tag + "}:"
		m := newMember(log.With(zap.Int("shard", i+1)), h, o, rdb, i, ClusterShards)
		m.sharedRDB = true
		r.members = append(r.members, m)
	}
	r.releaseLog = redisconn.Log(r.log.Named("redis"))
	return r
}

// shardTags are the hash tags of n shards: shard i's is the first
// "s<i>.<k>" whose slot is in the i-th of n equal parts of the slots.
func shardTags(n int) []string {
	tags := make([]string, n)
	for i := range tags {
		lo, hi := i*redisconn.ClusterSlots/n, (i+1)*redisconn.ClusterSlots/n
		for k := 0; ; k++ {
			tag := "s" + strconv.Itoa(i) + "." + strconv.Itoa(k)
			if s := int(redisconn.KeySlot(tag)); s >= lo && s < hi {
				tags[i] = tag
				break
			}
		}
	}
	return tags
}
