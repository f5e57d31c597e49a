package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
)

// Publishing. A node publishes through one loop (publishLoop), which
// numbers its messages in order and sends what its callers queued in one
// script call (publishScript): the messages of consecutive plain calls
// packed in one stream entry, a cache channel's message in an entry of its
// own, each in the stream of its channel's slot (interest.go). The script runs only while Redis still has the state's generation
// the node last published under, so nothing is appended to a Redis that
// lost its data before the node knows.
//
// Redis without persistence loses, when it restarts, what it took and no
// node had read yet: triggers already answered 200. So each node keeps what
// it published for a while (the replay ring), and when it finds Redis lost
// its data it publishes that again, under the new generation, before
// anything new. Every entry carries its origin (the publishing process) and
// the sequence number of its first message, in its stream's numbering (a
// node reads each stream in order, but not the streams in one order); a
// node delivers a message only when its number is above the last it
// delivered from that origin in that stream, so a message it already had is
// dropped and one it missed is delivered, late.

// Defaults of Options.ReplayWindow and Options.ReplayBytes.
const (
	DefaultReplayWindow = 3 * time.Second
	DefaultReplayBytes  = 32 << 20
)

// outMsg is one message this node publishes.
type outMsg struct {
	slot  int // the stream's: a channel slot, or Slots for the cluster-wide stream
	seq   uint64
	msg   string
	cache *cacheUpdate // a cache channel's event: its new last event
	at    time.Time    // when Redis took it, for the replay ring
	// keep, when set, is the publish call whose history append (entry)
	// goes with the message (publishScript's appends), until Redis took it.
	keep  *keepReq
	entry eventlog.Entry
}

// cacheUpdate is what a cache channel's message keeps as the channel's
// last event.
type cacheUpdate struct{ app, channel, value string }

func (m *outMsg) size() int {
	n := len(m.msg) + 64
	if m.cache != nil {
		n += len(m.cache.app) + len(m.cache.channel) + len(m.cache.value)
	}
	return n
}

// pubReq is a batch of messages to publish, answered on done.
type pubReq struct {
	msgs []*outMsg
	done chan error
}

// keepReq is a publish call's append to its app's channel history, made
// by the script that publishes its messages; err is its outcome.
type keepReq struct {
	store  *EventLogStore
	shard  int // the shard's (EventLogStore.place) the append is made on
	app    string
	policy eventlog.Policy
	now    time.Time
	err    error
}

// Publish sends the messages to every node, in order, and returns once
// Redis has them. It returns hub.ErrUnavailable at once while Redis does
// not answer.
func (c *member) Publish(ms ...hub.Message) error {
	if len(ms) == 0 {
		return nil
	}
	return c.publish(outMsgs(ms))
}

func outMsgs(ms []hub.Message) []*outMsg {
	out := make([]*outMsg, len(ms))
	for i, m := range ms {
		out[i] = &outMsg{slot: slotOf(m.AppID, m.Channel), msg: encodeEvent(m)}
		if m.Cache {
			out[i].cache = &cacheUpdate{app: m.AppID, channel: m.Channel, value: cacheValue(m.Event, m.Data)}
		}
	}
	return out
}

// publishKept publishes ms, of one app and of channels of this member,
// and appends them to their history in s in the same script call. An append that
// fails (the events are published all the same) is logged.
func (c *member) publishKept(s *EventLogStore, p eventlog.Policy, now time.Time, ms []hub.Message) error {
	app := ms[0].AppID
	keep := &keepReq{store: s, shard: c.shardIndex, app: app, policy: p, now: now}
	out := outMsgs(ms)
	for i, m := range ms {
		out[i].keep = keep
		out[i].entry = eventlog.Entry{Channel: m.Channel, Name: m.Event, Data: m.Data, Exclude: m.ExcludeSocketID}
	}
	if err := c.publish(out); err != nil {
		return err
	}
	if keep.err != nil {
		c.log.Warn("an event was delivered but not kept in its channel's history", zap.String("app_id", app), zap.Error(keep.err))
	}
	return nil
}

// Terminate publishes the request to close userID's connections on every
// node.
func (c *member) Terminate(appID, userID string) error {
	return c.publish([]*outMsg{{slot: Slots, msg: encodeFields(kindTerminate, appID, userID)}})
}

// StreamHistory is about how long the cluster's streams keep a message
// (XADD MINID ~, by Redis's clock): how far a node that lost touch with
// Redis for a moment can catch up.
const StreamHistory = 10 * time.Second

