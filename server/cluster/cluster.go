// Package cluster lets several Herald nodes serve one set of Channels apps
// over Redis: it implements hub.Cluster.
//
// Every message (a trigger, a client event, a member joining) is appended
// to a Redis stream that the nodes read, the publisher's node included, so
// each node delivers each message once, to its own sockets, in the order
// Redis saw them. The script that appends it also publishes it on the
// stream's pub/sub channel, by which Redis pushes it to the nodes that
// listen; the stream is the record, from which a node whose connection
// dropped for a moment reads on from where it stopped. What a channel is
// across the cluster (subscriptions, presence members, the cached event,
// signed-in users) is kept in Redis, changed only by atomic scripts, and
// recorded per node, so that a surviving node can take out the share of
// one that died.
//
// What Redis holds, what each guarantee rests on, and how a node that dies
// or a Redis that does not answer is borne are told once, in the README.md
// beside this file; what cluster mode costs, measured, in
// scripts/README.md.
//
// The cluster has two roles, each a Cluster (the interface the node uses):
// a member is the node on one Redis — a single address, a Sentinel
// group's primary, or one shard — and does all the work above; a router
// is the node over several shards, a member on each, and sends each call
// to the member of the channel it concerns. New returns a member for one
// Redis or Sentinel group, a router for a list of shards or a Redis
// Cluster. Recovery needs a channel's stream and its app's history on one
// Redis: a member recovers, a router does not.
//
// The package, file by file:
//
//   - cluster.go: Options, the Cluster interface, New, and the member: its
//     Start, Close, Ready, and the pipeline every call goes through.
//   - router.go, shards.go, rediscluster.go: the router, and the shards it
//     routes over — a list of Redis URLs (a channel's shard by a hash of
//     it; a member's place in the list, checked in Redis), a Redis Cluster
//     (sixteen shards over one client, each under a hash tag of its own).
//   - redisconn (a package of its own): the Redis clients, from every form
//     of the URL (one Redis, shards, Sentinel, Redis Cluster), with their
//     timeouts, the start's checks, the watch that notices another Redis
//     server behind an address and the client's log.
//   - publish.go, codec.go: the publish loop, which batches a node's
//     messages into one script call per shard and publishes its last ones
//     again after Redis lost data; how messages are encoded.
//   - receive.go, interest.go: the read loop over the streams of the slots
//     in which the node has subscribers (node interest), into the hub.
//   - state.go, scripts.go: the node's record in Redis, written in order by
//     one writer and rebuilt from the hub after an outage (resync); the Lua
//     scripts that change the cluster's state, and its keys.
//   - membership.go, hold.go: heartbeats and the taking out of dead nodes;
//     the webhook hold (member_removed, channel_vacated) kept in Redis, a
//     cluster node's webhook.Hold (WebhookHold).
//   - query.go, online.go: the answers over the cluster (channels, presence
//     users, cached events, connections, signed-in users).
//   - eventlog.go, histlua.go, idempotency.go, consolerelay.go: the stores
//     the node keeps in Redis in cluster mode — channel history
//     (EventLogStore), Idempotency-Key headers (IdempotencyStore) — and the
//     debug console's relay between the nodes.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
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

// Defaults of Options.
const (
	DefaultPrefix    = "herald:"
	DefaultHeartbeat = time.Second
	DefaultNodeTTL   = 5 * time.Second
	// DefaultHold is the webhook hold of channel_vacated and member_removed,
	// the dispatcher's on one node.
	DefaultHold = hub.WebhookHold
)

// AppSettings are what the cluster needs to know of an app.
type AppSettings struct {
	SubscriptionCount  bool // pusher_internal:subscription_count events are on
	MaxPresenceMembers int  // 0: no cap
}

