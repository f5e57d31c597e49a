package hub

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
)

// Cluster is the hub's seam to the other nodes of a cluster (server/cluster
// implements it over Redis). With a cluster set, the hub keeps only its own
// node's connections; what a channel is across the cluster — its
// subscribers, presence members, cached event, signed-in users — is the
// cluster's, and the hub reports every local change to it:
//
//   - Publish carries messages to every node, this one included; each node
//     hands those it receives to Receive. Nothing is delivered locally
//     before that, so every node sees one channel's messages in one order.
//   - Join, Leave, SignIn and SignOut report a connection's changes, in the
//     order they happen; they return at once. A Join is answered by a
//     Snapshot handed to ReceiveSnapshot, and a SignIn by CompleteSignIn,
//     each in order with the messages of the channel or user it concerns.
//   - The cluster reports channel events that only it can see (the first
//     subscriber anywhere, the last member leaving) with Notify, once for
//     the whole cluster.
type Cluster interface {
	// Publish sends the messages to every node, in order; an error means
	// none of them may have reached any node.
	Publish(ms ...Message) error
	Join(Join)
	Leave(Leave)
	SignIn(SignInRequest)
	SignOut(SignOutRequest)
	// Terminate asks every node to close the user's connections.
	Terminate(appID, userID string) error
	// ConnectionsElsewhere is the number of connections of appID on the
	// other nodes, as last heard (it lags by up to a heartbeat).
	ConnectionsElsewhere(appID string) int
	// State answers channel queries for the whole cluster.
	State
}

// Join is a connection's subscription to a channel, reported to the cluster.
type Join struct {
	AppID, Channel, SocketID string
	UserID                   string          // presence: the member
	Info                     json.RawMessage // presence: user_info
	MaxMembers               int             // presence: distinct users allowed, 0 = no cap
	// Token names the subscription: its answer (Snapshot.Token) completes
	// that subscription only, not one made again after an unsubscribe.
	Token uint64
	// Recovery, when set, asks for a recoverable subscription, and may
	// resume an old one's (recovery.go): the Snapshot says how
	// (Snapshot.Recovery), or that the cluster cannot (nil).
	Recovery *Recovery
}

// Leave is a connection's unsubscription, reported to the cluster.
type Leave struct {
	AppID, Channel, SocketID, UserID string
}

// SignInRequest is a connection's sign-in, reported to the cluster.
type SignInRequest struct {
	AppID, SocketID, UserID string
	Watchlist               []string
}

// SignOutRequest is a signed-in connection's end, reported to the cluster.
type SignOutRequest struct {
	AppID, SocketID, UserID string
}

// Snapshot answers a Join: the channel as the cluster had it when the
// subscription took effect.
type Snapshot struct {
	AppID, Channel, SocketID string
	Token                    uint64 // the Join's
	// Full: the presence channel had its maximum of members; the
	// subscription was refused.
	Full bool
	// Members are the presence channel's members, this connection's included.
	Members []MemberInfo
	// Cached: a cache channel has a last event, CacheEvent with CacheData.
	Cached                bool
	CacheEvent, CacheData string
	// Recovery answers a Join's Recovery.
	Recovery *SnapshotRecovery
}

// SnapshotRecovery is the channel's history as it stood when a
// recoverable subscription took effect.
type SnapshotRecovery struct {
	Position eventlog.ID // of the channel's newest kept event (zero: none)
	Mark     string      // what the history said of itself, for the token
	// Reason is why a resume cannot recover ("" when it can, Events).
	Reason string
	// Events are what the old subscription missed, oldest first, but for
	// those its connection was excluded from.
	Events []eventlog.Event
}

// MemberInfo is one presence member.
type MemberInfo struct {
	UserID string
	Info   json.RawMessage
}

// State answers the channel queries of the HTTP API: for this node alone
// (Hub.Local) or for the whole cluster. An error means the answer is not
// known (the cluster is unreachable).
type State interface {
	Channel(appID, name string) (ChannelStats, error)
	Channels(appID, prefix string) ([]ChannelStats, error)
	PresenceUsers(appID, name string) ([]string, error)
	CachedEvent(appID, name string) (data string, ttl time.Duration, ok bool, err error)
	Connections(appID string) (int, error)
	// SignedIn reports whether userID has a signed-in connection
	// (pusher:signin) of appID: on this node, or anywhere in the cluster.
	// The answer reflects every sign-in and sign-out this node made before
	// the call; another node's may lag by the moment it takes that node to
	// report it.
	SignedIn(appID, userID string) (bool, error)
}

