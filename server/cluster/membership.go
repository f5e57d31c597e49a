package cluster

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// heartbeat renews the node's heartbeat, publishes its connection counts,
// reads the other nodes' and takes out the record of any node whose
// heartbeat expired. It runs every Options.Heartbeat.
func (c *member) heartbeat() {
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.NodeTTL)
	defer cancel()
	if err := c.checkShard(ctx); err != nil {
		c.setHealthy(false, err)
		return
	}
	if err := c.beat(ctx); err != nil {
		c.setHealthy(false, err)
		return
	}
	c.setHealthy(true, nil)
	if known := c.genNow.Load(); known != nil {
		if g, err := c.rdb.Get(ctx, c.key("gen")).Result(); (err == nil || isNil(err)) && g != *known {
			// Redis lost its data (and the nodes' records) since the
			// last rebuild: rebuild, and let the reader see it too.
			c.needResync.Store(true)
			c.readerLost.Store(true)
			c.askReplay()
		}
	}
	nodes, err := c.rdb.SMembers(ctx, c.key("nodes")).Result()
	if err != nil {
		c.setHealthy(false, err)
		return
	}
	pipe := c.rdb.Pipeline()
	alive := make([]*redis.IntCmd, len(nodes))
	counts := make([]*redis.MapStringStringCmd, len(nodes))
	for i, n := range nodes {
		alive[i] = pipe.Exists(ctx, c.key("node:", n))
		counts[i] = pipe.HGetAll(ctx, c.key("nc:", n))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		c.setHealthy(false, err)
		return
	}
	elsewhere := make(map[string]int)
	live := int64(1)
	for i, n := range nodes {
		if n == c.id {
			continue
		}
		if alive[i].Val() == 0 {
			c.reapLater(n)
			continue
		}
		live++
		for app, v := range counts[i].Val() {
			k, _ := strconv.Atoi(v)
			elsewhere[app] += k
		}
	}
	c.nodes.Store(live)
	c.elsewhereMu.Lock()
	c.elsewhere = elsewhere
	c.elsewhereMu.Unlock()
}

// beat renews the heartbeat and the node's connection counts, in one
// script: atomic, and on a primary demoted behind the node's address it
// fails with READONLY itself, which makes the client drop the connection
// (a transaction would fail with EXECABORT, and the client would keep the
// connection and the heartbeat would fail on it for good).
func (c *member) beat(ctx context.Context) error {
	local := c.hub.LocalConnections()
	args := make([]any, 0, 4+2*len(local))
	args = append(args, c.scriptCtx, c.id, c.epoch, c.opts.NodeTTL.Milliseconds())
	for app, n := range local {
		args = append(args, app, n)
	}
	cl := &call{script: beatScript, args: args}
	c.exec(ctx, []*call{cl})
	if cl.err != nil {
		return cl.err
	}
	// The previous value says whether the heartbeat lived on: when it is
	// not this process's (it expired while the process stalled, and another
	// node may have taken the record out), the record is rebuilt.
	if prev, _ := cl.val.(string); prev != c.epoch {
		c.needResync.Store(true)
	}
	return nil
}

// ConnectionsElsewhere is the number of connections of appID on the other
// live nodes, as of the last heartbeat.
func (c *member) ConnectionsElsewhere(appID string) int {
	c.elsewhereMu.RLock()
	defer c.elsewhereMu.RUnlock()
	return c.elsewhere[appID]
}

// lock takes the lock on a node's record (its own, to rebuild it; another's,
// to take it out). With wait it retries until ctx ends; otherwise it
// reports errLocked when another node holds it. unlock releases it if it is
// still this node's.
func (c *member) lock(ctx context.Context, node string, wait bool) (unlock func(), err error) {
	k := c.key("lock:", node)
	token := c.id + "/" + randomID()
	for {
		ok, err := c.rdb.SetNX(ctx, k, token, 30*time.Second).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				unlockScript.Run(ctx, c.rdb, []string{k}, token)
			}, nil
		}
		if !wait {
			return nil, errLocked
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type lockedError struct{}

func (lockedError) Error() string { return "cluster: the node's record is locked by another node" }

var errLocked error = lockedError{}

// unlockScript deletes a lock only if it still holds the caller's token.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// reapLater takes out a dead node's record on another goroutine, unless that
// is under way here already.
func (c *member) reapLater(node string) {
	if _, busy := c.reaping.LoadOrStore(node, struct{}{}); busy {
		return
	}
	c.run(func() {
		defer c.reaping.Delete(node)
		if err := c.reap(c.ctx, node, false); err != nil && err != errLocked {
			c.log.Warn("taking out a dead node's record failed; retrying at the next heartbeat", zap.String("dead_node", node), zap.Error(err))
		}
	})
}

// reap takes a dead node's subscriptions and sign-ins out of the cluster
// state, as if its clients had all disconnected: the members they were
// leave, the users go offline, and this node reports the webhook events.
// It runs under the node's lock and gives up if the node's heartbeat is
// back. self is set when a node leaving the cluster takes out its own.
func (c *member) reap(ctx context.Context, node string, self bool) error {
	unlock, err := c.lock(ctx, node, false)
	if err != nil {
		return err
	}
	defer unlock()
	if !self {
		if n, err := c.rdb.Exists(ctx, c.key("node:", node)).Result(); err != nil || n > 0 {
			return err // alive again
		}
	}
	subs, err := c.drain(ctx, c.key("ns:", node), func(entry string) (*call, [2]string, bool) {
		l, ok := parseSubEntry(entry)
		return c.leaveCall(node, l), [2]string{l.AppID, l.Channel}, ok
	})
	if err != nil {
		return err
	}
	users, err := c.drain(ctx, c.key("nu:", node), func(entry string) (*call, [2]string, bool) {
		s, ok := parseUserEntry(entry)
		return c.signOutCall(node, s), [2]string{}, ok
	})
	if err != nil {
		return err
	}
	pipe := c.rdb.TxPipeline()
	pipe.Del(ctx, c.key("nc:", node), c.key("in:", node))
	removed := pipe.SRem(ctx, c.key("nodes"), node)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	// A heartbeat that listed the node before this reap took it out may
	// start another, which finds nothing left: only the reap that took the
	// node out of the set counts.
	if !self && removed.Val() == 1 {
		c.stats.reaped.Add(1)
		c.log.Warn("a node's heartbeat expired: its clients are gone from the cluster", zap.String("dead_node", node),
			zap.Int("subscriptions", subs), zap.Int("sign_ins", users))
	}
	return nil
}

// drain runs, a page at a time, the call that takes each entry of a dead
// node's record set out of the cluster state (the script removes the entry
// too), and reports the transitions. Entries are read, not popped, so a
// reaper that dies midway leaves the rest for the next. It returns how many
// entries it took out.
func (c *member) drain(ctx context.Context, set string, callOf func(entry string) (*call, [2]string, bool)) (int, error) {
	n := 0
	for {
		entries, err := c.rdb.SRandMemberN(ctx, set, 256).Result()
		if err != nil || len(entries) == 0 {
			return n, err
		}
		calls := make([]*call, 0, len(entries))
		about := make([][2]string, 0, len(entries))
		for _, e := range entries {
			cl, ac, ok := callOf(e)
			if !ok {
				c.rdb.SRem(ctx, set, e) // not an entry this version writes
				continue
			}
			calls = append(calls, cl)
			about = append(about, ac)
		}
		c.exec(ctx, calls)
		for i, cl := range calls {
			if cl.err != nil {
				return n, cl.err
			}
			c.transitions(about[i], cl.val)
		}
		n += len(calls)
	}
}