// Options configure a Cluster.
type Options struct {
	// URL is the Redis URL: redis:// or rediss://, with an optional
	// password and database number.
	URL string
	// CAFile is a PEM file of CA certificates trusted for the rediss://
	// connection to Redis, in addition to the system's roots
	// (HERALD_REDIS_CA_FILE): for a Redis whose certificate a private CA
	// signed. It must go with a rediss:// URL; empty, the system's roots
	// alone are trusted.
	CAFile string
	// NodeID names this node; a random one when empty.
	NodeID string
	// Prefix starts every Redis key and channel; DefaultPrefix when empty.
	// Clusters sharing one Redis need different prefixes.
	Prefix string
	// Heartbeat is how often the node renews its heartbeat and looks for
	// dead nodes; NodeTTL is how long a heartbeat lasts, after which the
	// node counts as dead and its share is taken out.
	Heartbeat, NodeTTL time.Duration
	// Hold is how long channel_vacated and member_removed webhooks wait, in
	// Redis, for the channel or member to come back on any node (which
	// cancels both); DefaultHold when 0.
	Hold time.Duration
	// Settings returns an app's settings (the zero value for an unknown app).
	Settings func(appID string) AppSettings
	// ReplayWindow and ReplayBytes bound what the node keeps of what it
	// published, to publish again should Redis lose its data before every
	// node read it: DefaultReplayWindow and DefaultReplayBytes when 0.
	ReplayWindow time.Duration
	ReplayBytes  int

	// after is the release loop's timer (hold.go): time.After, unless a
	// test runs the loop on a clock of its own.
	after func(time.Duration) <-chan time.Time
	// ticker is the heartbeat's (every) and the console relay's
	// (consolerelay.go): a time.Ticker of every, unless a test ticks it
	// itself.
	ticker func(every time.Duration) (ticks <-chan time.Time, stop func())
}

// Cluster is one node's membership of a cluster over Redis, as the node
// uses it: New's answer.
type Cluster interface {
	hub.Cluster
	// ID is the node's id.
	ID() string
	// Start joins the cluster: it puts the hub in cluster mode and starts
	// the goroutines that publish, receive, write the node's record and
	// keep its heartbeat. The first heartbeat is tried before Start
	// returns, so a reachable Redis is in use at once.
	Start()
	// Close leaves the cluster: it writes what is queued, takes the node's
	// share out of Redis (as a dead node's would be, so its clients'
	// leaving is announced now rather than after the heartbeat expires)
	// and disconnects. The hub's connections must be closed first.
	Close() error
	// Ready reports whether Redis answers, for /readyz.
	Ready(ctx context.Context) error
	// Stats returns the cluster's figures.
	Stats() Stats
	// ConsoleRelay starts relaying console events for this node; deliver
	// gets the events other nodes saw of an app this node watches, with
	// how many they dropped. Call it once; it stops with Close.
	ConsoleRelay(deliver func(appID string, events []json.RawMessage, dropped int)) *ConsoleRelay
	// EventLog returns the store of the cluster's channel histories.
	EventLog(limits eventlog.Limits) *EventLogStore
	// Idempotency returns the store of the cluster's Idempotency-Key
	// headers.
	Idempotency(opts idempotency.Options) *IdempotencyStore
	// publishKept publishes ms, of one app, and appends them to s, this
	// cluster's history, in the scripts that publish them.
	publishKept(s *EventLogStore, p eventlog.Policy, now time.Time, ms []hub.Message) error
}

