// Package ws is the Channels client transports: the WebSocket one, and
// beside it pusher-js's HTTP fallback (xhr_streaming, xhr_polling; see
// xhr.go). It upgrades GET /app/<key>, runs a session per client (reading its messages, writing what
// the hub queues for it, pinging it when idle, closing it with the protocol's
// codes) and speaks Pusher protocol 7 — subscribing with the private and
// presence authorization checks, sign-in, unsubscribing, client events and
// errors. The registry and fan-out it serves are server/hub's; the low-level
// socket mechanics beneath it (the input poller, the goroutine pool, the
// corked socket) are server/ws/socket's.
//
// It imports the hub, server/eventlog (recovery), server/signing, server/ws/socket and the WebSocket
// library, never storage: what it needs of an app reaches it as an App,
// through the AppLookup the node fills from the app directory. Each session
// is the hub.Writer of its connection: the hub wakes it when there is
// something to write.
//
// # Locks
//
// Handler.mu (the set of sessions) is taken on its own or before a hub
// connection's queue lock (Shutdown closing every connection), never while
// a registry lock is held. A session's readGate is taken on its own. A
// fallback session's locks (in, drain, mu) are taken in that order, never
// while the handler's or a registry lock is held, except its mu, which
// Wake takes and which is held over no call into the hub.
package ws

import (
	"cmp"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
)

// Options tune the transport. Zero values take the defaults.
type Options struct {
	// History is the node's channel history when subscriptions can be
	// recovered from it (a node of its own); nil: recovery is off.
	History eventlog.Positioned
	// ActivityTimeout is sent to clients as activity_timeout; a client silent
	// this long is pinged by the server. Default 120 s.
	ActivityTimeout time.Duration
	// PongTimeout is how long a pinged client has to answer before it is
	// closed with 4201. Default 30 s.
	PongTimeout time.Duration
	// MaxQueueBytes bounds each connection's outbound queue; a client that
	// falls further behind is closed with 4100. Default 1 MiB.
	MaxQueueBytes int
	// WriteTimeout bounds one socket write; a client that does not read for
	// this long is dropped. Default 10 s.
	WriteTimeout time.Duration
	// MaxMessageBytes is the largest client message handled; larger ones are
	// answered with pusher:error and dropped. Default 16 KiB.
	MaxMessageBytes int
	// MaxChannelsPerConn bounds one connection's subscriptions. Default 1000.
	MaxChannelsPerConn int
	// SubscribeRate and SubscribeBurst are the token bucket of each
	// connection's subscribes to channels that make the app send webhooks
	// (see subscribeMakesWebhooks): a subscribe beyond it is refused with a
	// pusher:subscription_error of status 429. Unsubscribes are never
	// refused; each follows a subscribe. Defaults DefaultSubscribeRate a
	// second and DefaultSubscribeBurst.
	SubscribeRate  float64
	SubscribeBurst int
	// MaxSubscriptionsPerApp caps an app's subscriptions over all its
	// connections (config.MaxSubscriptions); a subscribe beyond it is refused
	// with a pusher:subscription_error of status 429. 0: no cap.
	MaxSubscriptionsPerApp int
	// DisconnectDelay is how long an HTTP fallback session may go without a
	// receiving request (streaming or polling) before it is closed, as a
	// WebSocket that dropped. Default 5 s, SockJS's.
	DisconnectDelay time.Duration
	// HeartbeatInterval is how often an HTTP fallback stream carries a
	// heartbeat, and how long a poll waits before answering with one, so
	// that proxies do not time the request out. Default 25 s, SockJS's.
	HeartbeatInterval time.Duration
	// StreamLimitBytes is how many bytes one xhr_streaming response carries
	// before it ends, so that a browser does not keep one response's text
	// for ever. pusher-js reopens its stream by itself once it holds 256 Ki
	// characters, and takes a stream that ends before as a lost connection,
	// so the default, 1 MiB, is above 256 Ki characters of 3-byte UTF-8.
	StreamLimitBytes int
	// ConnectRateLimit is the new connections a second allowed per client
	// address (config.ConnectRateLimit; IPv6 per /64), with bursts of a
	// second's worth; beyond it a WebSocket upgrade, or a request that would
	// open an HTTP fallback session, is refused with HTTP 429 and
	// Retry-After (the other requests of an open session do not count). 0:
	// no limit.
	ConnectRateLimit float64
}

