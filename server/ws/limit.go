package ws

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/clientrate"
)

// Defaults of the subscribe rate limit (Options.SubscribeRate and
// SubscribeBurst). pusher-js subscribes to every channel of a page at once
// when it connects (tens in a busy app, and all of them again on each
// reconnect, which is a new connection with a full bucket), so the burst is
// well above that; after it, 10 a second is more than a person navigating a
// UI causes, while it bounds the webhooks one anonymous socket can queue:
// a subscribe and unsubscribe cause at most four (occupied, vacated and two
// subscription counts), so 40 a second instead of the 3,400 a second that
// one socket managed without a limit.
const (
	DefaultSubscribeRate  = 10
	DefaultSubscribeBurst = 100
)

// subscribeMakesWebhooks reports whether subscribing to (or leaving) the
// channel called name can make app send a webhook: channel_occupied and
// channel_vacated on every channel, member_added and member_removed on
// presence channels, subscription_count where the app counts subscribers,
// cache_miss on cache channels — each only when one of the app's endpoints
// takes that kind on that channel.
func subscribeMakesWebhooks(app App, name string, kind hub.Kind, cache bool) bool {
	hooks := app.Webhooks
	if hooks == nil {
		return false
	}
	if hooks.Sends(hub.ChannelOccupied, name) || hooks.Sends(hub.ChannelVacated, name) {
		return true
	}
	if kind == hub.Presence {
		return hooks.Sends(hub.MemberAdded, name) || hooks.Sends(hub.MemberRemoved, name)
	}
	if cache && hooks.Sends(hub.CacheMiss, name) {
		return true
	}
	return app.SubscriptionCount && hooks.Sends(hub.SubscriptionCount, name)
}

// allowSubscribe takes a token from the connection's subscribe bucket, made
// on its first use: a connection that never subscribes to a channel with
// webhooks carries no bucket. It runs on the connection's reader only.
func (p *peer) allowSubscribe() bool {
	if p.subscribes == nil {
		o := p.s.opts
		p.subscribes = rate.NewLimiter(rate.Limit(o.SubscribeRate), o.SubscribeBurst)
	}
	return p.subscribes.Allow()
}

// connectLimiter limits new connections per client address: a token bucket
// of perSecond a second holding up to a second's worth (at least one), kept
// by clientrate (IPv6 clients limited per /64, idle buckets forgotten, at
// most clientrate.MaxKeys of them).
type connectLimiter struct {
	perSecond float64
	buckets   *clientrate.Buckets
}

// newConnectLimiter returns the limiter of Options.ConnectRateLimit, or nil
// (no limit) for 0 or less.
func newConnectLimiter(perSecond float64) *connectLimiter {
	if perSecond <= 0 || math.IsNaN(perSecond) {
		return nil
	}
	burst := max(1, int(math.Min(math.Ceil(perSecond), math.MaxInt32)))
	return &connectLimiter{perSecond: perSecond, buckets: clientrate.New(perSecond, burst)}
}

// take takes a token from the bucket of the client at ip at t. Without one
// it takes nothing and returns how long until there is one.
func (l *connectLimiter) take(ip string, t time.Time) (bool, time.Duration) {
	return l.buckets.Take(clientrate.Key(ip), t)
}

// refuse answers a connection over the limit: 429 with Retry-After (whole
// seconds, at least 1) and the error body of Herald's HTTP APIs. No upgrade
// has happened and no session is open, so a client sees an HTTP error,
// which pusher-js retries with its backoff.
func (l *connectLimiter) refuse(w http.ResponseWriter, wait time.Duration) {
	h := w.Header()
	h.Set("Retry-After", clientrate.RetryAfter(wait))
	h.Set("Connection", "close") // a refused connection has nothing more to ask on this one
	writeHTTPError(w, http.StatusTooManyRequests, kindRateLimited, "More than "+
		strconv.FormatFloat(l.perSecond, 'g', -1, 64)+
		" new connections per second from this address; retry after the time in Retry-After.")
}

// remoteIP is the address of the request's peer, for a handler reached
// without a router that knows better (see ServeClient).
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
