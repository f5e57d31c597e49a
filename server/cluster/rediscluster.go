package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/text"
)

// Redis Cluster. HERALD_REDIS_URL=redis-cluster://[:password@]host:port[,host:port…]
// names some nodes of a Redis Cluster (seeds: the client learns the rest
// from them). The channels are spread over ClusterShards shards as over a
// list of Redis URLs (shards.go), each shard's keys under a prefix with a
// hash tag of its own (herald:{s3.12}:…), so that all of one shard's keys
// are in one hash slot: its scripts, transactions and the reader's XREAD
// over its streams each run on one Redis node, as they must in a Redis
// Cluster. Every script call names a key of the prefix (Cluster.route), by
// which the client sends it to that node.
//
// The tags are chosen so that shard i's slot is in the i-th of
// ClusterShards equal parts of the 16,384 slots: redis-cli --cluster create
// gives each primary an equal run of slots, so the shards spread evenly
// over up to ClusterShards primaries. Moving slots (resharding, a failover
// to a replica) moves whole shards; the client follows MOVED answers.

const redisClusterScheme = "redis-cluster://"

// ClusterShards is the number of shards over a Redis Cluster, on every
// node: changing it moves every channel to another shard, so nodes with
// different counts cannot share a Redis Cluster.
const ClusterShards = 16

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// newRedisCluster returns the node's membership of a cluster over the
// Redis Cluster of opts.URL: ClusterShards shards over one client.
func newRedisCluster(log *zap.Logger, h *hub.Hub, opts Options) (*Cluster, error) {
	co, err := redisClusterOptions(opts.URL)
	if err != nil {
		return nil, err
	}
	if opts.CAFile != "" {
		return nil, errors.New("HERALD_REDIS_CA_FILE needs a rediss:// HERALD_REDIS_URL: a Redis Cluster is reached without TLS")
	}
	if err := checkClusterSlots(co); err != nil {
		return nil, err
	}
	rdb := redis.NewClusterClient(co)
	base := opts.Prefix
	if base == "" {
		base = DefaultPrefix
	}
	c := &Cluster{log: log.With(zap.String("node", opts.NodeID)), rdb: rdb, opts: opts, id: opts.NodeID, hub: h, p: base, shardCount: ClusterShards}
	for i, tag := range shardTags(ClusterShards) {
		o := opts
		o.Prefix = base + "{" + tag + "}:"
		s := newMember(log.With(zap.Int("shard", i+1)), h, o, rdb, i, ClusterShards)
		s.sharedRDB = true
		c.shards = append(c.shards, s)
	}
	c.redisLog = c.shards[len(c.shards)-1].redisLog
	return c, nil
}

// redisClusterOptions parses a redis-cluster:// URL into the cluster
// client's options. Errors name the setting and never print the password.
func redisClusterOptions(raw string) (*redis.ClusterOptions, error) {
	rest := strings.TrimSuffix(strings.TrimPrefix(raw, redisClusterScheme), "/")
	if strings.ContainsAny(rest, "/?#") {
		return nil, errors.New("HERALD_REDIS_URL: a redis-cluster:// URL is redis-cluster://[:password@]host:port[,host:port…], without a path, query or fragment")
	}
	password, addrs, err := seedHosts(rest, "redis-cluster://", "a Redis Cluster node's")
	if err != nil {
		return nil, err
	}
	return quick(&redis.UniversalOptions{
		Addrs:    addrs,
		Password: password,
		// Each shard's reader holds a connection in a blocking XREAD; the
		// shards of a Redis node must not take the pool the others need.
		PoolSize: 10*runtime.GOMAXPROCS(0) + ClusterShards,
	}).Cluster(), nil
}

// quick sets the timeouts of a Sentinel's or a Redis Cluster's client as
// redisOptions does one Redis's: a trigger waits on Redis, and an
// unreachable Redis must turn into a 503 quickly rather than hang.
func quick(o *redis.UniversalOptions) *redis.UniversalOptions {
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	o.MaxRetries, o.DialerRetries = 1, 1
	return o
}

// seedsURL reports a redis-sentinel:// or redis-cluster:// URL, whose
// commas separate hosts, not shards.
func seedsURL(raw string) bool {
	return strings.HasPrefix(raw, sentinelScheme) || strings.HasPrefix(raw, redisClusterScheme)
}