// streamOf is the key suffix of a slot's stream.
func streamOf(slot int) string {
	if slot == Slots {
		return globalStream
	}
	return slotStreams[slot]
}

func (c *member) publish(msgs []*outMsg) error {
	if !c.healthy.Load() {
		return hub.ErrUnavailable
	}
	req := &pubReq{msgs: msgs, done: make(chan error, 1)}
	select {
	case c.pub <- req:
	case <-c.ctx.Done():
		return hub.ErrUnavailable
	}
	select {
	case err := <-req.done:
		return err
	case <-c.ctx.Done(): // closing: the loop may have left before taking it
		return hub.ErrUnavailable
	}
}

// publishLoop sends the publishes of many callers in one script call:
// under load, a round trip to Redis, and an entry every node reads, carries
// every message that waited for it. It alone numbers messages and keeps
// the replay ring.
func (c *member) publishLoop() {
	const maxBatch = 256
	batch := make([]*pubReq, 0, maxBatch)
	var msgs []*outMsg
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.replayNow:
			if c.pubGen != "" {
				if err := c.replay(); err != nil {
					c.log.Warn("publishing again what Redis lost failed; retrying at the next publish", zap.Error(err))
				}
			}
			continue
		case req := <-c.pub:
			batch = append(batch[:0], req)
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case req := <-c.pub:
				batch = append(batch, req)
			default:
				break fill
			}
		}
		msgs = msgs[:0]
		for _, r := range batch {
			for _, m := range r.msgs {
				c.seq[m.slot]++
				m.seq = c.seq[m.slot]
				msgs = append(msgs, m)
			}
		}
		err := c.send(msgs)
		if err != nil {
			// The callers answer 503 and look no further.
			c.stats.publishErrors.Add(int64(len(batch)))
			c.log.Warn("publish to the cluster failed", zap.Error(err))
			err = hub.ErrUnavailable
		} else {
			// Counted together, replays left out of both: published ÷
			// calls is how many messages a call carries.
			c.stats.published.Add(int64(len(msgs)))
			c.stats.publishCalls.Add(1)
			for _, m := range msgs {
				// Appended: the ring publishes it again without (replay),
				// so its copy of the event's data goes.
				m.keep, m.entry = nil, eventlog.Entry{}
			}
			c.ring.add(msgs, time.Now())
		}
		for _, r := range batch {
			r.done <- err
		}
		clear(batch)
		clear(msgs)
	}
}

// send publishes msgs under the generation the node publishes under,
// first publishing the ring again when Redis lost its data.
func (c *member) send(msgs []*outMsg) error {
	if c.pubGen == "" {
		ctx, cancel := c.queryContext()
		g, err := c.generation(ctx)
		cancel()
		if err != nil {
			return err
		}
		c.pubGen = g
	}
	if c.forceReplay.Load() {
		if err := c.replay(); err != nil {
			return err
		}
	}
	err := c.sendUnder(c.pubGen, msgs, true)
	if !isGenerationLost(err) {
		return err
	}
	if err := c.replay(); err != nil {
		return err
	}
	return c.sendUnder(c.pubGen, msgs, true)
}

// replay publishes the ring again when Redis's generation is no longer the
// one the node published under, or after an outage (forceReplay: the Redis
// that answers may be a promoted replica that lacks the last writes), then
// publishes under the generation Redis has.
func (c *member) replay() (err error) {
	force := c.forceReplay.Swap(false)
	defer func() {
		if err != nil && force {
			c.forceReplay.Store(true)
		}
	}()
	ctx, cancel := c.queryContext()
	g, err := c.generation(ctx)
	cancel()
	if err != nil || (g == c.pubGen && !force) {
		return err
	}
	msgs := c.ring.msgs
	if g != c.pubGen {
		c.log.Warn("Redis lost its data: publishing again what this node published in the last moments, for the nodes that had not read it",
			zap.Int("messages", len(msgs)), zap.Duration("window", c.opts.ReplayWindow))
	} else if len(msgs) > 0 {
		c.log.Info("Redis answers again: publishing again what this node published in the last moments, in case it lost some (a failover)",
			zap.Int("messages", len(msgs)), zap.Duration("window", c.opts.ReplayWindow))
	}
	for len(msgs) > 0 {
		n := min(len(msgs), 512)
		// Without their history appends: those were made (the ids
		// they had are of a history Redis lost with the rest).
		if err := c.sendUnder(g, msgs[:n], false); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	c.stats.replayed.Add(int64(len(c.ring.msgs)))
	c.pubGen = g
	return nil
}

// errGenerationLost is publishScript's answer when Redis no longer has the
// generation it was given.
const errGenerationLost = "HERALDGEN"

func isGenerationLost(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, errGenerationLost)
}

