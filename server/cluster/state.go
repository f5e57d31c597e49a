package cluster

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
)

// op is one change of the node's record, in the order the hub made it.
type op struct {
	join    *hub.Join
	reply   bool // join: answer with a snapshot
	silent  bool // join, sign-in: rebuilding after Redis lost its data
	leave   *hub.Leave
	signIn  *hub.SignInRequest
	signOut *hub.SignOutRequest
	flush   [2]string // app, channel: a held-back subscription count
	// signedIn is a query (online.go), answered in order after the
	// changes queued before it.
	signedIn *signedInQuery
}

// opQueue is the writer's queue. It is unbounded in entries, but only ever
// holds what the hub changed since the last batch, and is emptied when the
// node loses touch with Redis (the resync rebuilds from the hub instead).
type opQueue struct {
	mu    sync.Mutex
	ops   []op
	ready chan struct{} // holds a token while ops is not empty
}

func (q *opQueue) init() { q.ready = make(chan struct{}, 1) }

func (q *opQueue) push(o op) {
	q.mu.Lock()
	q.ops = append(q.ops, o)
	q.mu.Unlock()
	q.wake()
}

// wake has the writer look at the queue and the node's state now rather
// than at its next tick.
func (q *opQueue) wake() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take returns up to max queued ops.
func (q *opQueue) take(max int) []op {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.ops), max)
	out := make([]op, n)
	copy(out, q.ops)
	q.ops = q.ops[n:]
	if len(q.ops) > 0 {
		q.wake()
	}
	return out
}

// clear drops the queued changes. Queries stay, to be answered after the
// rebuild that follows, which brings Redis in step with the hub.
func (q *opQueue) clear() {
	q.mu.Lock()
	q.ops = slices.DeleteFunc(q.ops, func(o op) bool { return o.signedIn == nil })
	q.mu.Unlock()
}

// Join records a subscription; the cluster answers with a snapshot.
func (c *member) Join(j hub.Join) {
	c.interest.join(j)
	c.ops.push(op{join: &j, reply: true})
}

// Leave records an unsubscription.
func (c *member) Leave(l hub.Leave) {
	c.interest.leave(l.AppID, l.Channel, l.SocketID)
	c.ops.push(op{leave: &l})
}

// SignIn records a sign-in; the cluster answers with the watchlist's state.
func (c *member) SignIn(s hub.SignInRequest) { c.ops.push(op{signIn: &s}) }

// SignOut records the end of a signed-in connection.
func (c *member) SignOut(s hub.SignOutRequest) { c.ops.push(op{signOut: &s}) }

// writeLoop applies the queued changes in order, a pipeline at a time, and
// rebuilds the node's record whenever it lost touch with Redis.
func (c *member) writeLoop() {
	const maxBatch = 512
	backoff := 100 * time.Millisecond
	tick := time.NewTicker(c.opts.Heartbeat / 4)
	defer tick.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.ops.ready:
		case <-tick.C:
		}
		// Before anything it writes, the rebuild's joins included.
		if c.healthy.Load() {
			if err := c.settleHistory(c.ctx); err != nil {
				c.log.Warn("giving the channel history a new generation failed; retrying", zap.Error(err))
				continue
			}
		}
		if c.needResync.Load() {
			if !c.healthy.Load() || !c.readerReady.Load() {
				c.ops.clear() // the resync will rebuild from the hub
				continue
			}
			if err := c.resync(c.ctx); err != nil {
				c.log.Warn("rebuilding the node's record in Redis failed; retrying", zap.Error(err), zap.Duration("in", backoff))
				c.ops.clear()
				select {
				case <-c.ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
		}
		for {
			batch := c.ops.take(maxBatch)
			if len(batch) == 0 {
				break
			}
			if err := c.apply(c.ctx, batch); err != nil {
				// What failed may or may not have been applied; the
				// resync settles it from the hub.
				c.needResync.Store(true)
				c.ops.clear()
				c.log.Warn("writing to Redis failed; the node's record will be rebuilt", zap.Error(err))
				break
			}
		}
	}
}

// apply runs the ops in one pipeline and reports what they caused. The
// reader reads the slots of its joins first, so that it reads their answers.
func (c *member) apply(ctx context.Context, ops []op) error {
	defer failQueries(ops) // those not answered below
	wake, err := c.readSlots(ctx, ops)
	if err != nil {
		return err
	}
	calls := make([]*call, len(ops), len(ops)+1)
	for i, o := range ops {
		calls[i] = c.callOf(o)
	}
	if wake != nil {
		calls = append(calls, wake)
		copy(calls[1:], calls)
		calls[0] = wake
	}
	c.exec(ctx, calls)
	if wake != nil {
		if wake.err != nil {
			return wake.err
		}
		calls = calls[1:]
	}
	for i, cl := range calls {
		if q := ops[i].signedIn; q != nil {
			q.reply(cl.val, cl.err) // a read: its failure changed nothing
			continue
		}
		if cl.err != nil {
			return cl.err
		}
		c.transitions(appChannel(ops[i]), cl.val)
	}
	return nil
}

