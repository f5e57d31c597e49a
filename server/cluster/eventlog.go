package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
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
	// place is where a channel's history is: the Redis and the key prefix
	// of its shard (of shards, from 0): with the channel's stream, so that
	// the script that publishes an event appends it too and a
	// subscription's join reads it (recovery).
	place func(app, channel string) (rdb redis.Cmdable, prefix string, shard int)
	// limits bound what an app keeps on each shard: the app's limits split
	// evenly over the shards, so that all of it keeps within them.
	limits eventlog.Limits
	// cluster is the cluster whose EventLog made it: its publishes append
	// their events in the same round trip (PublishKept).
	cluster Cluster

	held    sync.Map // heldKey → eventlog.AppStats as the last append to that shard saw them
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

// NewEventLogStore returns the store over the Redis rdb, its keys under
// prefix, bounded per app by limits.
func NewEventLogStore(rdb redis.Cmdable, prefix string, limits eventlog.Limits) *EventLogStore {
	return newEventLogStore(func(string, string) (redis.Cmdable, string, int) { return rdb, prefix, 0 }, 1, limits)
}

// newEventLogStore returns the store over shards shards, place saying
// which is a channel's, bounded per app by limits in all.
func newEventLogStore(place func(app, channel string) (redis.Cmdable, string, int), shards int, limits eventlog.Limits) *EventLogStore {
	l := limits.WithDefaults()
	// Ceilings, so that no shard's bound is 0.
	l.MaxBytes = (l.MaxBytes + shards - 1) / shards
	l.MaxChannels = (l.MaxChannels + shards - 1) / shards
	return &EventLogStore{place: place, limits: l, origin: randomID() + ":"}
}

// EventLog returns the store of the cluster's channel histories, on its
// Redis under its prefix.
func (c *member) EventLog(limits eventlog.Limits) *EventLogStore {
	s := NewEventLogStore(c.rdb, c.p, limits)
	s.cluster = c
	return s
}

// key is the key of app's history on the shard with prefix.
func key(prefix, app string) string { return prefix + "hist:{" + app + "}" }

// key is the key of app's history on the first shard (the only one but
// over shards).
func (s *EventLogStore) key(app string) string { return key(s.prefixOf(app), app) }

// prefixOf is the key prefix of app's history on the first shard.
func (s *EventLogStore) prefixOf(app string) string {
	_, prefix, _ := s.place(app, "")
	return prefix
}

// heldKey names what an app holds on a shard, in held.
type heldKey struct {
	app   string
	shard int
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
	// Each shard's entries, in order, in one call.
	var errs []error
	for len(entries) > 0 {
		rdb, prefix, shard := s.place(app, entries[0].Channel)
		var here, rest []eventlog.Entry
		for _, e := range entries {
			if _, _, sh := s.place(app, e.Channel); sh == shard {
				here = append(here, e)
			} else {
				rest = append(rest, e)
			}
		}
		cl := s.appendCall(prefix, app, p, here, now)
		v, err := histAppendScript.Run(ctx, rdb, cl.keys, cl.args...).Int64Slice()
		errs = append(errs, s.appended(app, shard, v, err))
		entries = rest
	}
	return errors.Join(errs...)
}

// appendCall is the script call that appends entries, all of one shard
// (whose keys begin with prefix), to app's history.
func (s *EventLogStore) appendCall(prefix, app string, p eventlog.Policy, entries []eventlog.Entry, now time.Time) *call {
	base := key(prefix, app)
	keys := make([]string, 3, 3+len(entries))
	keys[0], keys[1], keys[2] = base, base+":lru", base+":sizes"
	nowMS := now.UnixMilli()
	args := make([]any, 7, 7+4*len(entries))
	args[0], args[1], args[2], args[3], args[4], args[5], args[6] = nowMS, nowMS-p.TTL.Milliseconds(),
		p.Events, s.limits.MaxBytes, s.limits.MaxChannels, p.TTL.Milliseconds(), s.token()
	for _, e := range entries {
		keys = append(keys, base+":c:"+e.Channel)
		args = append(args, e.Channel, e.Name, e.Data, e.Exclude)
	}
	return &call{script: histAppendScript, keys: keys, args: args}
}

// appended records the answer v (or the error) of an append to app's
// history.
func (s *EventLogStore) appended(app string, shard int, v []int64, err error) error {
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
	s.held.Store(heldKey{app, shard}, eventlog.AppStats{AppID: app, Events: v[4], Bytes: v[5]})
	return nil
}

// Read implements eventlog.Store.
func (s *EventLogStore) Read(ctx context.Context, app, channel string, p eventlog.Policy, q eventlog.Query, now time.Time) (eventlog.Page, error) {
	if !p.On() {
		return eventlog.Page{}, nil
	}
	rdb, prefix, _ := s.place(app, channel)
	key := key(prefix, app) + ":c:" + channel
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
	apps := map[string]int{} // place in st.Apps
	s.held.Range(func(_, v any) bool {
		a := v.(eventlog.AppStats)
		if i, ok := apps[a.AppID]; ok {
			st.Apps[i].Events += a.Events
			st.Apps[i].Bytes += a.Bytes
			return true
		}
		apps[a.AppID] = len(st.Apps)
		st.Apps = append(st.Apps, a)
		return true
	})
	for r := range st.Dropped {
		st.Dropped[r] = s.dropped[r].Load()
	}
	return st
}

var _ hub.Keeper = (*EventLogStore)(nil)

// PublishKept implements hub.Keeper: the cluster whose EventLog made the
// store publishes ms, and its scripts append them to their channels'
// history as they publish them, so that their ids follow the order every
// node delivers them in (recovery's positions, which the messages carry)
// and the trigger waits for one round trip instead of two. Messages of
// several apps, or a policy that keeps nothing, are published alone (not
// kept): the caller appends.
func (s *EventLogStore) PublishKept(p eventlog.Policy, now time.Time, ms []hub.Message) (bool, error) {
	if s.cluster == nil {
		return false, errors.New("cluster: a channel history of no cluster cannot publish")
	}
	if !p.On() || len(ms) == 0 {
		return false, s.cluster.Publish(ms...)
	}
	for _, m := range ms[1:] {
		if m.AppID != ms[0].AppID {
			return false, s.cluster.Publish(ms...)
		}
	}
	return true, s.cluster.publishKept(s, p, now, ms)
}
