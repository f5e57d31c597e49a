// Package idempotency keeps the keys of the Idempotency-Key request header
// (the IETF httpapi draft's semantics) on the publishing endpoints: the
// Channels trigger and batch, and the Beams publishes. The first request with
// a key is processed and its answer kept for the key's lifetime; a repeat
// with the same key and body is answered with that answer and does nothing
// again, a repeat with another body is refused, and so is one that arrives
// while the first is still being processed.
//
// A Store keeps the keys of many scopes (a scope is one Channels app or one
// Push instance): Memory on one node, a Redis one in cluster mode
// (server/cluster), the database for Push (DB). Guard holds the rules every
// store shares; the HTTP layer calls it.
package idempotency

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// Defaults of Options.
const (
	// DefaultTTL is how long a key is remembered from its first request.
	DefaultTTL = 24 * time.Hour
	// DefaultMaxKeys is how many keys one scope keeps; beyond it the
	// oldest are forgotten first.
	DefaultMaxKeys = 10000
	// DefaultMaxBytes is what one scope's kept keys may cost in all
	// (KeyCost); beyond it the oldest are forgotten first. 10,000 answers
	// of a trigger with a few channels' info fit; 10,000 of 23 KB do not.
	DefaultMaxBytes = 32 << 20
	// DefaultLock is how long a key stays claimed by a request that has not
	// finished: a node that died while processing it leaves a claim that
	// expires after this, instead of a key that answers 409 for a day.
	DefaultLock = time.Minute
)

// KeyOverhead is what a kept key costs beyond its name and its answer's
// body: its fingerprint, its claim's token, its times and its place in its
// scope's order, in memory as in Redis or the database.
const KeyOverhead = 256

// KeyCost is what a key with an answer of body bytes counts against
// Options.MaxBytes (body is 0 while the key is claimed).
func KeyCost(key string, body int) int { return len(key) + body + KeyOverhead }

// MaxKeyLength is the longest key accepted, in bytes; keys are 1 to
// MaxKeyLength printable ASCII characters (ValidKey).
const MaxKeyLength = 255

// Fingerprint identifies a request's content: two requests with one key
// and different fingerprints are different requests (Sum).
type Fingerprint [sha256.Size]byte

// Sum is the fingerprint of a request from its parts (method, path,
// unsigned query, body), each length-prefixed (8 bytes, little-endian) so
// that no two different lists of parts give the same bytes to hash. The
// Redis and database stores keep fingerprints: this encoding must not
// change, or a retry after an upgrade would be refused as another request.
func Sum(parts ...[]byte) Fingerprint {
	b := sumBuffer()
	for _, p := range parts {
		*b = binary.LittleEndian.AppendUint64(*b, uint64(len(p)))
		*b = append(*b, p...)
	}
	return sumAndRelease(b)
}

// SumRequest is Sum of a request's method, path, unsigned query and body,
// without converting the strings: it allocates nothing, on the path of
// every keyed trigger.
func SumRequest(method, path, query string, body []byte) Fingerprint {
	b := sumBuffer()
	for _, p := range [...]string{method, path, query} {
		*b = binary.LittleEndian.AppendUint64(*b, uint64(len(p)))
		*b = append(*b, p...)
	}
	*b = binary.LittleEndian.AppendUint64(*b, uint64(len(body)))
	*b = append(*b, body...)
	return sumAndRelease(b)
}

// sumBuffers hold the bytes Sum hashes: hashing one buffer with Sum256
// keeps the hash state on the stack, where sha256.New's would be allocated
// on every request.
var sumBuffers = sync.Pool{New: func() any { return new([]byte) }}

func sumBuffer() *[]byte {
	b := sumBuffers.Get().(*[]byte)
	*b = (*b)[:0]
	return b
}

// maxPooledSum is the largest buffer kept for reuse: a larger body (a
// batch) is hashed from a buffer of its own, which the pool does not keep.
const maxPooledSum = 64 << 10

func sumAndRelease(b *[]byte) Fingerprint {
	fp := Fingerprint(sha256.Sum256(*b))
	if cap(*b) <= maxPooledSum {
		sumBuffers.Put(b)
	}
	return fp
}

// String is the fingerprint in hex, as the Redis and database stores keep it.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// Response is a kept answer: its status and body (always JSON).
type Response struct {
	Status int
	Body   []byte
}

// Entry is what a store holds for a key.
type Entry struct {
	Fingerprint Fingerprint
	// Done: the first request finished and Response is its answer; not
	// done, it is still being processed (or its node died doing so, until
	// the claim expires).
	Done     bool
	Response Response
}

// Claim is a request's hold on a key, from Begin until Complete or Release.
type Claim struct {
	Scope, Key string
	Token      string    // names this claim: a later claim of the key after this one expired is not undone by it
	Expires    time.Time // when the key is forgotten once complete: the first request's time plus the TTL
}

