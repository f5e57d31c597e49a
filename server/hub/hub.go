// Package hub is the Channels core: the registry of apps, channels, subscribed
// connections, presence members, signed-in users and cached events, the
// fan-out that delivers each event to every subscriber, and the Cluster seam
// through which messages and changes reach the other nodes of a cluster.
//
// It knows no sockets, storage or request signing, and imports none of them
// (not storage, server/signing or the WebSocket library), so a cluster
// plugs into it alone. A transport (server/ws) registers each client with
// Connect, handing over a Writer that moves the connection's queued frames
// to it, and checks the app's policy and the client's authorization before
// it calls Subscribe or SignIn.
//
// # Lock order
//
// Locks are always taken in this order, never the reverse, and none is held
// while blocking on I/O:
//
//	Conn.subMu  →  appState.mu  →  channel.mu  →  appState.usersMu / appState.cacheMu  →  Conn.outMu
//
// Conn.subMu serialises one connection's subscription changes and its removal.
// appState.mu guards the channel map; channel.mu guards one channel's subscribers
// and members. Conn.Send only takes Conn.outMu and never blocks, so fan-out can
// run under channel.mu held for reading; a full queue marks the connection for
// closing and its own writer tears it down later, outside these locks. Send
// wakes the connection's Writer when no writer runs, after releasing
// Conn.outMu, and does not wait for it.
//
// Publishing is asynchronous: a fan-out worker per CPU takes a channel's
// messages in order and delivers them under the locks above.
package hub

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/internal/recovery"
)

// CacheTTL is how long a cache channel keeps its last event.
const CacheTTL = 30 * time.Minute

// Errors returned by the registry.
var (
	// ErrOverQuota: the app already has its maximum number of connections.
	ErrOverQuota = errors.New("hub: app over its connection quota")
	// ErrConnRemoved: the connection has been removed from the registry.
	ErrConnRemoved = errors.New("hub: connection removed")
	// ErrPresenceFull: the presence channel has its maximum number of members.
	ErrPresenceFull = errors.New("hub: presence channel is full")
	// ErrTooManySubscriptions: the app already holds its maximum number of
	// subscriptions over all its connections.
	ErrTooManySubscriptions = errors.New("hub: app over its subscription cap")
)

// Hub is the registry of every app's channels and connections.
type Hub struct {
	log      *zap.Logger
	cluster  Cluster       // nil on a single node (cluster.go)
	joins    atomic.Uint64 // the last Join.Token
	now      func() time.Time
	observer Observer

	workers  []chan fanoutItem // fan-out workers (broker.go)
	workerWG sync.WaitGroup

	// observerPanics counts the panics of the observer, recovered in notify
	// (see there).
	observerPanics recovery.Counter

	// keepMu orders kept publishes and recoveries on a node of its own
	// (recovery.go), one lock per app (keepLock), so apps do not wait for
	// each other. Lock order: c.subMu, then keepMu, then channel locks.
	keepMu     [16]sync.Mutex
	recoveries recoveryCounters

	mu   sync.RWMutex
	apps map[string]*appState
}

// appState is one app's part of the registry.
type appState struct {
	id    string
	conns atomic.Int64
	// subs is the app's number of subscriptions (a connection on a channel),
	// changed with the channel's subscriber list, so that a cap on it holds
	// however many connections subscribe at once.
	subs atomic.Int64
	// delivered counts the event frames queued to the app's connections
	// on this node, for the console's history.
	delivered atomic.Int64
	// triggered counts the events published through the HTTP API on this
	// node, once per channel (CountTriggered), for the metrics and the
	// console's history.
	triggered atomic.Int64

	mu       sync.RWMutex
	channels map[string]*channel

	// countEvents: send pusher_internal:subscription_count (the app's
	// subscription_count switch, refreshed on every connect).
	countEvents atomic.Bool

	usersMu  sync.RWMutex
	users    map[string]map[*Conn]struct{} // signed-in connections by user id
	watchers map[string]map[*Conn]struct{} // connections watching a user id

	cacheMu sync.Mutex
	cache   map[string]cachedEvent // by channel name; kept while unoccupied too

	// sockets indexes the connections by socket_id, in cluster mode only,
	// where the cluster's answers name the connection they are for.
	socketsMu sync.RWMutex
	sockets   map[string]*Conn
}

