package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/eventlog"
)

// EventLogStore keeps the channel history of the apps that ask for it in
// Redis, so that every node of the cluster reads the same events with the
// same ids. An app's history lives in one hash slot (the hash tag {<app>}),
// on the shard of the app, so that every append is one script that keeps
// the app's bounds exactly:
//
//	<prefix>hist:{<app>}              hash: events, bytes (what the app holds), seq
//	<prefix>hist:{<app>}:lru          sorted set: channels by their last append (seq)
//	<prefix>hist:{<app>}:sizes        hash: per channel n:<c> events, b:<c> bytes, l:<c> last append (ms)
//	<prefix>hist:{<app>}:c:<channel>  stream: the channel's events (fields e, d)
//
// Stream entry ids are the event ids: "<ms>-<seq>" from the appending node's
// clock, never below the channel's last. Every key expires a TTL after the
// app's (or the channel's) last append, so an app that stops writing leaves
// nothing behind. One slot per app puts a busy app's history on one Redis
// instance; the history is written once per event, not read by every node,
// so that is the write rate of one app.
type EventLogStore struct {
	rdb    func(app string) redis.Cmdable
	prefix string
	limits eventlog.Limits
	// cluster is the cluster whose EventLog made it: its publishes append
	// their events in the same round trip (PublishKept).
	cluster *Cluster

	held    sync.Map // app id → eventlog.AppStats as the last append saw them
	dropped [4]atomic.Int64
	// origin and calls make each append call's token: origin names this
	// store (random), calls counts its calls.
	origin string
	calls  atomic.Uint64
}

// token names one append call, so that the script can tell it sent again.
func (s *EventLogStore) token() string {
	return s.origin + strconv.FormatUint(s.calls.Add(1), 36)
}

var _ eventlog.Store = (*EventLogStore)(nil)

// NewEventLogStore returns the store over the Redis rdb gives for each app,
// its keys under prefix, bounded per app by limits.
func NewEventLogStore(rdb func(app string) redis.Cmdable, prefix string, limits eventlog.Limits) *EventLogStore {
	return &EventLogStore{rdb: rdb, prefix: prefix, limits: limits.WithDefaults(), origin: randomID() + ":"}
}

// EventLog returns the store of the cluster's channel histories, each app's
// on its shard under the cluster's prefix.
func (c *Cluster) EventLog(limits eventlog.Limits) *EventLogStore {
	s := NewEventLogStore(func(app string) redis.Cmdable { return c.shardFor(app, "").rdb }, c.p, limits)
	s.cluster = c
	return s
}

func (s *EventLogStore) key(app string) string { return s.prefix + "hist:{" + app + "}" }
func (s *EventLogStore) streamPrefix(app string) string {
	return s.key(app) + ":c:"
}

// TrimBudget bounds the work of one append script call, so that no app's
// append blocks Redis for the others: besides one event read and dropped
// per entry it appends, it reads and drops at most TrimBudget events one
// at a time and drops at most TrimBudget channels whole (each at a cost
// that does not grow with its events). What it leaves for lack of budget,
// the next appends drop first; should the app be over its bytes when the
// budget runs out, the call's own events go (the oldest first) until it
// holds no more than before the call, so an app's bytes never grow past
// its bound.
const TrimBudget = 1000

