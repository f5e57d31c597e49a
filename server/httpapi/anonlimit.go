package httpapi

import (
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"
)

// maxLimiterKeys bounds the buckets a rateLimiter holds at once (about
// 200 bytes each with its key, so about 13 MB at most). Idle buckets are
// forgotten long before this in normal use; the cap only matters under a
// flood from very many addresses.
const maxLimiterKeys = 1 << 16

// AnonLimiter limits the anonymous Push APIs (Device and Reporting; neither
// has credentials, as in Beams) per client address: a token bucket of
// perSecond requests a second with a burst of twice that. One limiter is
// shared by both APIs, so an address has one budget for all of them.
//
// The address is gin's Context.ClientIP (X-Forwarded-For only from trusted
// proxies). IPv6 clients are limited per /64: one subscriber or host
// usually holds a whole /64, and a limit per address would be no limit.
//
// CORS preflights are not limited (registerPreflights mounts them outside):
// they carry no body, touch no storage and are cached by browsers for a day,
// and a 429 without CORS headers would reach the Web SDK as a network error.
type AnonLimiter struct {
	perSecond float64
	buckets   *rateLimiter
	refused   atomic.Uint64
	now       func() time.Time
}

// NewAnonLimiter returns a limiter of perSecond requests a second per client
// address (config.AnonRateLimit), or nil, which limits nothing, when
// perSecond is 0 or less.
//
// The burst is twice the rate (at least 1): an app or page starting up sends
// a handful of Device API calls at once (register, interests, user), and
// many devices behind one NAT may start together; the sustained rate is what
// stops a flood.
func NewAnonLimiter(perSecond float64) *AnonLimiter {
	if perSecond <= 0 || math.IsNaN(perSecond) || math.IsInf(perSecond, 1) {
		return nil // an infinite rate limits nothing (config refuses NaN and Inf anyway)
	}
	burst := max(1, int(math.Min(math.Ceil(2*perSecond), math.MaxInt32)))
	return &AnonLimiter{perSecond: perSecond, buckets: newTokenBuckets(perSecond, burst), now: time.Now}
}

// AnonLimiterStats are an AnonLimiter's counters, for metrics.
type AnonLimiterStats struct {
	Refused uint64 // requests answered 429 since start
	Tracked int    // client addresses (or IPv6 /64s) with a bucket now
}

// Stats returns the limiter's counters; a nil limiter has none.
func (l *AnonLimiter) Stats() AnonLimiterStats {
	if l == nil {
		return AnonLimiterStats{}
	}
	return AnonLimiterStats{Refused: l.refused.Load(), Tracked: l.buckets.len()}
}

// LimitPerClient makes the Device API take each request from l's budget for
// its client address (nil: no limit). It returns api, for chaining.
func (api *DeviceAPI) LimitPerClient(l *AnonLimiter) *DeviceAPI {
	api.anon = l
	return api
}

// LimitPerClient makes the Reporting API take each request from l's budget
// for its client address (nil: no limit). It returns api, for chaining.
func (api *ReportingAPI) LimitPerClient(l *AnonLimiter) *ReportingAPI {
	api.anon = l
	return api
}

// handler is the gin middleware: 429 with Retry-After (whole seconds, at
// least 1) and the error body once the address's bucket is empty. It runs
// after cors, so a browser can read the answer, and before the instance
// lookup and the body read, so refused requests cost neither.
func (l *AnonLimiter) handler(c *gin.Context) {
	if l == nil {
		c.Next()
		return
	}
	ok, wait := l.buckets.take(clientKey(c.ClientIP()), l.now())
	if !ok {
		l.refused.Add(1)
		c.Header("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(wait.Seconds()))), 10))
		writeError(c, newError(http.StatusTooManyRequests, KindRateLimited,
			"More than %g requests per second from this address; retry after the time in Retry-After.", l.perSecond))
		return
	}
	c.Next()
}

// clientKey is the bucket key of a client address: the IPv4 address, or the
// /64 of an IPv6 one. Anything unparsable is its own key.
func clientKey(ip string) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	addr = addr.Unmap()
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

// rateLimiter is a token bucket per key (golang.org/x/time/rate): perSecond
// tokens a second, holding at most burst. A bucket left alone until it is
// full again is the same as a new one, so such buckets are forgotten: memory
// follows the keys seen in the last burst/perSecond seconds, and never
// exceeds maxLimiterKeys buckets.
type rateLimiter struct {
	limit   rate.Limit
	burst   int
	refill  time.Duration // an empty bucket's time to fill up
	maxKeys int

	mu    sync.Mutex
	keys  map[string]*rate.Limiter
	swept time.Time
}

// newRateLimiter allows each key limit requests a second with bursts of
// limit (the Publish API's limit per instance).
func newRateLimiter(limit int) *rateLimiter {
	return newTokenBuckets(float64(limit), limit)
}

func newTokenBuckets(perSecond float64, burst int) *rateLimiter {
	return &rateLimiter{
		limit:   rate.Limit(perSecond),
		burst:   burst,
		refill:  time.Duration(math.Min(float64(burst)/perSecond*float64(time.Second), math.MaxInt64>>1)), // no overflow for tiny rates
		maxKeys: maxLimiterKeys,
		keys:    map[string]*rate.Limiter{},
	}
}

// allow takes a token from key's bucket at t and reports whether there was one.
func (l *rateLimiter) allow(key string, t time.Time) bool {
	ok, _ := l.take(key, t)
	return ok
}

// take takes a token from key's bucket at t. Without one it takes nothing
// and returns how long until there is one.
func (l *rateLimiter) take(key string, t time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock() // the whole step under one lock, so a sweep never drops a bucket in use
	// At most one sweep per refill time: under a flood from more keys than
	// the cap, sweeping per request would make every request cost O(keys).
	if t.Sub(l.swept) >= l.refill {
		l.sweep(t)
	}
	lim := l.keys[key]
	if lim == nil {
		if len(l.keys) >= l.maxKeys {
			// Every bucket is in use: drop any one. Its key starts afresh,
			// with no more than any new key gets.
			for k := range l.keys {
				delete(l.keys, k)
				break
			}
		}
		lim = rate.NewLimiter(l.limit, l.burst)
		l.keys[key] = lim
	}
	if tokens := lim.TokensAt(t); tokens < 1 {
		return false, time.Duration(math.Min((1-tokens)/float64(l.limit)*float64(time.Second), math.MaxInt64>>1))
	}
	lim.AllowN(t, 1)
	return true, 0
}

// sweep forgets the buckets that are full at t. l.mu is held.
func (l *rateLimiter) sweep(t time.Time) {
	l.swept = t
	for k, lim := range l.keys {
		if lim.TokensAt(t) >= float64(l.burst) {
			delete(l.keys, k)
		}
	}
}

// len is the number of buckets held.
func (l *rateLimiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
