// Package clientrate holds token buckets per client (golang.org/x/time/rate):
// one bucket a key, forgotten once it is full again, at most MaxKeys of them;
// the key of a client address (IPv4, or the /64 of IPv6); and the
// Retry-After value of a wait. It knows nothing of Herald: the WebSocket
// connect limit (ws) and the HTTP APIs' limits (httpapi) both stand on it.
package clientrate

import (
	"math"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// MaxKeys bounds the buckets one Buckets holds at once (about 200 bytes each
// with its key, so about 13 MB at most). Idle buckets are forgotten long
// before this in normal use; the cap only matters under a flood from very
// many clients.
const MaxKeys = 1 << 16

// maxDuration is the longest refill time or wait Buckets computes: tiny
// rates would overflow time.Duration (about 146 years, so Retry-After and
// the sweep interval stay positive).
const maxDuration = math.MaxInt64 >> 1

// Buckets is a token bucket per key: perSecond tokens a second, holding at
// most burst. A bucket left alone until it is full again is the same as a
// new one, so such buckets are forgotten: memory follows the keys seen in
// the last burst/perSecond seconds, and never exceeds the cap (MaxKeys
// unless SetMaxKeys says otherwise). It is safe for concurrent use.
type Buckets struct {
	limit  rate.Limit
	burst  int
	refill time.Duration // an empty bucket's time to fill up

	mu      sync.Mutex
	maxKeys int
	keys    map[string]*rate.Limiter
	swept   time.Time
}

// New returns buckets of perSecond tokens a second holding at most burst
// each. The caller checks its numbers (a rate above 0, a burst of at least 1).
func New(perSecond float64, burst int) *Buckets {
	return &Buckets{
		limit:   rate.Limit(perSecond),
		burst:   burst,
		refill:  time.Duration(math.Min(float64(burst)/perSecond*float64(time.Second), maxDuration)), // no overflow for tiny rates
		maxKeys: MaxKeys,
		keys:    map[string]*rate.Limiter{},
	}
}

// SetMaxKeys sets the cap on the buckets held at once (MaxKeys by default);
// tests use a small one.
func (b *Buckets) SetMaxKeys(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.maxKeys = n
}

// Allow takes a token from key's bucket at t and reports whether there was one.
func (b *Buckets) Allow(key string, t time.Time) bool {
	ok, _ := b.Take(key, t)
	return ok
}

// Take takes a token from key's bucket at t. Without one it takes nothing
// and returns how long until there is one.
func (b *Buckets) Take(key string, t time.Time) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock() // the whole step under one lock, so a sweep never drops a bucket in use
	// At most one sweep per refill time: under a flood from more keys than
	// the cap, sweeping per request would make every request cost O(keys).
	if t.Sub(b.swept) >= b.refill {
		b.sweep(t)
	}
	lim := b.keys[key]
	if lim == nil {
		if len(b.keys) >= b.maxKeys {
			// Every bucket is in use: drop any one. Its key starts afresh,
			// with no more than any new key gets.
			for k := range b.keys {
				delete(b.keys, k)
				break
			}
		}
		lim = rate.NewLimiter(b.limit, b.burst)
		b.keys[key] = lim
	}
	if tokens := lim.TokensAt(t); tokens < 1 {
		return false, time.Duration(math.Min((1-tokens)/float64(b.limit)*float64(time.Second), maxDuration))
	}
	lim.AllowN(t, 1)
	return true, 0
}

// sweep forgets the buckets that are full at t. b.mu is held.
func (b *Buckets) sweep(t time.Time) {
	b.swept = t
	for k, lim := range b.keys {
		if lim.TokensAt(t) >= float64(b.burst) {
			delete(b.keys, k)
		}
	}
}

// Len is the number of buckets held.
func (b *Buckets) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.keys)
}

// Key is the bucket key of a client address: the IPv4 address (an
// IPv4-mapped IPv6 one included), or the /64 of an IPv6 one, which one host
// or subscriber usually holds whole: a limit per IPv6 address would be no
// limit. Anything unparsable is its own key.
func Key(ip string) string {
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

// RetryAfter is the Retry-After header value of wait: whole seconds,
// rounded up, at least 1.
func RetryAfter(wait time.Duration) string {
	return strconv.FormatInt(max(1, int64(math.Ceil(wait.Seconds()))), 10)
}