// member is one node's membership of a cluster on one Redis: a single
// address, a Sentinel group's primary, or one shard of a router (of a list
// of shards, or of a Redis Cluster).
type member struct {
	log *zap.Logger
	rdb redis.UniversalClient // a *redis.Client, or the *redis.ClusterClient every shard of a Redis Cluster shares
	// route is the KEYS of every script call: a key of the node's prefix,
	// whose hash tag sends the call to the Redis Cluster node that holds
	// the shard's keys (rediscluster.go); elsewhere it changes nothing.
	route []string
	opts  Options
	id    string
	epoch string // this process's value of its heartbeat key
	hub   *hub.Hub
	relay atomic.Pointer[ConsoleRelay] // set by ConsoleRelay, for Stats
	p     string                       // key prefix
	// scriptCtx is every script's ARGV[1] (see prelude): the prefix, the
	// command that publishes on a stream's channel and the channel's
	// suffix, NUL-separated.
	scriptCtx string
	// chanAt is the suffix of a stream's channel after the stream's key:
	// "@" and the database, as channels are the server's, not a
	// database's (two clusters on two databases of one Redis, with one
	// prefix, must not hear each other).
	chanAt string
	// sharded: the member is on a Redis Cluster, whose shard channels
	// (SPUBLISH, SSUBSCRIBE) stay on the node of their hash slot.
	sharded bool

	pub chan *pubReq
	ops opQueue

	// The publish loop's own: the generation it publishes under, the
	// number of its last message in each stream (the slots', then the
	// cluster-wide one's), what it published lately.
	pubGen    string
	pubCalls  uint64 // publishScript calls with kept events: their tokens
	seq       [Slots + 1]uint64
	ring      replayRing
	replayNow chan struct{}      // the generation may have changed: check, and replay
	seen      [Slots + 1]origins // per stream; the receive loop's own
	interest  interest           // what the node reads

	// healthy: the last heartbeat reached Redis; while false, publishes are
	// refused at once. needResync: the node's record in Redis must be
	// rebuilt from its hub before further changes are written.
	healthy    atomic.Bool
	needResync atomic.Bool
	// forceReplay: Redis answers again after an outage; the publish loop
	// publishes its ring again before anything new (see replay).
	forceReplay atomic.Bool
	// historySuspect: Redis went away, or another server answers, which
	// may lack the last history appends (a promoted replica): the writer
	// gives the history a new generation before it writes anything else,
	// so that no recovery builds on positions it may not hold (recovery
	// tokens carry the generation: histMark).
	historySuspect atomic.Bool
	// readerReady: the reader knows where it reads the stream from, so the
	// answers of a resync will reach it. readerLost: its connection failed;
	// it must check whether Redis lost its data before reading on.
	readerReady, readerLost atomic.Bool
	// listening is the reader's connection that listens on the streams'
	// channels, closed from outside when another server answers: its
	// connection, to the old server, would hear only what that one
	// publishes (a demoted primary: nothing while it resynchronises).
	listening atomic.Pointer[redis.PubSub]
	gen       string // the state's generation last seen (writer goroutine)
	// genNow is gen for the heartbeat, which checks that Redis still has
	// it: a restart quicker than a heartbeat fails no command (the client
	// retries on a new connection), and this is how it is noticed.
	genNow atomic.Pointer[string]

	elsewhereMu sync.RWMutex
	elsewhere   map[string]int // connections per app on the other nodes
	nodes       atomic.Int64   // live nodes, this one included

	reaping sync.Map // node id → struct{}: reaps in progress here

	countMu      sync.Mutex
	countPending map[string]bool // app \x1f channel: a held-back count is scheduled

	stats counters

	// shardIndex of shardCount is the Redis this membership is on (0 of 1
	// without shards): what of the channels it keeps (owns).
	shardIndex, shardCount int
	// sharedRDB: rdb is the Redis Cluster's client, which every shard
	// uses and the router closes.
	sharedRDB bool
	// refused is why the Redis refuses this node (another list of shards
	// is running on it), or nil.
	refused atomic.Pointer[error]

	// releaseLog stops the Redis client's own lines going to this
	// cluster's logger (redisconn.Log); nil where another closes the client.
	releaseLog func()

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ Cluster = (*member)(nil)

// New connects to Redis and returns the node's cluster membership; Start
// joins the cluster. Redis need not answer yet: the node starts outside the
// cluster and joins when it does.
//
// Options.URL may list several Redis URLs, comma-separated: the shards the
// channels are spread over (shards.go); or name a Redis Cluster
// (rediscluster.go) or a Sentinel group (redisconn has every form).
func New(log *zap.Logger, h *hub.Hub, opts Options) (Cluster, error) {
	shards, err := redisconn.Parse(opts.URL, opts.CAFile)
	if err != nil {
		return nil, err
	}
	for _, s := range shards {
		if err := s.Check(); err != nil {
			return nil, err
		}
	}
	if opts.NodeID == "" {
		opts.NodeID = randomID()
	}
	switch {
	case shards[0].Kind == redisconn.Cluster:
		return newRedisCluster(log, h, opts, shards[0]), nil
	case len(shards) == 1:
		return newShard(log, h, opts, shards[0], 0, 1), nil
	}
	return newSharded(log, h, opts, shards), nil
}

// newShard returns the node's membership of the cluster on one Redis (or
// one Sentinel group), the shard index of count.
func newShard(log *zap.Logger, h *hub.Hub, opts Options, shard redisconn.Shard, index, count int) *member {
	opts.URL = shard.URL
	var c *member
	// The client connects at its first command, after Start, by when c is
	// set.
	rdb := shard.Client(redisconn.ClientOptions{OnNewServer: func(runID, was string) { c.serverChanged(runID, was) }})
	c = newMember(log, h, opts, rdb, index, count)
	c.releaseLog = redisconn.Log(c.log.Named("redis"))
	return c
}

// newMember returns the node's membership of the cluster over rdb, the
// shard index of count.
func newMember(log *zap.Logger, h *hub.Hub, opts Options, rdb redis.UniversalClient, index, count int) *member {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.NodeTTL <= 0 {
		opts.NodeTTL = DefaultNodeTTL
	}
	if opts.Hold <= 0 {
		opts.Hold = DefaultHold
	}
	if opts.ReplayWindow <= 0 {
		opts.ReplayWindow = DefaultReplayWindow
	}
	if opts.ReplayBytes <= 0 {
		opts.ReplayBytes = DefaultReplayBytes
	}
	if opts.Settings == nil {
		opts.Settings = func(string) AppSettings { return AppSettings{} }
	}
	if opts.after == nil {
		opts.after = time.After
	}
	if opts.ticker == nil {
		opts.ticker = func(every time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(every)
			return t.C, t.Stop
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &member{
		log:          log.With(zap.String("node", opts.NodeID)),
		rdb:          rdb,
		opts:         opts,
		id:           opts.NodeID,
		epoch:        randomID(),
		hub:          h,
		p:            opts.Prefix,
		route:        []string{opts.Prefix},
		pub:          make(chan *pubReq, 1024),
		ring:         replayRing{window: opts.ReplayWindow, max: opts.ReplayBytes},
		replayNow:    make(chan struct{}, 1),
		elsewhere:    make(map[string]int),
		countPending: make(map[string]bool),
		shardIndex:   index,
		shardCount:   count,
		ctx:          ctx,
		cancel:       cancel,
	}
	db := 0
	if cl, ok := rdb.(*redis.Client); ok {
		db = cl.Options().DB
	}
	_, c.sharded = rdb.(*redis.ClusterClient)
	c.chanAt = "@" + strconv.Itoa(db)
	pub := "PUBLISH"
	if c.sharded {
		pub = "SPUBLISH"
	}
	c.scriptCtx = c.p + "\x00" + pub + "\x00" + c.chanAt
	c.ops.init()
	c.needResync.Store(true)
	return c
}

// channel is the channel on which the entries of a stream (its key's
// suffix) are published.
func (c *member) channel(stream string) string { return c.key(stream, c.chanAt) }

// ID is the node's id.
func (c *member) ID() string { return c.id }

// Start joins the cluster: it puts the hub in cluster mode and starts the
// goroutines that publish, receive, write the node's record and keep its
// heartbeat. The first heartbeat is tried before Start returns, so a
// reachable Redis is in use at once.
func (c *member) Start() {
	c.hub.SetCluster(c)
	c.log.Info("cluster mode", zap.Strings("redis", redisconn.RedactAll(c.opts.URL)), zap.String("prefix", c.p))
	c.join()
}

// join starts the goroutines of the node's membership on one Redis.
func (c *member) join() {
	c.heartbeat()
	c.run(c.publishLoop)
	c.run(c.receiveLoop)
	c.run(c.writeLoop)
	c.run(func() { c.every(c.opts.Heartbeat, c.heartbeat) })
	c.run(c.releaseLoop)
}

// every runs f every d until the node leaves the cluster.
func (c *member) every(d time.Duration, f func()) {
	ticks, stop := c.opts.ticker(d)
	defer stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-ticks:
			f()
		}
	}
}

func (c *member) run(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// Close leaves the cluster: it writes what is queued, takes the node's
// share out of Redis (as a dead node's would be, so its clients' leaving is
// announced now rather than after the heartbeat expires) and disconnects.
// The hub's connections must be closed first.
func (c *member) Close() error {
	c.cancel()
	defer c.healthy.Store(false) // publishes after Close are refused at once
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.healthy.Load() {
		// The reader may be waiting up to two heartbeats for a message,
		// which a cancelled context does not end.
		c.rdb.Do(ctx, c.wakeReader()...)
	}
	c.wg.Wait()
	if c.healthy.Load() {
		c.rdb.Del(ctx, c.key("node:", c.id))
		if err := c.reap(ctx, c.id, true); err != nil {
			c.log.Warn("leaving the cluster: the node's share stays until another node takes it out", zap.Error(err))
		}
		if c.nodes.Load() <= 1 {
			// No node is left to release the held-back webhooks when
			// they are due: they go now, as on one node at shutdown.
			c.releaseHeld(ctx, true)
		}
	}
	if c.sharedRDB {
		return nil // the client is the Redis Cluster's, closed by its owner
	}
	err := c.rdb.Close()
	c.releaseLog()
	return err
}

// Ready reports whether Redis answers, for /readyz.
func (c *member) Ready(ctx context.Context) error {
	if err := c.refused.Load(); err != nil {
		return *err
	}
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		// A Redis Cluster's PING goes to any node: ask the one that
		// serves this shard's slot.
		node, err := cc.MasterForKey(ctx, c.p)
		if err != nil {
			return err
		}
		return node.Ping(ctx).Err()
	}
	return c.rdb.Ping(ctx).Err()
}

func (c *member) key(parts ...string) string {
	n := len(c.p)
	for _, s := range parts {
		n += len(s)
	}
	b := make([]byte, 0, n)
	b = append(b, c.p...)
	for _, s := range parts {
		b = append(b, s...)
	}
	return string(b)
}

// setHealthy records whether Redis answers, logging each change.
func (c *member) setHealthy(ok bool, err error) {
	if !ok && c.ctx.Err() != nil {
		return // a heartbeat cut short by Close: no outage, and Close leaves tidily
	}
	if c.healthy.Swap(ok) == ok {
		return
	}
	if ok {
		c.log.Info("Redis answers: in the cluster")
		c.replayAnyway()
		return
	}
	c.stats.outages.Add(1)
	c.historySuspect.Store(true)
	c.needResync.Store(true)
	c.log.Error("Redis does not answer: triggers that must reach other nodes are refused until it does", zap.Error(err))
}

// serverChanged is told by the client that another Redis server answers
// than before (redisconn's watch): a failover behind one address, a
// Sentinel's switch to a new primary, or a restart, which may come with no
// outage the heartbeat sees. A promoted replica keeps the state's
// generation but may lack the last writes of the primary that died
// (replication is asynchronous): so the node publishes again what it
// published in the replay window, as after an outage (the readers drop
// what they had), so that a trigger answered 200 is delivered all the same.
func (c *member) serverChanged(runID, was string) {
	c.log.Warn("another Redis server answers than before (a failover or a restart): publishing again what this node published in the last moments, in case it lacks some",
		zap.String("run_id", runID), zap.String("was", was))
	c.historySuspect.Store(true)
	c.ops.wake()
	c.replayAnyway()
	// The reader listens again, on the server that answers now, and reads
	// the streams there from where it stopped.
	c.readerLost.Store(true)
	if ps := c.listening.Load(); ps != nil {
		// Not here: this may run on a connection ps itself is making,
		// under ps's lock.
		go ps.Close()
	}
}

func randomID() string {
	var b [6]byte
	rand.Read(b[:]) // never fails (Go 1.24 and later)
	return hex.EncodeToString(b[:])
}

// call is one command of a pipeline: a script with its ARGV, or a plain
// command; exec runs scripts on the cluster's route and fills in the
// result. keys are those of a channel history's append, which runs its
// script on its own (appendCall), not through exec.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	val    any
	err    error
}

