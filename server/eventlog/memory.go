package eventlog

import (
	"container/list"
	"context"
	"crypto/rand"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Memory is the Store of a node on its own: each app's history in the
// node's memory, lost with it.
type Memory struct {
	limits Limits

	mu   sync.RWMutex // guards apps and forgotten; each app has its own lock
	apps map[string]*appLog
	// forgotten is the evicted ID of each app Sweep forgot (every event
	// past its TTL): its next log starts from it, so that a position from
	// before is not taken for one of a log that held nothing after it.
	forgotten map[string]ID

	dropped [reasons]atomic.Int64
	epoch   string // Epoch: made at random with the store
}

var _ Store = (*Memory)(nil)

// appLog is one app's history.
type appLog struct {
	mu       sync.Mutex
	channels map[string]*channelLog
	lru      list.List // of *channelLog, least recently appended to first
	bytes    int       // what the app's history costs: Entry.Cost and ChannelCost
	events   int
	ttl      time.Duration // of the app's last Append, for Sweep
	dead     bool          // Sweep took it out of Memory.apps: make a new one
	// evicted is the newest ID of any channel dropped whole: events after
	// a position before it may have been lost with their channel.
	evicted ID
}

// channelLog is one channel's events, oldest first, in a ring: no more
// slots than the channel's policy keeps events once full, so that a
// channel that appends and drops one event at a time holds no slack.
type channelLog struct {
	name  string
	ring  []Event // ring[head], ring[head+1], … (mod len), n of them
	head  int
	n     int
	bytes int
	last  ID // of the newest event ever appended, so IDs keep increasing
	since ID // of the first event of this log: what came before went with an earlier one
	gone  ID // of the newest event dropped while the log stayed
	elem  *list.Element
}

// NewMemory returns an empty in-memory store bounded by limits.
func NewMemory(limits Limits) *Memory {
	return &Memory{limits: limits.WithDefaults(), apps: make(map[string]*appLog), epoch: rand.Text()}
}

// Epoch implements Positioned: the store's own, so that a position kept
// from a process that ran before this one is not taken for one of its.
func (m *Memory) Epoch() string { return m.epoch }

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
		a = &appLog{channels: make(map[string]*channelLog), evicted: m.forgotten[app]}
		m.apps[app] = a
	}
	return a
}

// Append implements Store.
func (m *Memory) Append(ctx context.Context, app string, p Policy, entries []Entry, now time.Time) error {
	_, err := m.AppendIDs(ctx, app, p, entries, now)
	return err
}