// Store keeps keys per scope. Its methods are safe for concurrent use, and
// Begin is atomic over everything that shares the store (every node, for
// the Redis and database stores): of two requests with one new key, exactly
// one claims it.
type Store interface {
	// Begin claims key in scope for a request with fingerprint fp at now,
	// when nobody holds it: it returns (nil, nil) and the claim is made
	// with the given token, its completed answer to be kept until
	// now+ttl. Otherwise it returns what holds the key and claims nothing.
	// Making room for a new key may forget the scope's oldest.
	Begin(ctx context.Context, c Claim, fp Fingerprint, now time.Time) (*Entry, error)
	// Complete keeps the claim's answer until c.Expires, if the claim is
	// still the key's; making room for its bytes may forget the scope's
	// oldest keys (and this one, should its answer alone be over the
	// bound). It may keep res.Body itself: the caller hands it over and
	// does not change it afterwards.
	Complete(ctx context.Context, c Claim, res Response) error
	// Release forgets the key, if c is still its claim, so that the
	// request may be tried again.
	Release(ctx context.Context, c Claim) error
}

// Options bound a Guard and its store.
type Options struct {
	TTL      time.Duration // how long a key is remembered; DefaultTTL when 0
	MaxKeys  int           // keys kept per scope; DefaultMaxKeys when 0
	MaxBytes int           // what a scope's keys cost in all (KeyCost); DefaultMaxBytes when 0
	Lock     time.Duration // how long an unfinished claim holds; DefaultLock when 0
}

// WithDefaults returns o with the defaults in place of its zero fields.
func (o Options) WithDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Lock <= 0 {
		o.Lock = DefaultLock
	}
	return o
}

// Outcome is what Guard.Begin decided about a request.
type Outcome int

const (
	// Proceed: the key is new; process the request, then Finish.
	Proceed Outcome = iota
	// Replay: the same request was answered before; send Response again.
	Replay
	// InFlight: the same key is still being processed (409).
	InFlight
	// Mismatch: the key was used for another request (422).
	Mismatch
)

// Guard applies the rules of idempotency keys over a store.
type Guard struct {
	store Store
	opts  Options
	now   func() time.Time
	// inProcess: the store answers from this process's memory, without
	// I/O, so Finish needs no deadline of its own (whose timer would be
	// a good part of a keyed trigger's cost).
	inProcess bool
}

// NewGuard returns a Guard over store with opts' bounds.
func NewGuard(store Store, opts Options) *Guard {
	_, inProcess := store.(*Memory)
	return &Guard{store: store, opts: opts.WithDefaults(), now: time.Now, inProcess: inProcess}
}

// WithClock makes the guard tell the time with now instead of time.Now (a
// test's clock), and returns it.
func (g *Guard) WithClock(now func() time.Time) *Guard {
	g.now = now
	return g
}

// finishTimeout bounds Finish's write to a store that does I/O. It runs
// after the answer, on a context of its own: a client that hung up must
// not leave its key claimed until the claim lapses.
const finishTimeout = 5 * time.Second

// Options returns the guard's bounds, defaults filled in.
func (g *Guard) Options() Options { return g.opts }

// ErrStore wraps a store's failure: the request can neither be guarded nor
// safely processed without it.
var ErrStore = errors.New("idempotency: the key store failed")

// Begin decides what to do with a request carrying key in scope. With
// Proceed, the returned claim must be ended with Finish; with Replay, the
// response is the first request's answer.
func (g *Guard) Begin(ctx context.Context, scope, key string, fp Fingerprint) (Outcome, Claim, Response, error) {
	now := g.now()
	c := Claim{Scope: scope, Key: key, Token: newToken(), Expires: now.Add(g.opts.TTL)}
	e, err := g.store.Begin(ctx, c, fp, now)
	if err != nil {
		return 0, c, Response{}, errors.Join(ErrStore, err)
	}
	switch {
	case e == nil:
		return Proceed, c, Response{}, nil
	case e.Fingerprint != fp:
		return Mismatch, c, Response{}, nil
	case !e.Done:
		return InFlight, c, Response{}, nil
	}
	return Replay, c, e.Response, nil
}

// Finish ends a claim: a successful (2xx) answer is kept for replays;
// anything else releases the key, since such a request delivered nothing
// and may be retried. ctx is the request's: the write outlives its
// cancellation (a client that hung up must not leave the key claimed),
// for at most finishTimeout.
func (g *Guard) Finish(ctx context.Context, c Claim, res Response) error {
	if !g.inProcess {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
	}
	if res.Status >= 200 && res.Status < 300 {
		return g.store.Complete(ctx, c, res)
	}
	return g.store.Release(ctx, c)
}

// LockEnd is when the claim, made at now and unfinished, stops holding its
// key: after lock, but never after the key itself would be forgotten.
func (c Claim) LockEnd(now time.Time, lock time.Duration) time.Time {
	if end := now.Add(lock); end.Before(c.Expires) {
		return end
	}
	return c.Expires
}

// ValidKey reports whether key is 1 to MaxKeyLength printable ASCII
// characters (a structured-header string's content, as the draft has it,
// without the quotes).
func ValidKey(key string) bool {
	if key == "" || len(key) > MaxKeyLength {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// newToken returns a random claim token.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand's documentation)
	return hex.EncodeToString(b[:])
}