// sendUnder runs publishScript for msgs, which are in sequence order in
// each stream; with keep, the history appends of kept messages too.
func (c *member) sendUnder(gen string, msgs []*outMsg, keep bool) error {
	args := make([]any, 0, 8+4*len(msgs))
	args = append(args, c.scriptCtx, globalStream, gen, c.epoch, "", 0)
	var groups []keptGroup
	var index map[*outMsg]int // a kept message's place in the appends' ids, from 1
	if keep && slices.ContainsFunc(msgs, func(m *outMsg) bool { return m.keep != nil }) {
		index = map[*outMsg]int{}
		args, groups = appendGroups(args, msgs, index)
		args[5] = len(groups)
	}
	var bySlot [Slots + 1][]*outMsg
	for _, m := range msgs {
		bySlot[m.slot] = append(bySlot[m.slot], m)
	}
	for slot, msgs := range bySlot {
		stream := streamOf(slot)
		for i := 0; i < len(msgs); {
			m := msgs[i]
			if m.cache != nil {
				args = append(args, "c", stream, entryFields(m.msg, c.epoch, m.seq), positionsOf(msgs[i:i+1], index), m.cache.app, m.cache.channel, m.cache.value, hub.CacheTTL.Milliseconds())
				i++
				continue
			}
			// The plain messages that follow with consecutive numbers go in
			// one entry, numbered by its first.
			j := i + 1
			for j < len(msgs) && msgs[j].cache == nil && msgs[j].seq == msgs[j-1].seq+1 {
				j++
			}
			args = append(args, "x", stream, entryFields(packed(msgs[i:j]), c.epoch, m.seq), positionsOf(msgs[i:j], index))
			i = j
		}
	}
	if len(groups) > 0 {
		c.pubCalls++
		args[4] = strconv.FormatUint(c.pubCalls, 36)
	}
	cl := &call{script: publishScript, args: args}
	c.exec(c.ctx, []*call{cl})
	if cl.err != nil {
		return cl.err
	}
	keptOutcomes(groups, cl.val)
	return nil
}

// keptGroup is one history append of publishScript: the kept messages of
// consecutive publish calls of one store, app and policy, at the latest
// of their times (an event's id is never below its channel's last anyway).
type keptGroup struct {
	reqs []*keepReq
}

// appendGroups appends to args the history appends of msgs' kept messages,
// grouped, and records each kept message's place in index.
func appendGroups(args []any, msgs []*outMsg, index map[*outMsg]int) ([]any, []keptGroup) {
	var kept []*outMsg
	for _, m := range msgs {
		if m.keep != nil {
			kept = append(kept, m)
		}
	}
	var groups []keptGroup
	for i := 0; i < len(kept); {
		k := kept[i].keep
		j, now := i, k.now
		var reqs []*keepReq
		for j < len(kept) && kept[j].keep.store == k.store && kept[j].keep.app == k.app && kept[j].keep.policy == k.policy {
			r := kept[j].keep
			if len(reqs) == 0 || reqs[len(reqs)-1] != r {
				reqs = append(reqs, r)
			}
			if r.now.After(now) {
				now = r.now
			}
			j++
		}
		nowMS := now.UnixMilli()
		args = append(args, k.app, nowMS, nowMS-k.policy.TTL.Milliseconds(), k.policy.Events,
			k.store.limits.MaxBytes, k.store.limits.MaxChannels, k.policy.TTL.Milliseconds(), j-i)
		for _, m := range kept[i:j] {
			index[m] = len(index) + 1
			args = append(args, m.entry.Channel, m.entry.Name, m.entry.Data, m.entry.Exclude)
		}
		groups = append(groups, keptGroup{reqs: reqs})
		i = j
	}
	return args, groups
}

// positionsOf is the place of each of msgs in the appends' ids ("-" for
// one not kept), space-separated; empty when none is kept.
func positionsOf(msgs []*outMsg, index map[*outMsg]int) string {
	if len(index) == 0 {
		return ""
	}
	parts := make([]string, len(msgs))
	kept := false
	for i, m := range msgs {
		if n, ok := index[m]; ok {
			parts[i], kept = strconv.Itoa(n), true
		} else {
			parts[i] = "-"
		}
	}
	if !kept {
		return ""
	}
	return strings.Join(parts, " ")
}