// histAppendScript: KEYS meta lru sizes stream…; ARGV now_ms floor_ms
// max_events max_bytes max_channels ttl_ms stream_prefix token, then
// channel name data per entry, in the order of the streams. Answers the
// events dropped by reason (events, age, bytes, channels), the app's
// events and bytes, then the work done one by one: the events read to drop
// them and the channels dropped whole. A call whose token is the last the
// app's history took is the same call again (go-redis sends a pipeline
// again when its answers were lost on the way): it appends nothing.
var histAppendScript = redis.NewScript(strings.NewReplacer(
	"{{event_overhead}}", strconv.Itoa(eventlog.EventOverhead),
	"{{channel_overhead}}", strconv.Itoa(eventlog.ChannelOverhead),
	"{{name_copies}}", strconv.Itoa(eventlog.ChannelNameCopies),
	"{{budget}}", strconv.Itoa(TrimBudget),
).Replace(`
local meta, lru, sizes = KEYS[1], KEYS[2], KEYS[3]
local now, floor = ARGV[1], tonumber(ARGV[2])
local maxEvents, maxBytes, maxChannels = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ttl, prefix = ARGV[6], ARGV[7]
local n = (#ARGV - 8) / 3
local dropped = {0, 0, 0, 0}
if redis.call('HGET', meta, 'token') == ARGV[8] then
  local h = redis.call('HMGET', meta, 'events', 'bytes')
  return {0, 0, 0, 0, tonumber(h[1] or '0'), tonumber(h[2] or '0'), 0, 0}
end
redis.call('HSET', meta, 'token', ARGV[8])
-- What this call may still do one by one.
local events, channels = {{budget}} + n, {{budget}}
local function held() return tonumber(redis.call('HGET', meta, 'bytes') or '0') end
-- account: k events of c that cost b went for reason why, and c with them
-- (its own cost too) when none is left. (0 - x, not -x: Lua writes -0 for
-- a zero, which Redis takes for no integer.)
local function account(c, k, b, why)
  dropped[why] = dropped[why] + k
  redis.call('HINCRBY', meta, 'events', 0 - k)
  local left = redis.call('HINCRBY', sizes, 'n:' .. c, 0 - k)
  local rest = redis.call('HINCRBY', sizes, 'b:' .. c, 0 - b)
  if left <= 0 then
    b = b + rest
    redis.call('UNLINK', prefix .. c)
    redis.call('ZREM', lru, c)
    redis.call('HDEL', sizes, 'n:' .. c, 'b:' .. c, 'l:' .. c)
  end
  redis.call('HINCRBY', meta, 'bytes', 0 - b)
end
-- dropChannel drops c whole: its counts say what it held.
local function dropChannel(c, why)
  channels = channels - 1
  account(c, tonumber(redis.call('HGET', sizes, 'n:' .. c) or '0'), 0, why)
end
-- dropOldest drops the oldest events of c up to the id upto, at most k of
-- them, fewer once they free need bytes (need false: all k); it answers
-- the bytes they freed (0: none was there).
local function dropOldest(c, k, upto, need, why)
  k = math.min(k, events)
  if k <= 0 then return 0 end
  local es = redis.call('XRANGE', prefix .. c, '-', upto, 'COUNT', k)
  local b, m = 0, 0
  for _, e in ipairs(es) do
    m = m + 1
    b = b + #e[2][2] + #e[2][4] + {{event_overhead}}
    if need and b >= need then break end
  end
  if m == 0 then return 0 end
  events = events - m
  local last = es[m][1]
  local dash = string.find(last, '-', 1, true)
  -- Trimmed from the front rather than deleted one by one: Redis frees
  -- the stream's nodes as they empty.
  redis.call('XTRIM', prefix .. c, 'MINID', string.sub(last, 1, dash - 1) .. '-' .. string.format('%d', tonumber(string.sub(last, dash + 1)) + 1))
  account(c, m, b, why)
  return b
end
local before = held()
-- Channels not written to for the TTL hold only expired events.
for _ = 1, 100 do
  local front = redis.call('ZRANGE', lru, 0, 0)[1]
  if not front or channels <= 0 or tonumber(redis.call('HGET', sizes, 'l:' .. front) or '0') >= floor then break end
  dropChannel(front, 2)
end
local mine = {}
for i = 0, n - 1 do
  local c, name, data, key = ARGV[9 + 3 * i], ARGV[10 + 3 * i], ARGV[11 + 3 * i], KEYS[4 + i]
  local ms = now
  local last = redis.call('HGET', sizes, 'l:' .. c)
  if last and tonumber(last) > tonumber(now) then ms = last end
  if not last then
    -- A new channel: its own cost. A stream the counts do not know (they
    -- expired before it, under a shorter TTL) is counted nowhere, so it
    -- goes.
    redis.call('UNLINK', key)
    local cost = {{channel_overhead}} + {{name_copies}} * #c
    redis.call('HSET', sizes, 'b:' .. c, cost)
    redis.call('HINCRBY', meta, 'bytes', cost)
  end
  local id = redis.call('XADD', key, ms .. '-*', 'e', name, 'd', data)
  redis.call('PEXPIRE', key, ttl)
  local size = #name + #data + {{event_overhead}}
  mine[#mine + 1] = {c, id, size}
  redis.call('HSET', sizes, 'l:' .. c, ms)
  redis.call('HINCRBY', sizes, 'b:' .. c, size)
  local count = redis.call('HINCRBY', sizes, 'n:' .. c, 1)
  redis.call('HINCRBY', meta, 'bytes', size)
  redis.call('HINCRBY', meta, 'events', 1)
  redis.call('ZADD', lru, redis.call('HINCRBY', meta, 'seq', 1), c)
  while channels > 0 and redis.call('ZCARD', lru) > maxChannels do
    dropChannel(redis.call('ZRANGE', lru, 0, 0)[1], 4)
  end
  if count > maxEvents then
    dropOldest(c, count - maxEvents, '+', false, 1)
  end
  dropOldest(c, events, '(' .. ARGV[2] .. '-0', false, 2)
end
-- The bytes, once the entries are in: the channel written least recently
-- gives its oldest events, whole when all of it must go.
while true do
  local over = held() - maxBytes
  if over <= 0 then break end
  local front = redis.call('ZRANGE', lru, 0, 0)[1]
  if not front then break end
  if tonumber(redis.call('HGET', sizes, 'b:' .. front) or '0') <= over then
    if channels <= 0 then break end
    dropChannel(front, 3)
  else
    if events <= 0 then break end
    if dropOldest(front, events, '+', over, 3) == 0 then
      if channels <= 0 then break end
      dropChannel(front, 3) -- its stream expired under it
    end
  end
end
-- Out of budget and over the bound: this call's own events go, so the app
-- holds no more than before it.
local i = 1
while held() > math.max(maxBytes, before) and i <= #mine do
  local c, id, size = mine[i][1], mine[i][2], mine[i][3]
  if redis.call('XDEL', prefix .. c, id) == 1 then account(c, 1, size, 3) end
  i = i + 1
end
redis.call('PEXPIRE', meta, ttl)
redis.call('PEXPIRE', lru, ttl)
redis.call('PEXPIRE', sizes, ttl)
local h = redis.call('HMGET', meta, 'events', 'bytes')
return {dropped[1], dropped[2], dropped[3], dropped[4], tonumber(h[1] or '0'), tonumber(h[2] or '0'),
  {{budget}} + n - events, {{budget}} - channels}
`))