// channel is an occupied (or just emptied) channel.
type channel struct {
	name     string
	presence bool
	cache    bool

	mu      sync.RWMutex
	subs    []*Conn       // subscribers, in no particular order (swap-remove)
	index   map[*Conn]int // position in subs
	members map[string]*member
	dead    bool // removed from the app's map; subscribers must look it up again

	// recovs is each subscriber's recovery state by its place in subs (nil
	// for a plain one; recovery.go), so that fan-out finds it without
	// hashing; nil until the channel has had a recoverable subscriber.
	// recoverable counts the non-nil ones.
	recovs      []*recovering
	recoverable int

	occupied    bool        // channel_occupied reported, channel_vacated not yet
	countSentAt time.Time   // when the last subscription_count went out
	countTimer  *time.Timer // a throttled subscription_count waiting to go out
}

// member is a presence user with the number of its connections on the channel.
type member struct {
	info  json.RawMessage
	conns int
}

type cachedEvent struct {
	event   string
	data    string
	expires time.Time
}

// New returns an empty hub that delivers through its fan-out workers;
// Close stops them.
func New(log *zap.Logger) *Hub {
	h := &Hub{log: log, now: time.Now, apps: make(map[string]*appState)}
	h.startWorkers()
	return h
}

// SetClock replaces the hub's clock (time.Now), which dates cached events
// and throttles subscription counts. Tests set it before serving.
func (h *Hub) SetClock(now func() time.Time) { h.now = now }

