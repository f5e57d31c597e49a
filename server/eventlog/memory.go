package eventlog

import (
	"container/list"
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Memory is the Store of a node on its own: each app's history in the
// node's memory, lost with it.
type Memory struct {
	limits Limits

	mu   sync.RWMutex // guards apps (the map); each app has its own lock
	apps map[string]*appLog

	dropped [reasons]atomic.Int64
}

var _ Store = (*Memory)(nil)

// appLog is one app's history.
type appLog struct {
	mu       sync.Mutex
	channels map[string]*channelLog
	lru      list.List // of *channelLog, least recently appended to first
	bytes    int
	events   int
	ttl      time.Duration // of the app's last Append, for Sweep
	dead     bool          // Sweep took it out of Memory.apps: make a new one
}

// channelLog is one channel's events, oldest first from head.
type channelLog struct {
	name   string
	events []Event // events[head:] are kept
	head   int
	bytes  int
	last   ID // of the newest event ever appended, so IDs keep increasing
	elem   *list.Element
}

// NewMemory returns an empty in-memory store bounded by limits.
func NewMemory(limits Limits) *Memory {
	return &Memory{limits: limits.WithDefaults(), apps: make(map[string]*appLog)}
}

// app returns the log of app, made when create is set; nil otherwise.
func (m *Memory) app(app string, create bool) *appLog {
	m.mu.RLock()
	a := m.apps[app]
	m.mu.RUnlock()
	if a != nil || !create {
		return a
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a = m.apps[app]; a == nil {
		a = &appLog{channels: make(map[string]*channelLog)}
		m.apps[app] = a
	}
	return a
}

// Append implements Store.
func (m *Memory) Append(_ context.Context, app string, p Policy, entries []Entry, now time.Time) error {
	if !p.On() || len(entries) == 0 {
		return nil
	}
	a := m.app(app, true)
	a.mu.Lock()
	for a.dead {
		a.mu.Unlock()
		a = m.app(app, true)
		a.mu.Lock()
	}
	defer a.mu.Unlock()
	a.ttl = p.TTL
	// Channels not written to for the TTL hold only expired events.
	floor := uint64(now.Add(-p.TTL).UnixMilli())
	for e := a.lru.Front(); e != nil && e.Value.(*channelLog).last.MS < floor; e = a.lru.Front() {
		m.dropChannel(a, e.Value.(*channelLog), DroppedAge)
	}
	for _, e := range entries {
		m.append(a, p, e, now)
	}
	return nil
}

// append keeps one entry and restores the bounds. a.mu is held.
func (m *Memory) append(a *appLog, p Policy, e Entry, now time.Time) {
	ch := a.channels[e.Channel]
	if ch == nil {
		ch = &channelLog{name: e.Channel}
		ch.elem = a.lru.PushBack(ch)
		a.channels[e.Channel] = ch
		for len(a.channels) > m.limits.MaxChannels {
			m.dropChannel(a, a.lru.Front().Value.(*channelLog), DroppedChannels)
		}
	} else {
		a.lru.MoveToBack(ch.elem)
	}
	id := ID{MS: uint64(now.UnixMilli())}
	if !ch.last.Less(id) {
		id = ID{ch.last.MS, ch.last.Seq + 1}
	}
	ch.last = id
	ch.events = append(ch.events, Event{ID: id, Name: e.Name, Data: e.Data})
	size := e.size()
	ch.bytes += size
	a.bytes += size
	a.events++
	if over := ch.len() - p.Events; over > 0 {
		m.dropOldest(a, ch, over, DroppedEvents)
	}
	m.dropExpired(a, ch, p.TTL, now)
	for a.bytes > m.limits.MaxBytes && a.lru.Len() > 0 {
		m.dropOldest(a, a.lru.Front().Value.(*channelLog), 1, DroppedBytes)
	}
}

func (ch *channelLog) len() int { return len(ch.events) - ch.head }

// dropOldest drops the n oldest events of ch, and ch itself once empty.
func (m *Memory) dropOldest(a *appLog, ch *channelLog, n int, why Reason) {
	n = min(n, ch.len())
	for _, ev := range ch.events[ch.head : ch.head+n] {
		size := len(ev.Name) + len(ev.Data)
		ch.bytes -= size
		a.bytes -= size
	}
	clear(ch.events[ch.head : ch.head+n]) // let the strings go
	ch.head += n
	a.events -= n
	m.dropped[why].Add(int64(n))
	switch {
	case ch.len() == 0:
		a.lru.Remove(ch.elem)
		delete(a.channels, ch.name)
	case ch.head > len(ch.events)/2:
		// Move the kept events to the front, so the slice does not grow
		// without bound under a steady append and trim.
		n := copy(ch.events, ch.events[ch.head:])
		clear(ch.events[n:])
		ch.events = ch.events[:n]
		ch.head = 0
	}
}

// dropExpired drops the events of ch older than ttl.
func (m *Memory) dropExpired(a *appLog, ch *channelLog, ttl time.Duration, now time.Time) {
	floor := ID{MS: uint64(now.Add(-ttl).UnixMilli())}
	kept := ch.events[ch.head:]
	if n, _ := slices.BinarySearchFunc(kept, floor, compareID); n > 0 {
		m.dropOldest(a, ch, n, DroppedAge)
	}
}

// dropChannel drops the whole history of ch.
func (m *Memory) dropChannel(a *appLog, ch *channelLog, why Reason) {
	m.dropOldest(a, ch, ch.len(), why)
}

func compareID(e Event, id ID) int {
	switch {
	case e.ID.Less(id):
		return -1
	case id.Less(e.ID):
		return 1
	}
	return 0
}

// Read implements Store.
func (m *Memory) Read(_ context.Context, app, channel string, p Policy, q Query, now time.Time) (Page, error) {
	a := m.app(app, false)
	if a == nil || !p.On() {
		return Page{}, nil
	}
	floor := ID{MS: uint64(now.Add(-p.TTL).UnixMilli())}
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := a.channels[channel]
	if ch == nil {
		return Page{}, nil
	}
	kept := ch.events[ch.head:]
	// The events not expired, newest p.Events of them (the policy may have
	// shrunk since they were appended).
	from, _ := slices.BinarySearchFunc(kept, floor, compareID)
	from = max(from, len(kept)-p.Events)
	kept = kept[from:]
	limit := q.limit()
	var page Page
	if q.OldestFirst {
		start := 0
		if !q.After.IsZero() {
			start, _ = slices.BinarySearchFunc(kept, ID{q.After.MS, q.After.Seq + 1}, compareID)
		}
		end := min(len(kept), start+limit)
		page.Events = slices.Clone(kept[start:end])
		page.More = end < len(kept)
		return page, nil
	}
	end := len(kept)
	if !q.After.IsZero() {
		end, _ = slices.BinarySearchFunc(kept, q.After, compareID)
	}
	start := max(0, end-limit)
	page.Events = make([]Event, 0, end-start)
	for i := end - 1; i >= start; i-- {
		page.Events = append(page.Events, kept[i])
	}
	page.More = start > 0
	return page, nil
}

// Sweep drops the events past each app's TTL (as of its last Append) and
// forgets the apps left with none, so a channel no longer written to does
// not hold its events for ever. The node calls it now and then.
func (m *Memory) Sweep(now time.Time) {
	m.mu.RLock()
	apps := make(map[string]*appLog, len(m.apps))
	for id, a := range m.apps {
		apps[id] = a
	}
	m.mu.RUnlock()
	for id, a := range apps {
		a.mu.Lock()
		var chans []*channelLog
		for e := a.lru.Front(); e != nil; e = e.Next() {
			chans = append(chans, e.Value.(*channelLog))
		}
		for _, ch := range chans {
			m.dropExpired(a, ch, a.ttl, now)
		}
		empty := len(a.channels) == 0
		a.mu.Unlock()
		if empty {
			m.mu.Lock()
			// Still empty: an Append between the two locks would have
			// added a channel under a.mu, which we check again. One that
			// holds a already sees it dead and makes a new one.
			a.mu.Lock()
			if len(a.channels) == 0 && m.apps[id] == a {
				delete(m.apps, id)
				a.dead = true
			}
			a.mu.Unlock()
			m.mu.Unlock()
		}
	}
}

// Stats implements Store.
func (m *Memory) Stats() Stats {
	var st Stats
	m.mu.RLock()
	for id, a := range m.apps {
		a.mu.Lock()
		st.Apps = append(st.Apps, AppStats{AppID: id, Events: int64(a.events), Bytes: int64(a.bytes)})
		a.mu.Unlock()
	}
	m.mu.RUnlock()
	slices.SortFunc(st.Apps, func(x, y AppStats) int { return strings.Compare(x.AppID, y.AppID) })
	for r := range st.Dropped {
		st.Dropped[r] = m.dropped[r].Load()
	}
	return st
}