// Defaults of Options.ActivityTimeout and PongTimeout, which the node's
// HERALD_ACTIVITY_TIMEOUT and HERALD_PONG_TIMEOUT default to as well (a node
// test checks that they agree).
const (
	DefaultActivityTimeout = 120 * time.Second // Pusher's own
	DefaultPongTimeout     = 30 * time.Second
)

// WithDefaults returns o with the defaults in place of its zero fields.
func (o Options) WithDefaults() Options {
	o.ActivityTimeout = cmp.Or(o.ActivityTimeout, DefaultActivityTimeout)
	o.PongTimeout = cmp.Or(o.PongTimeout, DefaultPongTimeout)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, 10*time.Second)
	o.MaxQueueBytes = cmp.Or(o.MaxQueueBytes, hub.DefaultMaxQueueBytes)
	o.MaxMessageBytes = cmp.Or(o.MaxMessageBytes, 16*1024)
	o.MaxChannelsPerConn = cmp.Or(o.MaxChannelsPerConn, 1000)
	o.SubscribeRate = cmp.Or(o.SubscribeRate, DefaultSubscribeRate)
	o.SubscribeBurst = cmp.Or(o.SubscribeBurst, DefaultSubscribeBurst)
	o.DisconnectDelay = cmp.Or(o.DisconnectDelay, 5*time.Second)
	o.HeartbeatInterval = cmp.Or(o.HeartbeatInterval, 25*time.Second)
	o.StreamLimitBytes = cmp.Or(o.StreamLimitBytes, 1<<20)
	return o
}

// App is what the transport needs of a Channels app: who it is and the
// policy its connections follow. The node fills it from the app directory
// on every lookup, so a change made while the server runs applies to the
// next connection or message.
type App struct {
	ID      string
	Key     string // public key: the last path segment of /app/<key>
	Secret  string // verifies channel authorizations and sign-ins
	Enabled bool   // a disabled app refuses connections (4003) and subscriptions

	ClientEvents      bool          // client-* events are relayed
	SubscriptionCount bool          // pusher_internal:subscription_count events are sent
	UserAuthTimeout   time.Duration // 0: off; else connections that neither sign in nor subscribe to a private or presence channel in time are closed (4009)
	MaxConnections    int           // 0: unlimited; connections beyond are refused (4004)

	MaxPresenceMembers       int // distinct users on one presence channel; 0: unlimited
	MaxPresenceUserInfoBytes int // size limit of a presence member's user_info

	// History is the app's channel history setting, and RecoveryWindow
	// (≤ 0: off) how long a client may be away and still recover what it
	// missed from it (Options.History, recovery.go).
	History        eventlog.Policy
	RecoveryWindow time.Duration

	// Webhooks tells which channel events the app's webhook endpoints take;
	// nil when it has none. Subscribes that would make webhooks are rate
	// limited per connection (Options.SubscribeRate).
	Webhooks Webhooks
}

// Webhooks is an app's set of webhook endpoints as the transport sees it.
type Webhooks interface {
	// Sends reports whether an event of kind on the channel called channel
	// goes to at least one of the endpoints.
	Sends(kind hub.EventKind, channel string) bool
}

// AppLookup finds apps for the transport; ok is false when there is no such
// app.
type AppLookup interface {
	ByKey(key string) (app App, ok bool)
	ByID(id string) (app App, ok bool)
}