// app returns the state of appID, creating it when create is set; otherwise
// nil when the app has never been used on this node.
func (h *Hub) app(appID string, create bool) *appState {
	h.mu.RLock()
	a := h.apps[appID]
	h.mu.RUnlock()
	if a != nil || !create {
		return a
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if a = h.apps[appID]; a == nil {
		a = &appState{
			id:       appID,
			channels: make(map[string]*channel),
			users:    make(map[string]map[*Conn]struct{}),
			watchers: make(map[string]map[*Conn]struct{}),
			cache:    make(map[string]cachedEvent),
			sockets:  make(map[string]*Conn),
		}
		h.apps[appID] = a
	}
	return a
}

// ConnectOptions are the per-connection inputs the registry needs.
type ConnectOptions struct {
	// MaxConns is the app's connection quota; 0: unlimited.
	MaxConns int
	// MaxQueueBytes bounds the connection's outbound queue; 0:
	// DefaultMaxQueueBytes.
	MaxQueueBytes int
	// Writer moves the queued frames to the client; nil for a consumer that
	// takes them itself with Conn.Take.
	Writer Writer
}

// WithDefaults returns o with the defaults in place of its zero (or
// negative) fields: DefaultMaxQueueBytes.
func (o ConnectOptions) WithDefaults() ConnectOptions {
	if o.MaxQueueBytes <= 0 {
		o.MaxQueueBytes = DefaultMaxQueueBytes
	}
	return o
}

// Connect registers a new connection of appID with a fresh socket_id. With
// opts.MaxConns > 0 it refuses with ErrOverQuota once the app has that many.
func (h *Hub) Connect(appID string, opts ConnectOptions) (*Conn, error) {
	opts = opts.WithDefaults()
	a := h.app(appID, true)
	n := a.conns.Add(1)
	if opts.MaxConns > 0 && h.cluster != nil {
		n += int64(h.cluster.ConnectionsElsewhere(appID))
	}
	if opts.MaxConns > 0 && n > int64(opts.MaxConns) {
		a.conns.Add(-1)
		return nil, ErrOverQuota
	}
	c := newConn(a, NewSocketID(), opts)
	if h.cluster != nil {
		a.socketsMu.Lock()
		a.sockets[c.socketID] = c
		a.socketsMu.Unlock()
	}
	return c, nil
}

// Connections returns the number of connections of appID on this node.
func (h *Hub) Connections(appID string) int {
	if a := h.app(appID, false); a != nil {
		return int(a.conns.Load())
	}
	return 0
}

// Subscriptions returns the number of subscriptions of appID on this node
// (a connection on a channel), the count SubscribeOptions.MaxAppSubscriptions
// caps. It is one atomic load.
func (h *Hub) Subscriptions(appID string) int {
	if a := h.app(appID, false); a != nil {
		return int(a.subs.Load())
	}
	return 0
}

// Member is the presence identity a connection subscribes with.
type Member struct {
	UserID string
	Info   json.RawMessage // user_info; nil when absent
}

// SubscribeOptions are the per-subscription inputs the registry needs.
type SubscribeOptions struct {
	Member     *Member // required for presence channels, ignored otherwise
	MaxMembers int     // presence: maximum distinct users; 0 = unlimited
	// MaxAppSubscriptions caps the app's subscriptions over all its
	// connections; 0 = no cap. A new subscription beyond it is refused with
	// ErrTooManySubscriptions.
	MaxAppSubscriptions int
	// FullRefusal is the frame queued instead of subscription_succeeded when,
	// in cluster mode, the presence channel turns out to be full (on a
	// single node Subscribe returns ErrPresenceFull instead).
	FullRefusal []byte
	// Recovery, when set, makes the subscription recoverable and may
	// recover a previous one's (recovery.go); in cluster mode the cluster
	// reads the history when the subscription takes effect.
	Recovery *Recovery
}

// Subscribe adds c to the channel and queues, in order, the
// pusher_internal:subscription_succeeded frame (with the member list on
// presence channels), then on cache channels the cached event or
// pusher:cache_miss. On a user's first connection to a presence channel the
// other subscribers get pusher_internal:member_added. Subscribing again to a
// channel the connection is on answers subscription_succeeded again (and
// counts against no cap). Authorization is the caller's job.
func (h *Hub) Subscribe(c *Conn, name string, opts SubscribeOptions) error {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.removed {
		return ErrConnRemoved
	}
	if h.cluster != nil {
		return h.subscribeClustered(c, name, opts)
	}
	a := c.app
	if sub := c.channels.get(name); sub != nil {
		// Already subscribed: the channel cannot be dead while c is on it.
		sub.ch.mu.Lock()
		c.Send(succeededFrame(sub.ch, name))
		sub.ch.mu.Unlock()
		return nil
	}
	// The slot is taken before the channel is created, so that a refused
	// subscription leaves no trace (no channel, no webhook); it is given back
	// if the subscription fails further on.
	if !a.takeSubscription(opts.MaxAppSubscriptions) {
		return ErrTooManySubscriptions
	}
	if opts.Recovery != nil {
		mu := h.keepLock(a.id)
		mu.Lock()
		defer mu.Unlock()
	}
	ch := a.lockChannel(name)
	userID := ""
	var m *member
	if ch.presence {
		if opts.Member == nil {
			ch.mu.Unlock()
			a.subs.Add(-1)
			h.dropIfEmpty(a, ch)
			return errors.New("hub: presence subscription without a member")
		}
		userID = opts.Member.UserID
		m = ch.members[userID]
		if m == nil && opts.MaxMembers > 0 && len(ch.members) >= opts.MaxMembers {
			ch.mu.Unlock()
			a.subs.Add(-1)
			h.dropIfEmpty(a, ch)
			return ErrPresenceFull
		}
	}
	ch.addLocked(c)
	// Occupied before the first member_added, as webhook receivers expect.
	if !ch.occupied {
		ch.occupied = true
		h.notify(Event{AppID: a.id, Kind: ChannelOccupied, Channel: name})
	}
	if ch.presence {
		if m == nil {
			m = &member{info: opts.Member.Info}
			ch.members[userID] = m
			ch.broadcastLocked(memberAddedFrame(name, userID, opts.Member.Info), c)
			h.notify(Event{AppID: a.id, Kind: MemberAdded, Channel: name, UserID: userID})
		}
		m.conns++
	}
	var recovery fanoutItem
	if opts.Recovery != nil {
		recovery = h.recoverable(a, ch, c, opts.Recovery)
	}
	c.Send(succeededFrame(ch, name))
	if ch.cache && !opts.Recovery.replays() {
		// Under ch.mu, so that it is ordered with Deliver (see there).
		// A resume replays the last event if it was missed instead.
		c.Send(h.cacheFrame(a, name))
	}
	h.countChangedLocked(a, ch)
	ch.mu.Unlock()
	c.channels.set(name, &subscription{ch: ch, userID: userID})
	if recovery.recover != nil {
		// After ch.mu (its worker may be waiting for it), before keepMu.
		h.workers[workerOf(a.id, name, len(h.workers))] <- recovery
	}
	return nil
}

// cacheFrame returns the cached event of a cache channel as a frame, or the
// pusher:cache_miss frame when there is none.
func (h *Hub) cacheFrame(a *appState, name string) []byte {
	if ev, ok := a.cached(name, h.now()); ok {
		return EventFrame(ev.event, name, ev.data, "")
	}
	h.notify(Event{AppID: a.id, Kind: CacheMiss, Channel: name})
	return EventFrame("pusher:cache_miss", name, "{}", "")
}

// takeSubscription counts one more subscription of the app, unless max > 0
// and the app has max already. A compare-and-swap rather than an add undone
// on refusal: under a flood of refused subscribes the count would otherwise
// stand above the real one for a moment and refuse a subscription that fits.
func (a *appState) takeSubscription(max int) bool {
	if max <= 0 {
		a.subs.Add(1)
		return true
	}
	for {
		n := a.subs.Load()
		if n >= int64(max) {
			return false
		}
		if a.subs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// lockChannel returns the live channel called name, created if needed, with its
// lock held.
func (a *appState) lockChannel(name string) *channel {
	for {
		a.mu.RLock()
		ch := a.channels[name]
		a.mu.RUnlock()
		if ch == nil {
			a.mu.Lock()
			if ch = a.channels[name]; ch == nil {
				kind, cache := ChannelKind(name)
				ch = &channel{name: name, presence: kind == Presence, cache: cache, index: make(map[*Conn]int)}
				if ch.presence {
					ch.members = make(map[string]*member)
				}
				a.channels[name] = ch
			}
			a.mu.Unlock()
		}
		ch.mu.Lock()
		if !ch.dead {
			return ch
		}
		ch.mu.Unlock()
	}
}

// dropIfEmpty removes ch from the app's map when it has no subscribers left,
// reporting channel_vacated.
func (h *Hub) dropIfEmpty(a *appState, ch *channel) {
	a.mu.Lock()
	ch.mu.Lock()
	if len(ch.subs) == 0 && !ch.dead {
		ch.dead = true
		delete(a.channels, ch.name)
		if ch.occupied && h.cluster == nil {
			h.notify(Event{AppID: a.id, Kind: ChannelVacated, Channel: ch.name})
		}
	}
	ch.mu.Unlock()
	a.mu.Unlock()
}

// Unsubscribe removes c from the channel; on a presence channel the user's last
// connection leaving sends pusher_internal:member_removed to the others. It
// reports whether c was subscribed.
func (h *Hub) Unsubscribe(c *Conn, name string) bool {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	sub := c.channels.get(name)
	if sub == nil {
		return false
	}
	c.channels.remove(name)
	if h.cluster != nil {
		h.leaveClustered(c.app, c, name, sub)
		return true
	}
	h.leave(c.app, c, sub)
	return true
}

// leave takes c off sub's channel. The caller holds c.subMu.
func (h *Hub) leave(a *appState, c *Conn, sub *subscription) {
	ch := sub.ch
	ch.mu.Lock()
	if !ch.removeLocked(c) {
		ch.mu.Unlock()
		return
	}
	a.subs.Add(-1)
	if ch.presence {
		if m := ch.members[sub.userID]; m != nil {
			if m.conns--; m.conns == 0 {
				delete(ch.members, sub.userID)
				ch.broadcastLocked(memberRemovedFrame(ch.name, sub.userID), nil)
				h.notify(Event{AppID: a.id, Kind: MemberRemoved, Channel: ch.name, UserID: sub.userID})
			}
		}
	}
	h.countChangedLocked(a, ch)
	empty := len(ch.subs) == 0
	ch.mu.Unlock()
	if empty {
		h.dropIfEmpty(a, ch)
	}
}

// Subscription counts go out on every change, but at most every
// CountThrottleEvery on channels with more than CountThrottleAbove
// subscribers, where every join would otherwise fan out to everyone. (The
// cluster's scripts apply the same rule.)
const (
	CountThrottleAbove = 100
	CountThrottleEvery = 5 * time.Second
)

// WebhookHold is how long channel_vacated and member_removed webhooks wait
// for the channel or member to come back, which cancels both: the webhook
// dispatcher's default, and the cluster's.
const WebhookHold = 3 * time.Second

// countChangedLocked reports a changed subscriber count of a non-presence
// channel, when the app enabled subscription_count. The caller holds ch.mu
// for writing.
func (h *Hub) countChangedLocked(a *appState, ch *channel) {
	if ch.presence || !a.countEvents.Load() {
		return
	}
	now := h.now()
	if len(ch.subs) > CountThrottleAbove && now.Sub(ch.countSentAt) < CountThrottleEvery {
		if ch.countTimer == nil {
			ch.countTimer = time.AfterFunc(ch.countSentAt.Add(CountThrottleEvery).Sub(now), func() { h.flushCount(a, ch) })
		}
		return
	}
	h.sendCountLocked(a, ch, now)
}

func (h *Hub) sendCountLocked(a *appState, ch *channel, now time.Time) {
	ch.countSentAt = now
	n := len(ch.subs)
	if n > 0 {
		ch.broadcastLocked(JSONFrame("pusher_internal:subscription_count", ch.name, struct {
			Count int `json:"subscription_count"`
		}{n}), nil)
	}
	h.notify(Event{AppID: a.id, Kind: SubscriptionCount, Channel: ch.name, Count: n})
}

// flushCount sends a throttled count once its time has come.
func (h *Hub) flushCount(a *appState, ch *channel) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.countTimer = nil
	if !ch.dead {
		h.sendCountLocked(a, ch, h.now())
	}
}

// SetSubscriptionCount switches pusher_internal:subscription_count events
// for appID; the transport sets it from the app's settings on each connect.
func (h *Hub) SetSubscriptionCount(appID string, on bool) {
	h.app(appID, true).countEvents.Store(on)
}

// MaxWatchlist is the most user ids a connection may watch.
const MaxWatchlist = 100

// addUserConnLocked adds the signed-in c to its user's connections; it
// reports whether c is the user's first here. The caller holds a.usersMu.
func (a *appState) addUserConnLocked(c *Conn) (first bool) {
	set := a.users[c.userID]
	if set == nil {
		set = make(map[*Conn]struct{})
		a.users[c.userID] = set
		first = true
	}
	set[c] = struct{}{}
	return first
}

// addWatcherLocked makes c a watcher of user id. The caller holds
// a.usersMu.
func (a *appState) addWatcherLocked(c *Conn, id string) {
	ws := a.watchers[id]
	if ws == nil {
		ws = make(map[*Conn]struct{})
		a.watchers[id] = ws
	}
	ws[c] = struct{}{}
}

// SignIn records c as signed in as userID, for server-to-user events,
// terminate_connections and the watchlist. A connection signs in at most once.
// The user's first connection makes it online for everyone watching it; c
// then receives the online/offline state of the (at most MaxWatchlist) users
// it watches. The frames in first are queued to c before that state and only
// once the user is registered: a client told it is signed in
// (pusher:signin_success) is already online for anyone who looks.
func (h *Hub) SignIn(c *Conn, userID string, watchlist []string, first ...[]byte) error {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.removed {
		return ErrConnRemoved
	}
	if c.userID != "" {
		return errors.New("hub: connection already signed in")
	}
	if len(watchlist) > MaxWatchlist {
		watchlist = watchlist[:MaxWatchlist]
	}
	c.userID = userID
	c.watchlist = watchlist
	if h.cluster != nil {
		h.signInClustered(c, first)
		return nil
	}
	a := c.app
	a.usersMu.Lock()
	defer a.usersMu.Unlock()
	if a.addUserConnLocked(c) {
		frame := watchlistFrame([]string{userID}, nil)
		for w := range a.watchers[userID] {
			w.Send(frame)
		}
	}
	for _, f := range first {
		c.Send(f)
	}
	if len(watchlist) == 0 {
		return nil
	}
	var online, offline []string
	for _, id := range watchlist {
		a.addWatcherLocked(c, id)
		if len(a.users[id]) > 0 {
			online = append(online, id)
		} else {
			offline = append(offline, id)
		}
	}
	c.Send(watchlistFrame(online, offline))
	return nil
}

// SignedIn reports whether userID has a signed-in connection of appID on
// this node (State().SignedIn answers for the whole cluster).
func (h *Hub) SignedIn(appID, userID string) bool {
	a := h.app(appID, false)
	if a == nil {
		return false
	}
	a.usersMu.RLock()
	defer a.usersMu.RUnlock()
	return len(a.users[userID]) > 0
}

type watchlistEvent struct {
	Name    string   `json:"name"`
	UserIDs []string `json:"user_ids"`
}

// watchlistFrame is pusher_internal:watchlist_events with an online and an
// offline group, each left out when empty.
func watchlistFrame(online, offline []string) []byte {
	var events []watchlistEvent
	if len(online) > 0 {
		events = append(events, watchlistEvent{"online", online})
	}
	if len(offline) > 0 {
		events = append(events, watchlistEvent{"offline", offline})
	}
	return JSONFrame("pusher_internal:watchlist_events", "", struct {
		Events []watchlistEvent `json:"events"`
	}{events})
}

// Remove takes c out of every channel and user index and releases its
// connection slot. It is idempotent.
func (h *Hub) Remove(c *Conn) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.removed {
		return
	}
	c.removed = true
	a := c.app
	if h.cluster != nil {
		h.removeClustered(a, c)
		return
	}
	for _, e := range c.channels.takeAll() {
		h.leave(a, c, e.sub)
	}
	if c.userID != "" {
		a.usersMu.Lock()
		if set := a.users[c.userID]; set != nil {
			delete(set, c)
			if len(set) == 0 {
				delete(a.users, c.userID)
				frame := watchlistFrame(nil, []string{c.userID})
				for w := range a.watchers[c.userID] {
					w.Send(frame)
				}
			}
		}
		a.unwatchLocked(c)
		a.usersMu.Unlock()
	}
	a.conns.Add(-1)
}

// unwatchLocked takes c off the watchers of every user it watches. The
// caller holds a.usersMu.
func (a *appState) unwatchLocked(c *Conn) {
	for _, id := range c.watchlist {
		if ws := a.watchers[id]; ws != nil {
			delete(ws, c)
			if len(ws) == 0 {
				delete(a.watchers, id)
			}
		}
	}
}

// TerminateUser closes every connection signed in as userID with 4009 and
// returns how many there were.
func (h *Hub) TerminateUser(appID, userID string) int {
	a := h.app(appID, false)
	if a == nil {
		return 0
	}
	a.usersMu.RLock()
	conns := make([]*Conn, 0, len(a.users[userID]))
	for c := range a.users[userID] {
		conns = append(conns, c)
	}
	a.usersMu.RUnlock()
	for _, c := range conns {
		c.Close(CloseTerminated)
	}
	return len(conns)
}

// addLocked adds c to the subscribers. The caller holds ch.mu.
func (ch *channel) addLocked(c *Conn) {
	ch.index[c] = len(ch.subs)
	ch.subs = append(ch.subs, c)
	if ch.recovs != nil {
		ch.recovs = append(ch.recovs, nil)
	}
}

// removeLocked takes c off the subscribers (swap-remove), reporting whether
// it was one. The caller holds ch.mu.
func (ch *channel) removeLocked(c *Conn) bool {
	i, ok := ch.index[c]
	if !ok {
		return false
	}
	last := len(ch.subs) - 1
	ch.subs[i] = ch.subs[last]
	ch.index[ch.subs[i]] = i
	ch.subs[last] = nil
	ch.subs = ch.subs[:last]
	delete(ch.index, c)
	if ch.recovs != nil {
		if ch.recovs[i] != nil {
			ch.recoverable--
		}
		ch.recovs[i] = ch.recovs[last]
		ch.recovs[last] = nil
		ch.recovs = ch.recovs[:last]
	}
	return true
}

// broadcastLocked queues frame to every subscriber but except. The caller holds
// ch.mu (for reading or writing).
func (ch *channel) broadcastLocked(frame []byte, except *Conn) {
	for _, s := range ch.subs {
		if s != except {
			s.Send(frame)
		}
	}
}

// ChannelStats is the live state of one channel.
type ChannelStats struct {
	Name          string
	Occupied      bool
	Subscriptions int // connections subscribed
	Users         int // distinct presence users; 0 on other kinds
}

// Channel returns the state of one channel of appID.
func (h *Hub) Channel(appID, name string) ChannelStats {
	st := ChannelStats{Name: name}
	a := h.app(appID, false)
	if a == nil {
		return st
	}
	a.mu.RLock()
	ch := a.channels[name]
	a.mu.RUnlock()
	if ch != nil {
		ch.mu.RLock()
		st.Subscriptions, st.Users = len(ch.subs), len(ch.members)
		ch.mu.RUnlock()
		st.Occupied = st.Subscriptions > 0
	}
	return st
}

// Channels returns the occupied channels of appID whose names start with
// prefix, sorted by name.
func (h *Hub) Channels(appID, prefix string) []ChannelStats {
	a := h.app(appID, false)
	if a == nil {
		return nil
	}
	a.mu.RLock()
	chans := make([]*channel, 0, len(a.channels))
	for name, ch := range a.channels {
		if strings.HasPrefix(name, prefix) {
			chans = append(chans, ch)
		}
	}
	a.mu.RUnlock()
	out := make([]ChannelStats, 0, len(chans))
	for _, ch := range chans {
		ch.mu.RLock()
		st := ChannelStats{Name: ch.name, Subscriptions: len(ch.subs), Users: len(ch.members)}
		ch.mu.RUnlock()
		if st.Subscriptions > 0 {
			st.Occupied = true
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// PresenceUsers returns the distinct user ids on a presence channel, sorted.
func (h *Hub) PresenceUsers(appID, name string) []string {
	a := h.app(appID, false)
	if a == nil {
		return nil
	}
	a.mu.RLock()
	ch := a.channels[name]
	a.mu.RUnlock()
	if ch == nil {
		return nil
	}
	ch.mu.RLock()
	ids := make([]string, 0, len(ch.members))
	for id := range ch.members {
		ids = append(ids, id)
	}
	ch.mu.RUnlock()
	sort.Strings(ids)
	return ids
}

// CachedEvent returns the data of a cache channel's last event and its time to
// live, or ok false when the cache is empty or expired.
func (h *Hub) CachedEvent(appID, name string) (data string, ttl time.Duration, ok bool) {
	a := h.app(appID, false)
	if a == nil {
		return "", 0, false
	}
	now := h.now()
	ev, ok := a.cached(name, now)
	if !ok {
		return "", 0, false
	}
	return ev.data, ev.expires.Sub(now), true
}

func (a *appState) cached(name string, now time.Time) (cachedEvent, bool) {
	a.cacheMu.Lock()
	defer a.cacheMu.Unlock()
	ev, ok := a.cache[name]
	if ok && !now.Before(ev.expires) {
		delete(a.cache, name)
		return cachedEvent{}, false
	}
	return ev, ok
}

// SweepCache drops expired cached events of every app; the server calls it
// periodically so that caches of channels nobody reads again do not pile up.
func (h *Hub) SweepCache() {
	now := h.now()
	h.mu.RLock()
	apps := make([]*appState, 0, len(h.apps))
	for _, a := range h.apps {
		apps = append(apps, a)
	}
	h.mu.RUnlock()
	for _, a := range apps {
		a.cacheMu.Lock()
		for name, ev := range a.cache {
			if !now.Before(ev.expires) {
				delete(a.cache, name)
			}
		}
		a.cacheMu.Unlock()
	}
}

type presenceData struct {
	Presence presenceSet `json:"presence"`
}

type presenceSet struct {
	IDs   []string                   `json:"ids"`
	Hash  map[string]json.RawMessage `json:"hash"`
	Count int                        `json:"count"`
}

// succeededFrame is pusher_internal:subscription_succeeded; on presence
// channels its data lists the members. The caller holds ch.mu.
func succeededFrame(ch *channel, name string) []byte {
	if !ch.presence {
		return EventFrame("pusher_internal:subscription_succeeded", name, "{}", "")
	}
	set := newPresenceSet(len(ch.members))
	for id, m := range ch.members {
		set.add(id, m.info)
	}
	return set.succeededFrame(name)
}

func newPresenceSet(n int) presenceSet {
	return presenceSet{IDs: make([]string, 0, n), Hash: make(map[string]json.RawMessage, n)}
}

// add adds a member once; absent user_info is null.
func (s *presenceSet) add(id string, info json.RawMessage) {
	if _, dup := s.Hash[id]; dup {
		return
	}
	if len(info) == 0 {
		info = json.RawMessage("null")
	}
	s.IDs = append(s.IDs, id)
	s.Hash[id] = info
}

// succeededFrame is subscription_succeeded with the set, its ids sorted.
func (s presenceSet) succeededFrame(channel string) []byte {
	sort.Strings(s.IDs)
	s.Count = len(s.IDs)
	return JSONFrame("pusher_internal:subscription_succeeded", channel, presenceData{s})
}

func memberAddedFrame(channel, userID string, info json.RawMessage) []byte {
	if len(info) == 0 {
		info = json.RawMessage("null")
	}
	return JSONFrame("pusher_internal:member_added", channel, struct {
		UserID   string          `json:"user_id"`
		UserInfo json.RawMessage `json:"user_info"`
	}{userID, info})
}

func memberRemovedFrame(channel, userID string) []byte {
	return JSONFrame("pusher_internal:member_removed", channel, struct {
		UserID string `json:"user_id"`
	}{userID})
}