// ErrUnavailable is returned when the cluster cannot be reached, so that
// what was asked of it was not done.
var ErrUnavailable = errors.New("hub: the cluster is unavailable")

// SetCluster puts the hub in cluster mode; call it before serving.
func (h *Hub) SetCluster(c Cluster) {
	h.cluster = c
}

// Clustered reports whether the hub is in cluster mode.
func (h *Hub) Clustered() bool { return h.cluster != nil }

// State returns the cluster's State in cluster mode, and the local one
// otherwise.
func (h *Hub) State() State {
	if h.cluster != nil {
		return h.cluster
	}
	return localState{h}
}

// localState is the State of a hub without a cluster: its own registry.
type localState struct{ h *Hub }

func (s localState) Channel(appID, name string) (ChannelStats, error) {
	return s.h.Channel(appID, name), nil
}

func (s localState) Channels(appID, prefix string) ([]ChannelStats, error) {
	return s.h.Channels(appID, prefix), nil
}

func (s localState) PresenceUsers(appID, name string) ([]string, error) {
	return s.h.PresenceUsers(appID, name), nil
}

func (s localState) CachedEvent(appID, name string) (string, time.Duration, bool, error) {
	data, ttl, ok := s.h.CachedEvent(appID, name)
	return data, ttl, ok, nil
}

func (s localState) Connections(appID string) (int, error) { return s.h.Connections(appID), nil }

func (s localState) SignedIn(appID, userID string) (bool, error) {
	return s.h.SignedIn(appID, userID), nil
}

// Terminate closes every connection signed in as userID, on every node in
// cluster mode, with 4009.
func (h *Hub) Terminate(appID, userID string) error {
	if h.cluster != nil {
		return h.cluster.Terminate(appID, userID)
	}
	h.TerminateUser(appID, userID)
	return nil
}

// Receive delivers a message that came from the cluster to this node's
// subscribers, through the fan-out workers.
func (h *Hub) Receive(m Message) { h.enqueue(m) }

// ReceiveSnapshot completes the subscription a Join asked for, in order
// with the channel's messages (through the channel's fan-out worker).
func (h *Hub) ReceiveSnapshot(s Snapshot) {
	h.workers[workerOf(s.AppID, s.Channel, len(h.workers))] <- fanoutItem{snap: &s}
}

// Notify hands a channel event the cluster saw to the observer (webhooks,
// the console).
func (h *Hub) Notify(ev Event) { h.notify(ev) }

// completeSubscribe finishes a clustered subscription with the cluster's
// answer: the connection joins the local channel and gets
// subscription_succeeded (with every member of the cluster on a presence
// channel) and, on a cache channel, the cached event or cache_miss. An
// answer to a subscription that has gone meanwhile is dropped.
func (h *Hub) completeSubscribe(s *Snapshot) {
	a := h.app(s.AppID, false)
	if a == nil {
		return
	}
	c := a.socket(s.SocketID)
	if c == nil {
		return
	}
	c.subMu.Lock()
	defer c.subMu.Unlock()
	sub := c.channels.get(s.Channel)
	if c.removed || sub == nil || sub.cl == nil || sub.cl.token != s.Token || (!sub.cl.pending && !sub.cl.resend) {
		return
	}
	cs := sub.cl
	if s.Full {
		if cs.pending {
			c.channels.remove(s.Channel)
			a.subs.Add(-1)
			c.Send(cs.refusal)
		}
		cs.resend = false
		return
	}
	ch := a.lockChannel(s.Channel)
	pending := cs.pending
	rec := cs.recovery
	if pending {
		ch.addLocked(c)
		sub.ch, cs.pending, cs.refusal, cs.recovery = ch, false, nil, nil
	}
	cs.resend = false
	c.Send(clusterSucceededFrame(ch, s))
	if ch.cache && pending && !rec.replays() {
		// A resume replays the last event if it was missed instead.
		if s.Cached {
			c.Send(EventFrame(s.CacheEvent, s.Channel, s.CacheData, ""))
		} else {
			h.notify(Event{AppID: a.id, Kind: CacheMiss, Channel: s.Channel})
			c.Send(EventFrame("pusher:cache_miss", s.Channel, "{}", ""))
		}
	}
	if pending && rec != nil {
		h.recoverClustered(ch, c, rec, s.Recovery)
	}
	ch.mu.Unlock()
}