// redactURL is a Redis URL as it may be shown: without its password (and,
// for redis:// and rediss://, its query), as text.RedactURL shows a URL;
// the Go URL parser takes no list of hosts.
func redactURL(raw string) string {
	if !seedsURL(raw) {
		return text.RedactURL(raw)
	}
	scheme, rest, _ := strings.Cut(raw, "://")
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = rest[at+1:]
	}
	return scheme + "://" + rest
}

// redactURLs is HERALD_REDIS_URL as the node logs it at start: its URLs,
// each as redactURL shows it.
func redactURLs(raw string) []string {
	if seedsURL(raw) {
		return []string{redactURL(raw)}
	}
	var shown []string
	for _, u := range strings.Split(raw, ",") {
		shown = append(shown, redactURL(strings.TrimSpace(u)))
	}
	return shown
}

// seedHosts splits the "[:password@]host:port[,host:port…]" of a
// redis-sentinel:// or redis-cluster:// URL. Errors name the setting and
// never print any part of the password; what names the hosts in them.
func seedHosts(s, scheme, what string) (password string, addrs []string, err error) {
	userInfo := false
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		user, pw, _ := strings.Cut(s[:at], ":")
		if user != "" {
			return "", nil, fmt.Errorf("HERALD_REDIS_URL: a %s URL takes a password only (%s:password@…), not a user name", scheme, scheme)
		}
		password, s, userInfo = pw, s[at+1:], true
	}
	hosts := strings.Split(s, ",")
	for i, h := range hosts {
		host, port, err := net.SplitHostPort(strings.TrimSpace(h))
		if err == nil && host != "" && port != "" {
			addrs = append(addrs, net.JoinHostPort(host, port))
			continue
		}
		if userInfo {
			// After the last @: a host, never a part of the password.
			return "", nil, fmt.Errorf("HERALD_REDIS_URL: %q is not %s host:port", h, what)
		}
		// With no @, ":secret" may be a password whose host was
		// forgotten: it is named by its place only.
		return "", nil, fmt.Errorf("HERALD_REDIS_URL: host %d of %d is not %s host:port (a password comes first: %s:password@host:port)", i+1, len(hosts), what, scheme)
	}
	return password, addrs, nil
}

// checkClusterSlots asks the seeds, in turn, whether the Redis Cluster
// serves every slot: the start stops when the first that answers says it
// does not, or that it is not in a Redis Cluster. No answer is an outage,
// not a bad setting: the node starts outside the cluster and joins when it
// answers, as with one Redis.
func checkClusterSlots(co *redis.ClusterOptions) error {
	for _, addr := range co.Addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Password: co.Password, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := rdb.ClusterInfo(ctx).Result()
		cancel()
		rdb.Close()
		var nerr net.Error
		switch {
		case errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded):
			continue
		case err != nil:
			return fmt.Errorf("HERALD_REDIS_URL: the Redis Cluster node at %s: %v", addr, err)
		}
		fields := make(map[string]string)
		for _, line := range strings.Split(info, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				fields[k] = v
			}
		}
		assigned, _ := strconv.Atoi(fields["cluster_slots_assigned"])
		if fields["cluster_state"] != "ok" || assigned < clusterSlots {
			return fmt.Errorf("HERALD_REDIS_URL: the Redis Cluster of the node at %s serves %d of the %d slots (cluster_state:%s): every slot must be served before Herald starts on it",
				addr, assigned, clusterSlots, fields["cluster_state"])
		}
		return nil
	}
	return nil
}

// shardTags are the hash tags of n shards: shard i's is the first
// "s<i>.<k>" whose slot is in the i-th of n equal parts of the slots.
func shardTags(n int) []string {
	tags := make([]string, n)
	for i := range tags {
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n
		for k := 0; ; k++ {
			tag := "s" + strconv.Itoa(i) + "." + strconv.Itoa(k)
			if s := int(keySlot(tag)); s >= lo && s < hi {
				tags[i] = tag
				break
			}
		}
	}
	return tags
}

// keySlot is the Redis Cluster hash slot of a key without a hash tag (or
// of a tag): CRC16 (XMODEM) modulo 16,384.
func keySlot(key string) uint16 {
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % clusterSlots
}