// appChannel is the app and channel an op's transitions concern.
func appChannel(o op) [2]string {
	switch {
	case o.join != nil:
		return [2]string{o.join.AppID, o.join.Channel}
	case o.leave != nil:
		return [2]string{o.leave.AppID, o.leave.Channel}
	}
	return o.flush
}

func (c *member) callOf(o op) *call {
	switch {
	case o.join != nil:
		j := o.join
		kind, cache := hub.ChannelKind(j.Channel)
		flags := make([]byte, 0, 5)
		if kind == hub.Presence {
			flags = append(flags, 'p')
		}
		if cache {
			flags = append(flags, 'c')
		}
		if c.opts.Settings(j.AppID).SubscriptionCount {
			flags = append(flags, 'n')
		}
		if o.silent {
			flags = append(flags, 's')
		}
		if o.reply {
			flags = append(flags, 'r')
		}
		args := []any{c.scriptCtx, streamOf(slotOf(j.AppID, j.Channel)), c.id, j.AppID, j.Channel, j.SocketID, j.UserID, string(j.Info), j.MaxMembers, string(flags), j.Token}
		if rec := j.Recovery; rec != nil && o.reply {
			args[9] = string(append(flags, 'k'))
			now := time.Now()
			args = append(args, rec.Policy.Events, now.Add(-rec.Policy.TTL).UnixMilli(), now.UnixMilli(), rec.Window.Milliseconds())
			if rec.Resume && rec.Refused == "" {
				args = append(args, rec.After.String(), rec.OldSocket, rec.Mark)
			} else {
				args = append(args, "", "", "")
			}
		}
		return &call{script: joinScript, args: args}
	case o.leave != nil:
		return c.leaveCall(c.id, *o.leave)
	case o.signIn != nil:
		s := o.signIn
		flags := "r"
		if o.silent {
			flags = "rs"
		}
		args := []any{c.scriptCtx, globalStream, c.id, s.AppID, s.SocketID, s.UserID, flags}
		for _, w := range s.Watchlist {
			args = append(args, w)
		}
		return &call{script: signInScript, args: args}
	case o.signOut != nil:
		return c.signOutCall(c.id, *o.signOut)
	case o.signedIn != nil:
		return o.signedIn.call(c)
	default:
		return &call{script: flushCountScript, args: []any{c.scriptCtx, streamOf(slotOf(o.flush[0], o.flush[1])), o.flush[0], o.flush[1]}}
	}
}

func (c *member) leaveCall(node string, l hub.Leave) *call {
	flags := ""
	if hub.IsPresence(l.Channel) {
		flags = "p"
	} else if c.opts.Settings(l.AppID).SubscriptionCount {
		flags = "n"
	}
	return &call{script: leaveScript, args: []any{c.scriptCtx, streamOf(slotOf(l.AppID, l.Channel)), node, l.AppID, l.Channel, l.SocketID, l.UserID, flags, c.opts.Hold.Milliseconds()}}
}

func (c *member) signOutCall(node string, s hub.SignOutRequest) *call {
	return &call{script: signOutScript, args: []any{c.scriptCtx, globalStream, node, s.AppID, s.SocketID, s.UserID}}
}

// transitions hands the channel events a script reported to the hub's
// observer: this node is the one that caused them, so it alone reports
// them. (channel_vacated and member_removed come later, from releaseHeld.)
func (c *member) transitions(ac [2]string, val any) {
	list, _ := val.([]any)
	for i := 0; i+1 < len(list); i += 2 {
		kind, _ := list[i].(string)
		value, _ := list[i+1].(string)
		ev := hub.Event{AppID: ac[0], Channel: ac[1]}
		switch kind {
		case "occupied":
			ev.Kind = hub.ChannelOccupied
		case "member_added":
			ev.Kind, ev.UserID = hub.MemberAdded, value
		case "count":
			n, _ := strconv.Atoi(value)
			ev.Kind, ev.Count = hub.SubscriptionCount, n
		case "defer":
			ms, _ := strconv.Atoi(value)
			c.deferCount(ac, time.Duration(ms)*time.Millisecond)
			continue
		default:
			continue
		}
		c.hub.Notify(ev)
	}
}

// deferCount schedules a held-back subscription count, once per channel.
func (c *member) deferCount(ac [2]string, after time.Duration) {
	k := ac[0] + "\x1f" + ac[1]
	c.countMu.Lock()
	defer c.countMu.Unlock()
	if c.countPending[k] {
		return
	}
	c.countPending[k] = true
	// A little late rather than early: the script sends only once the
	// window has passed by Redis's clock.
	time.AfterFunc(after+20*time.Millisecond, func() {
		c.countMu.Lock()
		delete(c.countPending, k)
		c.countMu.Unlock()
		c.ops.push(op{flush: ac})
	})
}