// Append implements eventlog.Store.
func (s *EventLogStore) Append(ctx context.Context, app string, p eventlog.Policy, entries []eventlog.Entry, now time.Time) error {
	if !p.On() || len(entries) == 0 {
		return nil
	}
	cl := s.appendCall(app, p, entries, now)
	v, err := histAppendScript.Run(ctx, s.rdb(app), cl.keys, cl.args...).Int64Slice()
	return s.appended(app, v, err)
}

// appendCall is the script call that appends entries to app's history.
func (s *EventLogStore) appendCall(app string, p eventlog.Policy, entries []eventlog.Entry, now time.Time) *call {
	keys := make([]string, 3, 3+len(entries))
	keys[0], keys[1], keys[2] = s.key(app), s.key(app)+":lru", s.key(app)+":sizes"
	nowMS := now.UnixMilli()
	args := make([]any, 8, 8+3*len(entries))
	args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7] = nowMS, nowMS-p.TTL.Milliseconds(),
		p.Events, s.limits.MaxBytes, s.limits.MaxChannels, p.TTL.Milliseconds(), s.streamPrefix(app), s.token()
	for _, e := range entries {
		keys = append(keys, s.streamPrefix(app)+e.Channel)
		args = append(args, e.Channel, e.Name, e.Data)
	}
	return &call{script: histAppendScript, keys: keys, args: args}
}