// clusterSucceededFrame is subscription_succeeded with the cluster's members.
func clusterSucceededFrame(ch *channel, s *Snapshot) []byte {
	if !ch.presence {
		return EventFrame("pusher_internal:subscription_succeeded", s.Channel, "{}", "")
	}
	set := newPresenceSet(len(s.Members))
	for _, m := range s.Members {
		set.add(m.UserID, m.Info)
	}
	return set.succeededFrame(s.Channel)
}

// subscribeClustered records a pending subscription and reports it to the
// cluster, whose Snapshot completes it. The caller holds c.subMu.
func (h *Hub) subscribeClustered(c *Conn, name string, opts SubscribeOptions) error {
	a := c.app
	if sub := c.channels.get(name); sub != nil {
		// Subscribed (or on the way): a fresh snapshot answers again.
		if !sub.cl.pending {
			sub.cl.resend = true
		}
		h.cluster.Join(Join{AppID: a.id, Channel: name, SocketID: c.socketID, UserID: sub.userID, Info: sub.cl.info, MaxMembers: opts.MaxMembers, Token: sub.cl.token})
		return nil
	}
	sub := &subscription{cl: &clusterSub{pending: true, refusal: opts.FullRefusal, token: h.joins.Add(1), recovery: opts.Recovery}}
	if IsPresence(name) {
		if opts.Member == nil {
			return errors.New("hub: presence subscription without a member")
		}
		sub.userID, sub.cl.info = opts.Member.UserID, opts.Member.Info
	}
	if !a.takeSubscription(opts.MaxAppSubscriptions) {
		return ErrTooManySubscriptions
	}
	c.channels.set(name, sub)
	h.cluster.Join(Join{AppID: a.id, Channel: name, SocketID: c.socketID, UserID: sub.userID, Info: sub.cl.info, MaxMembers: opts.MaxMembers, Token: sub.cl.token, Recovery: opts.Recovery})
	return nil
}

// leaveClustered takes c off the local channel and reports the leave to the
// cluster, which decides what it means for the channel. The caller holds
// c.subMu and has removed the subscription from c.channels.
func (h *Hub) leaveClustered(a *appState, c *Conn, name string, sub *subscription) {
	if ch := sub.ch; ch != nil {
		ch.mu.Lock()
		empty := ch.removeLocked(c) && len(ch.subs) == 0
		ch.mu.Unlock()
		if empty {
			h.dropIfEmpty(a, ch)
		}
	}
	a.subs.Add(-1)
	h.cluster.Leave(Leave{AppID: a.id, Channel: name, SocketID: c.socketID, UserID: sub.userID})
}

// signInClustered registers c as signed in on this node and reports it to
// the cluster; CompleteSignIn queues the first frames and the watchlist's
// state once the cluster has it. The caller holds c.subMu.
func (h *Hub) signInClustered(c *Conn, first [][]byte) {
	a := c.app
	a.usersMu.Lock()
	a.addUserConnLocked(c)
	for _, id := range c.watchlist {
		a.addWatcherLocked(c, id)
	}
	a.usersMu.Unlock()
	c.signInFirst, c.signInPending = first, true
	h.cluster.SignIn(SignInRequest{AppID: a.id, SocketID: c.socketID, UserID: c.userID, Watchlist: c.watchlist})
}

// CompleteSignIn answers a clustered sign-in: the connection gets the frames
// SignIn was given, then the online and offline state of the users it
// watches (online: those the cluster has signed in).
func (h *Hub) CompleteSignIn(appID, socketID string, online []string) {
	a := h.app(appID, false)
	if a == nil {
		return
	}
	c := a.socket(socketID)
	if c == nil {
		return
	}
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.removed || !c.signInPending {
		return
	}
	c.signInPending = false
	for _, f := range c.signInFirst {
		c.Send(f)
	}
	c.signInFirst = nil
	if len(c.watchlist) == 0 {
		return
	}
	isOnline := make(map[string]bool, len(online))
	for _, id := range online {
		isOnline[id] = true
	}
	var on, off []string
	for _, id := range c.watchlist {
		if isOnline[id] {
			on = append(on, id)
		} else {
			off = append(off, id)
		}
	}
	c.Send(watchlistFrame(on, off))
}

