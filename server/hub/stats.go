package hub

import "sort"

// AppStats is the live size of one app on this node.
type AppStats struct {
	AppID           string
	Connections     int // open connections
	Channels        int // occupied channels
	Subscriptions   int // channel subscriptions, summed over channels
	PresenceMembers int // distinct users, summed over presence channels
	// Delivered is how many event frames were queued to the app's
	// connections on this node since it started (a running total).
	Delivered int64
	// Triggered is how many events were published through the HTTP API on
	// this node since it started, once per channel (a running total).
	Triggered int64
}

// AppCounters are the running figures of one app on this node, read
// without touching its channels or connections.
type AppCounters struct {
	AppID       string
	Connections int   // open connections
	Delivered   int64 // as in AppStats
	Triggered   int64 // as in AppStats
}

// CountTriggered adds n events published through the HTTP API to appID's
// running total (AppStats.Triggered): one atomic add, so the trigger path
// counts once for every reader.
func (h *Hub) CountTriggered(appID string, n int) {
	h.app(appID, true).triggered.Add(int64(n))
}

// AppCounters returns the counters of every app used on this node, in no
// particular order: the registry's read lock and a few atomic loads per
// app, cheap enough to call every few seconds whatever the traffic.
func (h *Hub) AppCounters() []AppCounters {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]AppCounters, 0, len(h.apps))
	for _, a := range h.apps {
		out = append(out, AppCounters{AppID: a.id, Connections: int(a.conns.Load()), Delivered: a.delivered.Load(), Triggered: a.triggered.Load()})
	}
	return out
}

// AppStats returns the live size of every app that has been used on this
// node, sorted by app id. It takes each channel's lock briefly for reading, so
// its cost grows with the number of channels; it is meant for metrics
// scrapes and the console, not for hot paths.
func (h *Hub) AppStats() []AppStats {
	h.mu.RLock()
	apps := make([]*appState, 0, len(h.apps))
	for _, a := range h.apps {
		apps = append(apps, a)
	}
	h.mu.RUnlock()
	out := make([]AppStats, 0, len(apps))
	for _, a := range apps {
		st := AppStats{AppID: a.id, Connections: int(a.conns.Load()), Delivered: a.delivered.Load(), Triggered: a.triggered.Load()}
		a.mu.RLock()
		chans := make([]*channel, 0, len(a.channels))
		for _, ch := range a.channels {
			chans = append(chans, ch)
		}
		a.mu.RUnlock()
		for _, ch := range chans {
			ch.mu.RLock()
			subs, members := len(ch.subs), len(ch.members)
			ch.mu.RUnlock()
			if subs > 0 {
				st.Channels++
				st.Subscriptions += subs
				st.PresenceMembers += members
			}
		}
		if h.cluster != nil {
			st.PresenceMembers = a.localMembers()
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AppID < out[j].AppID })
	return out
}

// localMembers counts, in cluster mode, the distinct users of this node's
// connections on each presence channel, summed: the cluster keeps the
// channels' member lists in Redis, not in the hub.
func (a *appState) localMembers() int {
	a.socketsMu.RLock()
	conns := make([]*Conn, 0, len(a.sockets))
	for _, c := range a.sockets {
		conns = append(conns, c)
	}
	a.socketsMu.RUnlock()
	users := make(map[[2]string]struct{})
	for _, c := range conns {
		c.subMu.Lock()
		for name, sub := range c.channels.all() {
			if sub.ch != nil && sub.ch.presence {
				users[[2]string{name, sub.userID}] = struct{}{}
			}
		}
		c.subMu.Unlock()
	}
	return len(users)
}
