package ws

import (
	"sync/atomic"

	"github.com/heraldrt/herald/server/hub"
)

// counter is an atomic counter alone on its cache line, so that writers on
// different cores bumping different counters do not slow each other down.
type counter struct {
	atomic.Int64
	_ [56]byte
}

// CloseCodeOther is the code Counters reports last, for the connections
// closed with a code not in hub.CloseCodes; those in it are counted each
// apart, in its order (code 0: the client ended, or the socket failed,
// without a close code of the server's).
const CloseCodeOther = -1

// closeIndex maps a close code to its slot in stats.closed and stats.rejected.
func closeIndex(code int) int {
	for i, c := range hub.CloseCodes {
		if c == code {
			return i
		}
	}
	return len(hub.CloseCodes)
}

// stats are the transport's monotonic counters for metrics. Each update is a single
// atomic add: no locks, no allocations, safe on the hot paths.
type stats struct {
	opened       counter // connections accepted into the registry, HTTP fallback sessions included
	httpOpened   counter // HTTP fallback sessions accepted into the registry
	clientEvents counter // client events relayed
	delivered    counter // frames handed to connection writers
	closed       [len(hub.CloseCodes) + 1]counter
	rejected     [len(hub.CloseCodes) + 1]counter // refused before they were opened

	connectLimited counter // new connections (upgrades, HTTP fallback sessions) refused with 429: over the per-address connect rate
	subsLimited    counter // subscribes refused: over the connection's subscribe rate
	appSubsFull    counter // subscribes refused: over the app's subscription cap
}

func (s *stats) connOpened()           { s.opened.Add(1) }
func (s *stats) httpSessionOpened()    { s.httpOpened.Add(1) }
func (s *stats) connClosed(code int)   { s.closed[closeIndex(code)].Add(1) }
func (s *stats) connRejected(code int) { s.rejected[closeIndex(code)].Add(1) }
func (s *stats) clientEvent()          { s.clientEvents.Add(1) }
func (s *stats) framesDelivered(n int) { s.delivered.Add(int64(n)) }
func (s *stats) connectRefused()       { s.connectLimited.Add(1) }
func (s *stats) subscribeLimited()     { s.subsLimited.Add(1) }
func (s *stats) appSubscriptionsFull() { s.appSubsFull.Add(1) }

// CodeCount is a number of connections closed (or refused) with one close code.
type CodeCount struct {
	Code  int // a code of hub.CloseCodes, or CloseCodeOther
	Count int64
}

// Counters is a snapshot of the transport's monotonic counters since start.
type Counters struct {
	ConnectionsOpened  int64       // connections opened: WebSockets and HTTP fallback sessions
	HTTPSessionsOpened int64       // of ConnectionsOpened, the HTTP fallback sessions
	ClientEvents       int64       // client events relayed to their channel
	FramesDelivered    int64       // frames written out to connections (events, replies, pings)
	Closed             []CodeCount // opened connections that ended, by close code
	Rejected           []CodeCount // connections refused at connect time, by close code

	ConnectRateLimited     int64 // new connections (WebSocket upgrades and HTTP fallback sessions) refused with HTTP 429: over Options.ConnectRateLimit for the client's address
	SubscribeRateLimited   int64 // subscribes refused with status 429: over the connection's subscribe rate
	AppSubscriptionsCapped int64 // subscribes refused with status 429: the app at Options.MaxSubscriptionsPerApp
	// Panics is how many panics in the handling of a client's input were
	// recovered; each closed only its connection, with 1011.
	Panics int64
	// ConnectLimiterAddresses is how many client addresses (IPv6: /64s) the
	// connect rate limit holds a bucket for now; 0 without the limit.
	ConnectLimiterAddresses int
}

// Counters returns the current values of the transport's counters.
func (s *Handler) Counters() Counters {
	st := &s.stats
	c := Counters{
		ConnectionsOpened:  st.opened.Load(),
		HTTPSessionsOpened: st.httpOpened.Load(),
		ClientEvents:       st.clientEvents.Load(),
		FramesDelivered:    st.delivered.Load(),
		Closed:             make([]CodeCount, len(st.closed)),
		Rejected:           make([]CodeCount, len(st.rejected)),

		ConnectRateLimited:     st.connectLimited.Load(),
		SubscribeRateLimited:   st.subsLimited.Load(),
		AppSubscriptionsCapped: st.appSubsFull.Load(),
		Panics:                 s.panics.Count(),
	}
	if s.connects != nil {
		c.ConnectLimiterAddresses = s.connects.buckets.Len()
	}
	for i := range st.closed {
		code := CloseCodeOther
		if i < len(hub.CloseCodes) {
			code = hub.CloseCodes[i]
		}
		c.Closed[i] = CodeCount{Code: code, Count: st.closed[i].Load()}
		c.Rejected[i] = CodeCount{Code: code, Count: st.rejected[i].Load()}
	}
	return c
}