// appended records the answer v (or the error) of an append to app's
// history.
func (s *EventLogStore) appended(app string, v []int64, err error) error {
	if err != nil {
		return fmt.Errorf("keep channel history: %w", err)
	}
	if len(v) != 8 {
		return fmt.Errorf("keep channel history: unexpected answer %v", v)
	}
	for r := range 4 {
		if v[r] > 0 {
			s.dropped[r].Add(v[r])
		}
	}
	s.held.Store(app, eventlog.AppStats{AppID: app, Events: v[4], Bytes: v[5]})
	return nil
}

// appendedCall records the answer of an appendCall a pipeline ran.
func (s *EventLogStore) appendedCall(app string, cl *call) error {
	if cl.err != nil {
		return s.appended(app, nil, cl.err)
	}
	raw, _ := cl.val.([]any)
	v := make([]int64, len(raw))
	for i, x := range raw {
		n, ok := x.(int64)
		if !ok {
			return fmt.Errorf("keep channel history: unexpected answer %v", cl.val)
		}
		v[i] = n
	}
	return s.appended(app, v, nil)
}

// Read implements eventlog.Store.
func (s *EventLogStore) Read(ctx context.Context, app, channel string, p eventlog.Policy, q eventlog.Query, now time.Time) (eventlog.Page, error) {
	if !p.On() {
		return eventlog.Page{}, nil
	}
	rdb, key := s.rdb(app), s.streamPrefix(app)+channel
	floor := eventlog.ID{MS: uint64(now.Add(-p.TTL).UnixMilli())}
	n, err := rdb.XLen(ctx, key).Result()
	if err != nil {
		return eventlog.Page{}, fmt.Errorf("read channel history: %w", err)
	}
	if n > int64(p.Events) {
		// The app's policy shrank since these were kept: only its newest
		// count.
		newest, err := rdb.XRevRangeN(ctx, key, "+", "-", int64(p.Events)).Result()
		if err != nil {
			return eventlog.Page{}, fmt.Errorf("read channel history: %w", err)
		}
		if len(newest) > 0 {
			if b, err := eventlog.ParseID(newest[len(newest)-1].ID); err == nil && floor.Less(b) {
				floor = b
			}
		}
	}
	limit := q.Limit
	if limit <= 0 || limit > eventlog.MaxPage {
		limit = eventlog.MaxPage
	}
	var msgs []redis.XMessage
	if q.OldestFirst {
		start := floor
		if !q.After.IsZero() {
			next, ok := q.After.Next()
			if !ok {
				return eventlog.Page{}, nil // nothing comes after the last id there is
			}
			if floor.Less(next) {
				start = next
			}
		}
		msgs, err = rdb.XRangeN(ctx, key, start.String(), "+", int64(limit+1)).Result()
	} else {
		end := "+"
		if !q.After.IsZero() {
			end = "(" + q.After.String()
		}
		if !q.After.IsZero() && !floor.Less(q.After) {
			return eventlog.Page{}, nil // nothing before it is kept
		}
		msgs, err = rdb.XRevRangeN(ctx, key, end, floor.String(), int64(limit+1)).Result()
	}
	if err != nil {
		return eventlog.Page{}, fmt.Errorf("read channel history: %w", err)
	}
	var page eventlog.Page
	if len(msgs) > limit {
		msgs, page.More = msgs[:limit], true
	}
	page.Events = make([]eventlog.Event, 0, len(msgs))
	for _, m := range msgs {
		id, err := eventlog.ParseID(m.ID)
		if err != nil {
			return eventlog.Page{}, fmt.Errorf("read channel history: %w", err)
		}
		name, _ := m.Values["e"].(string)
		data, _ := m.Values["d"].(string)
		page.Events = append(page.Events, eventlog.Event{ID: id, Name: name, Data: data})
	}
	return page, nil
}

// Stats implements eventlog.Store: what each app held at this node's last
// append to it, and the events this node's appends dropped.
func (s *EventLogStore) Stats() eventlog.Stats {
	var st eventlog.Stats
	s.held.Range(func(_, v any) bool {
		st.Apps = append(st.Apps, v.(eventlog.AppStats))
		return true
	})
	for r := range st.Dropped {
		st.Dropped[r] = s.dropped[r].Load()
	}
	return st
}
