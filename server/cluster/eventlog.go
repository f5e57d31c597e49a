package cluster

import (
	"context"
	"fmt"
	"strconv"
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
	cluster Cluster

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

// EventLog returns the store of the cluster's channel histories, on its
// Redis under its prefix.
func (c *member) EventLog(limits eventlog.Limits) *EventLogStore {
	s := NewEventLogStore(func(string) redis.Cmdable { return c.rdb }, c.p, limits)
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
	args := make([]any, 8, 8+4*len(entries))
	args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7] = nowMS, nowMS-p.TTL.Milliseconds(),
		p.Events, s.limits.MaxBytes, s.limits.MaxChannels, p.TTL.Milliseconds(), s.streamPrefix(app), s.token()
	for _, e := range entries {
		keys = append(keys, s.streamPrefix(app)+e.Channel)
		args = append(args, e.Channel, e.Name, e.Data, e.Exclude)
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