// scripts are every script the cluster runs, loaded again together when
// Redis turns out not to have one.
var scripts = []*redis.Script{beatScript, joinScript, leaveScript, signInScript, signOutScript, flushCountScript, publishScript, releaseScript, histAppendScript}

// exec runs the calls in one pipeline, in order. A script Redis does not
// have (it restarted) is not run, so it is sent again in full — after the
// calls that followed it, which changes their order: so every script is
// loaded again at once (it happens once per restart), and the node's record
// is rebuilt, which settles whatever the reordering did to it.
func (c *member) exec(ctx context.Context, calls []*call) {
	if len(calls) == 0 {
		return
	}
	cmds := make([]*redis.Cmd, len(calls))
	pipe := c.rdb.Pipeline()
	for i, cl := range calls {
		if cl.script != nil {
			cmds[i] = cl.script.EvalSha(ctx, pipe, c.route, cl.args...)
		} else {
			cmds[i] = pipe.Do(ctx, cl.args...)
		}
	}
	pipe.Exec(ctx) // errors are per command
	var retry []int
	for i, cmd := range cmds {
		calls[i].val, calls[i].err = cmd.Val(), cmd.Err()
		if calls[i].err != nil && redis.HasErrorPrefix(calls[i].err, "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return
	}
	for _, s := range scripts {
		s.Load(ctx, c.rdb)
	}
	if retry[0] < len(calls)-1 {
		c.needResync.Store(true)
	}
	pipe = c.rdb.Pipeline()
	for _, i := range retry {
		cmds[i] = calls[i].script.Eval(ctx, pipe, c.route, calls[i].args...)
	}
	pipe.Exec(ctx)
	for _, i := range retry {
		calls[i].val, calls[i].err = cmds[i].Val(), cmds[i].Err()
	}
}

// isNil reports a missing key or field.
func isNil(err error) bool { return errors.Is(err, redis.Nil) }