// AppendIDs implements Positioned.
func (m *Memory) AppendIDs(_ context.Context, app string, p Policy, entries []Entry, now time.Time) ([]ID, error) {
	if !p.On() || len(entries) == 0 {
		return nil, nil
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
	ids := make([]ID, len(entries))
	for i, e := range entries {
		ids[i] = m.append(a, p, e, now)
	}
	for a.bytes > m.limits.MaxBytes && a.lru.Len() > 0 {
		ch := a.lru.Front().Value.(*channelLog)
		if ch.bytes <= a.bytes-m.limits.MaxBytes {
			m.dropChannel(a, ch, DroppedBytes) // all of it would go, one at a time
		} else {
			m.dropOldest(a, ch, 1, DroppedBytes)
		}
	}
	return ids, nil
}

// append keeps one entry, restores the channel's bounds and returns the
// entry's ID. a.mu is held.
func (m *Memory) append(a *appLog, p Policy, e Entry, now time.Time) ID {
	ch := a.channels[e.Channel]
	if ch == nil {
		ch = &channelLog{name: e.Channel, bytes: ChannelCost(e.Channel)}
		ch.elem = a.lru.PushBack(ch)
		a.channels[e.Channel] = ch
		a.bytes += ch.bytes
		for len(a.channels) > m.limits.MaxChannels {
			m.dropChannel(a, a.lru.Front().Value.(*channelLog), DroppedChannels)
		}
	} else {
		a.lru.MoveToBack(ch.elem)
	}
	// Past the channel's count its oldest go: before the new one comes,
	// so that the ring needs no slot more than the policy keeps (and the
	// channel stays, with its last id, even when they were all it held).
	if over := ch.n + 1 - p.Events; over > 0 {
		m.drop(a, ch, over, DroppedEvents)
	}
	id := ID{MS: uint64(now.UnixMilli())}
	if !ch.last.Less(id) {
		id = ID{ch.last.MS, ch.last.Seq + 1}
	}
	ch.last = id
	if ch.since.IsZero() {
		ch.since = id
	}
	name := e.Name
	if ch.n > 0 && ch.at(ch.n-1).Name == name {
		name = ch.at(ch.n - 1).Name // one copy of a name the channel repeats
	}
	ch.push(Event{ID: id, Name: name, Data: e.Data, Exclude: e.Exclude}, p.Events)
	cost := e.Cost()
	ch.bytes += cost
	a.bytes += cost
	a.events++
	m.dropExpired(a, ch, p.TTL, now)
	return id
}

// at returns the channel's i-th kept event, oldest first.
func (ch *channelLog) at(i int) *Event {
	j := ch.head + i
	if j >= len(ch.ring) {
		j -= len(ch.ring)
	}
	return &ch.ring[j]
}

// push adds ev as the newest event, growing the ring up to slots (or as
// many as it holds, should the policy have shrunk).
func (ch *channelLog) push(ev Event, slots int) {
	if ch.n == len(ch.ring) {
		ch.resize(min(max(ch.n+1, slots), max(4, 2*len(ch.ring))))
	}
	*ch.at(ch.n) = ev
	ch.n++
}

// resize moves the kept events to a ring of size slots, oldest first.
func (ch *channelLog) resize(size int) {
	ring := make([]Event, size)
	for i := range ch.n {
		ring[i] = *ch.at(i)
	}
	ch.ring, ch.head = ring, 0
}

// search returns the index of the first kept event whose ID is id or
// after it.
func (ch *channelLog) search(id ID) int {
	return sort.Search(ch.n, func(i int) bool { return !ch.at(i).ID.Less(id) })
}

// dropOldest drops the n oldest events of ch, and ch itself once empty.
func (m *Memory) dropOldest(a *appLog, ch *channelLog, n int, why Reason) {
	m.drop(a, ch, n, why)
	if ch.n == 0 {
		a.bytes -= ch.bytes // the channel's own cost
		a.lru.Remove(ch.elem)
		delete(a.channels, ch.name)
		if a.evicted.Less(ch.last) {
			a.evicted = ch.last
		}
	}
}

// drop drops the n oldest events of ch, leaving ch itself.
func (m *Memory) drop(a *appLog, ch *channelLog, n int, why Reason) {
	n = min(n, ch.n)
	if n > 0 && ch.gone.Less(ch.at(n-1).ID) {
		ch.gone = ch.at(n - 1).ID
	}
	for i := range n {
		ev := ch.at(i)
		cost := Entry{Name: ev.Name, Data: ev.Data, Exclude: ev.Exclude}.Cost()
		ch.bytes -= cost
		a.bytes -= cost
		*ev = Event{} // let the strings go
	}
	ch.head = (ch.head + n) % max(1, len(ch.ring))
	ch.n -= n
	a.events -= n
	m.dropped[why].Add(int64(n))
	if ch.n > 0 && ch.n <= len(ch.ring)/4 {
		// Mostly empty (dropped for age or bytes): give the slots back.
		ch.resize(max(4, 2*ch.n))
	}
}

// dropExpired drops the events of ch older than ttl.
func (m *Memory) dropExpired(a *appLog, ch *channelLog, ttl time.Duration, now time.Time) {
	if n := ch.search(ID{MS: uint64(now.Add(-ttl).UnixMilli())}); n > 0 {
		m.dropOldest(a, ch, n, DroppedAge)
	}
}

// dropChannel drops the whole history of ch.
func (m *Memory) dropChannel(a *appLog, ch *channelLog, why Reason) {
	m.dropOldest(a, ch, ch.n, why)
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
	// The events not expired, newest p.Events of them (the policy may have
	// shrunk since they were appended): ch.at(from) to ch.at(ch.n-1).
	from := max(ch.search(floor), ch.n-p.Events)
	limit := q.limit()
	var page Page
	if q.OldestFirst {
		start := from
		if !q.After.IsZero() {
			next, ok := q.After.Next()
			if !ok {
				return page, nil // nothing comes after the last id there is
			}
			start = max(from, ch.search(next))
		}
		end := min(ch.n, start+limit)
		page.Events = make([]Event, 0, max(0, end-start))
		for i := start; i < end; i++ {
			page.Events = append(page.Events, *ch.at(i))
		}
		page.More = end < ch.n
		return page, nil
	}
	end := ch.n
	if !q.After.IsZero() {
		end = ch.search(q.After)
	}
	start := max(from, end-limit)
	page.Events = make([]Event, 0, max(0, end-start))
	for i := end - 1; i >= start; i-- {
		page.Events = append(page.Events, *ch.at(i))
	}
	page.More = start > from
	return page, nil
}

// Last implements Positioned.
func (m *Memory) Last(app, channel string) ID {
	a := m.app(app, false)
	if a == nil {
		return ID{}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ch := a.channels[channel]; ch != nil {
		return ch.last
	}
	return ID{}
}

// Since implements Positioned.
func (m *Memory) Since(_ context.Context, app, channel string, p Policy, after, upTo ID, now time.Time) ([]Event, bool, error) {
	a := m.app(app, false)
	if a == nil || !p.On() {
		// Nothing kept: complete unless a log Sweep forgot held events
		// after the position.
		m.mu.RLock()
		gone := after.Less(m.forgotten[app])
		m.mu.RUnlock()
		return nil, p.On() && !gone, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := a.channels[channel]
	if ch == nil || after.Less(ch.since) {
		// What came after the position, if anything, was in a log of the
		// channel that went whole: lost if one went after it.
		if after.Less(a.evicted) {
			return nil, false, nil
		}
		if ch == nil {
			return nil, true, nil
		}
	}
	if after.Less(ch.gone) {
		return nil, false, nil // dropped from the log
	}
	start := 0
	if !after.IsZero() {
		next, ok := after.Next()
		if !ok {
			return nil, true, nil
		}
		start = ch.search(next)
	}
	// Past the policy (it may have shrunk, or they aged) is lost too.
	floor := ID{MS: uint64(now.Add(-p.TTL).UnixMilli())}
	if start < ch.n && start < max(ch.search(floor), ch.n-p.Events) {
		return nil, false, nil
	}
	var out []Event
	for i := start; i < ch.n && !upTo.Less(ch.at(i).ID); i++ {
		out = append(out, *ch.at(i))
	}
	return out, true, nil
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
				if !a.evicted.IsZero() {
					if m.forgotten == nil {
						m.forgotten = make(map[string]ID)
					}
					m.forgotten[id] = a.evicted
				}
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