// keptOutcomes records publishScript's answer v for its history appends,
// groups: each one's figures, or its error. A call sent again ("dup") was
// answered the first time, whose answer was lost.
func keptOutcomes(groups []keptGroup, v any) {
	answers, _ := v.([]any)
	if len(groups) == 0 || v == "dup" {
		return
	}
	for i, g := range groups {
		if err := keptOutcome(g.reqs[0], answers, i); err != nil {
			for _, r := range g.reqs {
				r.err = err
			}
		}
	}
}

// keptOutcome records the answer of the i-th append, of k's app.
func keptOutcome(k *keepReq, answers []any, i int) error {
	if i >= len(answers) {
		return fmt.Errorf("keep channel history: %d answers for more appends", len(answers))
	}
	if msg, ok := answers[i].(string); ok {
		return fmt.Errorf("keep channel history: %s", msg)
	}
	raw, _ := answers[i].([]any)
	nums := make([]int64, len(raw))
	for j, x := range raw {
		n, ok := x.(int64)
		if !ok {
			return fmt.Errorf("keep channel history: unexpected answer %v", answers[i])
		}
		nums[j] = n
	}
	return k.store.appended(k.app, k.shard, nums, nil)
}

// packed is the stream entry of consecutive messages: one as itself,
// several as a batch.
func packed(msgs []*outMsg) string {
	if len(msgs) == 1 {
		return msgs[0].msg
	}
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = m.msg
	}
	return encodeFields(kindBatch, parts...)
}

// replayRing is what the node published in the last ReplayWindow, up to
// ReplayBytes, oldest first. Only the publish loop touches it.
type replayRing struct {
	msgs   []*outMsg
	bytes  int
	window time.Duration
	max    int
}

// add keeps msgs, which Redis took at now, and forgets what is older than
// the window or over the byte bound. Nothing is forgotten while Redis does
// not take publishes, so what it took just before it went stays.
func (r *replayRing) add(msgs []*outMsg, now time.Time) {
	for _, m := range msgs {
		m.at = now
		r.bytes += m.size()
	}
	r.msgs = append(r.msgs, msgs...)
	drop := 0
	for drop < len(r.msgs) && (now.Sub(r.msgs[drop].at) > r.window || r.bytes > r.max) {
		r.bytes -= r.msgs[drop].size()
		drop++
	}
	if drop > 0 {
		clear(r.msgs[:drop])
		r.msgs = r.msgs[drop:]
	}
}

// origins remembers, per publishing process, the last message number the
// node delivered, so that a message published again (see replay) is
// delivered only by the nodes that had not had it. Only the receive loop
// touches it.
type origins struct {
	last  map[string]*originSeen
	swept time.Time
}

type originSeen struct {
	seq uint64
	at  time.Time
}

// originIdle is how long an origin is remembered after its last message.
const originIdle = 10 * time.Minute

// fresh reports whether message seq of origin is new here, and records it.
func (o *origins) fresh(origin string, seq uint64, now time.Time) bool {
	s := o.last[origin]
	if s == nil {
		if o.last == nil {
			o.last = make(map[string]*originSeen)
		}
		s = &originSeen{}
		o.last[origin] = s
	}
	s.at = now
	if seq <= s.seq {
		return false
	}
	s.seq = seq
	return true
}

// sweep forgets origins not heard from in originIdle, once a minute.
func (o *origins) sweep(now time.Time) {
	if now.Sub(o.swept) < time.Minute {
		return
	}
	o.swept = now
	for k, s := range o.last {
		if now.Sub(s.at) > originIdle {
			delete(o.last, k)
		}
	}
}

// entryOrigin returns a stream entry's origin and first message number
// (its o and s fields); the origin is empty for entries the scripts of the
// cluster state wrote, which are never published again, and for an entry
// whose number cannot be read.
func entryOrigin(o, s string) (origin string, seq uint64) {
	seq, err := strconv.ParseUint(s, 10, 64)
	if o == "" || err != nil {
		return "", 0
	}
	return o, seq
}

// askReplay has the publish loop check, soon, whether Redis lost its data
// and the ring must be published again.
func (c *member) askReplay() {
	select {
	case c.replayNow <- struct{}{}:
	default:
	}
}

// replayAnyway has the publish loop publish its window again soon even
// when Redis's generation did not change: the Redis that answers may be
// another server (a promoted replica) without the last writes.
func (c *member) replayAnyway() {
	c.forceReplay.Store(true)
	c.askReplay()
}