// UserOnline tells this node's watchers of userID that the user came online
// (their first connection in the cluster) or went offline (their last).
func (h *Hub) UserOnline(appID, userID string, online bool) {
	a := h.app(appID, false)
	if a == nil {
		return
	}
	var frame []byte
	if online {
		frame = watchlistFrame([]string{userID}, nil)
	} else {
		frame = watchlistFrame(nil, []string{userID})
	}
	a.usersMu.RLock()
	defer a.usersMu.RUnlock()
	for w := range a.watchers[userID] {
		w.Send(frame)
	}
}

// removeUserClustered takes a signed-in c out of this node's user indexes and
// reports the sign-out. The caller holds c.subMu.
func (h *Hub) removeUserClustered(a *appState, c *Conn) {
	a.usersMu.Lock()
	if set := a.users[c.userID]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(a.users, c.userID)
		}
	}
	a.unwatchLocked(c)
	a.usersMu.Unlock()
	h.cluster.SignOut(SignOutRequest{AppID: a.id, SocketID: c.socketID, UserID: c.userID})
}

// socket returns the connection with socketID on this node, or nil. Only
// cluster mode indexes them.
func (a *appState) socket(socketID string) *Conn {
	a.socketsMu.RLock()
	defer a.socketsMu.RUnlock()
	return a.sockets[socketID]
}

// ShareEntry is one subscription of this node's share of the cluster state.
type ShareEntry struct {
	Join
	Pending bool // not yet answered by a Snapshot
}

// ShareSignIn is one signed-in connection of this node's share.
type ShareSignIn struct {
	SignInRequest
	Pending bool // not yet answered by CompleteSignIn
}

// Share returns everything this node holds that the cluster state counts:
// each connection's subscriptions and sign-in. The cluster rebuilds its
// record of this node from it after losing touch with it.
func (h *Hub) Share(maxMembers func(appID string) int) ([]ShareEntry, []ShareSignIn) {
	h.mu.RLock()
	apps := make([]*appState, 0, len(h.apps))
	for _, a := range h.apps {
		apps = append(apps, a)
	}
	h.mu.RUnlock()
	var entries []ShareEntry
	var signins []ShareSignIn
	for _, a := range apps {
		a.socketsMu.RLock()
		conns := make([]*Conn, 0, len(a.sockets))
		for _, c := range a.sockets {
			conns = append(conns, c)
		}
		a.socketsMu.RUnlock()
		max := maxMembers(a.id)
		for _, c := range conns {
			c.subMu.Lock()
			if !c.removed {
				for name, sub := range c.channels.all() {
					entries = append(entries, ShareEntry{Join: Join{AppID: a.id, Channel: name, SocketID: c.socketID, UserID: sub.userID, Info: sub.cl.info, MaxMembers: max, Token: sub.cl.token, Recovery: sub.cl.recovery}, Pending: sub.cl.pending || sub.cl.resend})
				}
				if c.userID != "" {
					signins = append(signins, ShareSignIn{SignInRequest: SignInRequest{AppID: a.id, SocketID: c.socketID, UserID: c.userID, Watchlist: c.watchlist}, Pending: c.signInPending})
				}
			}
			c.subMu.Unlock()
		}
	}
	return entries, signins
}

// LocalConnections returns the number of connections of every app on this
// node that has any.
func (h *Hub) LocalConnections() map[string]int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make(map[string]int, len(h.apps))
	for id, a := range h.apps {
		if n := a.conns.Load(); n > 0 {
			out[id] = int(n)
		}
	}
	return out
}

// removeClustered takes c out of this node's registry and reports each of
// its subscriptions and its sign-in to the cluster. The caller holds c.subMu.
func (h *Hub) removeClustered(a *appState, c *Conn) {
	for _, e := range c.channels.takeAll() {
		h.leaveClustered(a, c, e.name, e.sub)
	}
	if c.userID != "" {
		h.removeUserClustered(a, c)
	}
	a.socketsMu.Lock()
	delete(a.sockets, c.socketID)
	a.socketsMu.Unlock()
	a.conns.Add(-1)
}