// resync rebuilds the node's record in Redis from its hub: subscriptions
// and sign-ins Redis has that the hub no longer has are taken out (with the
// events that causes), those it lacks are added, and every one still
// waiting for an answer is answered. When Redis lost its data (a restart),
// the record is rebuilt without events: every node is doing the same, and
// nothing changed for the clients.
func (c *member) resync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The heartbeat first, so that no other node starts taking this one's
	// record out; then the lock, to wait for one that already has.
	if err := c.beat(ctx); err != nil {
		return err
	}
	unlock, err := c.lock(ctx, c.id, true)
	if err != nil {
		return err
	}
	defer unlock()
	gen, err := c.generation(ctx)
	if err != nil {
		return err
	}
	silent := c.gen != "" && gen != c.gen
	c.gen = gen
	c.genNow.Store(&gen)
	// Changes queued before the share is read are in it.
	c.needResync.Store(false)
	c.ops.clear()
	entries, signins := c.hub.Share(func(appID string) int { return c.opts.Settings(appID).MaxPresenceMembers })
	if c.shardCount > 1 {
		// This shard's share: its channels, and the sign-ins on the first.
		entries = slices.DeleteFunc(entries, func(e hub.ShareEntry) bool { return !c.owns(e.AppID, e.Channel) })
		if c.shardIndex > 0 {
			signins = nil
		}
	}
	have, err := c.rdb.SMembers(ctx, c.key("ns:", c.id)).Result()
	if err != nil {
		c.needResync.Store(true)
		return err
	}
	haveUsers, err := c.rdb.SMembers(ctx, c.key("nu:", c.id)).Result()
	if err != nil {
		c.needResync.Store(true)
		return err
	}
	var ops []op
	inRedis, inRedisUsers := set(have), set(haveUsers)
	local := make(map[string]bool, len(entries))
	for _, e := range entries {
		k := subEntry(e.AppID, e.Channel, e.SocketID, e.UserID)
		local[k] = true
		if e.Pending || !inRedis[k] {
			j := e.Join
			ops = append(ops, op{join: &j, reply: e.Pending, silent: silent})
		}
	}
	for _, k := range have {
		if !local[k] {
			if l, ok := parseSubEntry(k); ok {
				ops = append(ops, op{leave: &l})
			}
		}
	}
	localUsers := make(map[string]bool, len(signins))
	for _, s := range signins {
		k := userEntry(s.AppID, s.SocketID, s.UserID)
		localUsers[k] = true
		if s.Pending || !inRedisUsers[k] {
			r := s.SignInRequest
			ops = append(ops, op{signIn: &r, silent: silent})
		}
	}
	for _, k := range haveUsers {
		if !localUsers[k] {
			if s, ok := parseUserEntry(k); ok {
				ops = append(ops, op{signOut: &s})
			}
		}
	}
	for len(ops) > 0 {
		n := min(len(ops), 512)
		if err := c.apply(ctx, ops[:n]); err != nil {
			c.needResync.Store(true)
			return err
		}
		ops = ops[n:]
	}
	c.stats.resyncs.Add(1)
	c.log.Info("the node's record in Redis is rebuilt", zap.Int("subscriptions", len(entries)), zap.Int("sign_ins", len(signins)),
		zap.Int("in_redis_before", len(have)), zap.Bool("redis_lost_its_data", silent))
	return nil
}

func set(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[s] = true
	}
	return m
}

// generation returns the state's generation, starting one when Redis has
// none (it is new, or it restarted without its data).
func (c *member) generation(ctx context.Context) (string, error) {
	k := c.key("gen")
	if err := c.rdb.SetNX(ctx, k, randomID(), 0).Err(); err != nil {
		return "", err
	}
	return c.rdb.Get(ctx, k).Result()
}

// settleHistory gives the channel history a new generation (P hgen) when
// Redis went away or another server answers (historySuspect), before the
// writer writes anything else: the history may lack what the server that
// answered before took last, so recovery tokens from before fail as a gap
// instead of resuming over a hole.
func (c *member) settleHistory(ctx context.Context) error {
	if !c.historySuspect.Load() {
		return nil
	}
	if err := c.rdb.Set(ctx, c.key("hgen"), randomID(), 0).Err(); err != nil {
		return err
	}
	c.historySuspect.Store(false)
	return nil
}

// The entries of a node's record: the user id comes last, as it may hold
// any character.
func subEntry(app, channel, socket, user string) string {
	return app + "\x1f" + channel + "\x1f" + socket + "\x1f" + user
}

func parseSubEntry(s string) (hub.Leave, bool) {
	f := strings.SplitN(s, "\x1f", 4)
	if len(f) != 4 {
		return hub.Leave{}, false
	}
	return hub.Leave{AppID: f[0], Channel: f[1], SocketID: f[2], UserID: f[3]}, true
}

func userEntry(app, socket, user string) string {
	return app + "\x1f" + socket + "\x1f" + user
}

func parseUserEntry(s string) (hub.SignOutRequest, bool) {
	f := strings.SplitN(s, "\x1f", 3)
	if len(f) != 3 {
		return hub.SignOutRequest{}, false
	}
	return hub.SignOutRequest{AppID: f[0], SocketID: f[1], UserID: f[2]}, true
}
