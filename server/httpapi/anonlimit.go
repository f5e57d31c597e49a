package httpapi

import (
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/heraldrt/herald/server/internal/clientrate"
)

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
	buckets   *clientrate.Buckets
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
	return &AnonLimiter{perSecond: perSecond, buckets: clientrate.New(perSecond, burst), now: time.Now}
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
	return AnonLimiterStats{Refused: l.refused.Load(), Tracked: l.buckets.Len()}
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
	ok, wait := l.buckets.Take(clientrate.Key(c.ClientIP()), l.now())
	if !ok {
		l.refused.Add(1)
		c.Header("Retry-After", clientrate.RetryAfter(wait))
		writeError(c, newError(http.StatusTooManyRequests, KindRateLimited,
			"More than %g requests per second from this address; retry after the time in Retry-After.", l.perSecond))
		return
	}
	c.Next()
}
