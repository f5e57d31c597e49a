package cluster

import (
	"context"
	"fmt"
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
}

var _ eventlog.Store = (*EventLogStore)(nil)

// NewEventLogStore returns the store over the Redis rdb gives for each app,
// its keys under prefix, bounded per app by limits.
func NewEventLogStore(rdb func(app string) redis.Cmdable, prefix string, limits eventlog.Limits) *EventLogStore {
	return &EventLogStore{rdb: rdb, prefix: prefix, limits: limits.WithDefaults()}
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

// histAppendScript: KEYS meta lru sizes stream…; ARGV now_ms floor_ms
// max_events max_bytes max_channels ttl_ms stream_prefix, then channel name
// data per entry, in the order of the streams. Answers the events dropped
// by reason (events, age, bytes, channels), then the app's events and bytes.
var histAppendScript = redis.NewScript(`
local meta, lru, sizes = KEYS[1], KEYS[2], KEYS[3]
local now, floor = ARGV[1], tonumber(ARGV[2])
local maxEvents, maxBytes, maxChannels = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ttl, prefix = ARGV[6], ARGV[7]
local dropped = {0, 0, 0, 0}
local function account(c, n, b, why)
  redis.call('HINCRBY', meta, 'events', -n)
  redis.call('HINCRBY', meta, 'bytes', -b)
  dropped[why] = dropped[why] + n
  if redis.call('HINCRBY', sizes, 'n:' .. c, -n) <= 0 then
    redis.call('DEL', prefix .. c)
    redis.call('ZREM', lru, c)
    redis.call('HDEL', sizes, 'n:' .. c, 'b:' .. c, 'l:' .. c)
  else
    redis.call('HINCRBY', sizes, 'b:' .. c, -b)
  end
end
local function dropChannel(c, why)
  local n = tonumber(redis.call('HGET', sizes, 'n:' .. c) or '0')
  local b = tonumber(redis.call('HGET', sizes, 'b:' .. c) or '0')
  account(c, n, b, why)
end
-- entries: as XRANGE answers them, the oldest of channel c.
local function dropEntries(c, entries, why)
  if #entries == 0 then return end
  local ids, b = {}, 0
  for i, e in ipairs(entries) do
    ids[i] = e[1]
    b = b + #e[2][2] + #e[2][4]
  end
  redis.call('XDEL', prefix .. c, unpack(ids))
  account(c, #entries, b, why)
end
-- Channels not written to for the TTL hold only expired events.
for _ = 1, 100 do
  local front = redis.call('ZRANGE', lru, 0, 0)[1]
  if not front or tonumber(redis.call('HGET', sizes, 'l:' .. front) or '0') >= floor then break end
  dropChannel(front, 2)
end
for i = 0, (#ARGV - 7) / 3 - 1 do
  local c, name, data, key = ARGV[8 + 3 * i], ARGV[9 + 3 * i], ARGV[10 + 3 * i], KEYS[4 + i]
  local ms = now
  local last = redis.call('HGET', sizes, 'l:' .. c)
  if last and tonumber(last) > tonumber(now) then ms = last end
  if not last then
    -- Unknown to the counts (they expired before it, under a shorter
    -- TTL): what it holds is counted nowhere, so it goes.
    redis.call('DEL', key)
  end
  redis.call('XADD', key, ms .. '-*', 'e', name, 'd', data)
  redis.call('PEXPIRE', key, ttl)
  local size = #name + #data
  redis.call('HSET', sizes, 'l:' .. c, ms)
  redis.call('HINCRBY', sizes, 'b:' .. c, size)
  local n = redis.call('HINCRBY', sizes, 'n:' .. c, 1)
  redis.call('HINCRBY', meta, 'bytes', size)
  redis.call('HINCRBY', meta, 'events', 1)
  redis.call('ZADD', lru, redis.call('HINCRBY', meta, 'seq', 1), c)
  while redis.call('ZCARD', lru) > maxChannels do
    dropChannel(redis.call('ZRANGE', lru, 0, 0)[1], 4)
  end
  if n > maxEvents then
    dropEntries(c, redis.call('XRANGE', key, '-', '+', 'COUNT', n - maxEvents), 1)
  end
  dropEntries(c, redis.call('XRANGE', key, '-', '(' .. ARGV[2] .. '-0'), 2)
  while tonumber(redis.call('HGET', meta, 'bytes')) > maxBytes do
    local front = redis.call('ZRANGE', lru, 0, 0)[1]
    if not front then break end
    local oldest = redis.call('XRANGE', prefix .. front, '-', '+', 'COUNT', 1)
    if #oldest == 0 then
      dropChannel(front, 3) -- its stream expired under it
    else
      dropEntries(front, oldest, 3)
    end
  end
end
redis.call('PEXPIRE', meta, ttl)
redis.call('PEXPIRE', lru, ttl)
redis.call('PEXPIRE', sizes, ttl)
local held = redis.call('HMGET', meta, 'events', 'bytes')
return {dropped[1], dropped[2], dropped[3], dropped[4], tonumber(held[1] or '0'), tonumber(held[2] or '0')}
`)

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
	args := make([]any, 7, 7+3*len(entries))
	args[0], args[1], args[2], args[3], args[4], args[5], args[6] = nowMS, nowMS-p.TTL.Milliseconds(),
		p.Events, s.limits.MaxBytes, s.limits.MaxChannels, p.TTL.Milliseconds(), s.streamPrefix(app)
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
	if len(v) != 6 {
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
		start := floor.String()
		if !q.After.IsZero() && !q.After.Less(floor) {
			start = "(" + q.After.String()
		}
		msgs, err = rdb.XRangeN(ctx, key, start, "+", int64(limit+1)).Result()
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
