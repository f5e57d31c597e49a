package hub

import (
	"sort"
	"sync/atomic"
)

// counter is an atomic counter alone on its cache line, so that writers on
// different cores bumping different counters do not slow each other down.
type counter struct {
	atomic.Int64
	_ [56]byte
}

// CloseCodes are the close codes the hub counts separately, in the order
// Counters reports them. Code 0 stands for connections the client ended (or
// that failed) without a Pusher close code; any code not listed is counted
// under CloseCodeOther.
var CloseCodes = [...]int{0, 4001, 4003, 4004, 4007, 4009, 4100, 4200, 4201}

// CloseCodeOther is the code Counters uses for close codes not in CloseCodes.
const CloseCodeOther = -1

// closeIndex maps a close code to its slot in stats.closed and stats.rejected
// without a map lookup.
func closeIndex(code int) int {
	switch code {
	case 0:
		return 0
	case 4001:
		return 1
	case 4003:
		return 2
	case 4004:
		return 3
	case 4007:
		return 4
	case 4009:
		return 5
	case 4100:
		return 6
	case 4200:
		return 7
	case 4201:
		return 8
	}
	return len(CloseCodes)
}

// stats are the hub's monotonic counters for metrics. Each update is a single
// atomic add: no locks, no allocations, safe on the hot paths.
type stats struct {
	opened       counter // WebSocket connections accepted into the registry
	clientEvents counter // client events relayed
	delivered    counter // frames handed to connection writers
	closed       [len(CloseCodes) + 1]counter
	rejected     [len(CloseCodes) + 1]counter // refused before they were opened
}

func (s *stats) connOpened()           { s.opened.Add(1) }
func (s *stats) connClosed(code int)   { s.closed[closeIndex(code)].Add(1) }
func (s *stats) connRejected(code int) { s.rejected[closeIndex(code)].Add(1) }
func (s *stats) clientEvent()          { s.clientEvents.Add(1) }
func (s *stats) framesDelivered(n int) { s.delivered.Add(int64(n)) }

// CodeCount is a number of connections closed (or refused) with one close code.
type CodeCount struct {
	Code  int // a code of CloseCodes, or CloseCodeOther
	Count int64
}

// Counters is a snapshot of the hub's monotonic counters since start.
type Counters struct {
	ConnectionsOpened int64       // WebSocket connections opened
	ClientEvents      int64       // client events relayed to their channel
	FramesDelivered   int64       // frames written out to connections (events, replies, pings)
	Closed            []CodeCount // opened connections that ended, by close code
	Rejected          []CodeCount // connections refused at connect time, by close code
}

// Counters returns the current values of the hub's counters.
func (h *Hub) Counters() Counters {
	s := &h.stats
	c := Counters{
		ConnectionsOpened: s.opened.Load(),
		ClientEvents:      s.clientEvents.Load(),
		FramesDelivered:   s.delivered.Load(),
		Closed:            make([]CodeCount, len(s.closed)),
		Rejected:          make([]CodeCount, len(s.rejected)),
	}
	for i := range s.closed {
		code := CloseCodeOther
		if i < len(CloseCodes) {
			code = CloseCodes[i]
		}
		c.Closed[i] = CodeCount{Code: code, Count: s.closed[i].Load()}
		c.Rejected[i] = CodeCount{Code: code, Count: s.rejected[i].Load()}
	}
	return c
}

// AppStats is the live size of one app on this node.
type AppStats struct {
	AppID           string
	Connections     int // open connections
	Channels        int // occupied channels
	Subscriptions   int // channel subscriptions, summed over channels
	PresenceMembers int // distinct users, summed over presence channels
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
		st := AppStats{AppID: a.id, Connections: int(a.conns.Load())}
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
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AppID < out[j].AppID })
	return out
}

// closeCode is the code the connection was closed with (0 when the client
// went away first). Call it once the connection has been closed.
func (c *Conn) closeCode() int {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.closing == nil {
		return 0
	}
	return c.closing.Code
}
