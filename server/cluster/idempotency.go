package cluster

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/idempotency"
)

// IdempotencyStore keeps the Idempotency-Key headers of the Channels HTTP API
// in Redis, so that a trigger retried on another node of the cluster is
// answered as the first was and delivered once. Each key is a hash
// (<prefix>idem:{<app>}:<key>) that expires by itself, each app has a
// sorted set of its keys by expiry (<prefix>idem:{<app>}), which bounds
// their count, and a hash of what each costs (idempotency.KeyCost) with
// their total in the field "" (<prefix>idem:{<app>}#), which bounds their
// bytes: the hash tag keeps an app's keys in one slot, so every change is
// one script. Times are the caller's (the node's clock), kept in the hash,
// and Redis's own expiry follows them; a clock far off another node's
// shortens or lengthens a key's life by as much, nothing worse.
type IdempotencyStore struct {
	// place is where a scope's keys are: the Redis and key prefix of the
	// scope's shard.
	place    func(scope string) (redis.Scripter, string)
	maxKeys  int
	maxBytes int
	lock     time.Duration
}

var _ idempotency.Store = (*IdempotencyStore)(nil)

// NewIdempotencyStore returns the store over rdb, its keys under prefix,
// with opts' bounds.
func NewIdempotencyStore(rdb redis.Scripter, prefix string, opts idempotency.Options) *IdempotencyStore {
	return newIdempotencyStore(func(string) (redis.Scripter, string) { return rdb, prefix }, opts)
}

// newIdempotencyStore returns the store whose scopes are where place says.
func newIdempotencyStore(place func(scope string) (redis.Scripter, string), opts idempotency.Options) *IdempotencyStore {
	d := opts.WithDefaults()
	return &IdempotencyStore{place: place, maxKeys: d.MaxKeys, maxBytes: d.MaxBytes, lock: d.Lock}
}

// Idempotency returns the store of the cluster's Idempotency-Key headers, on
// its Redis under its prefix.
func (c *member) Idempotency(opts idempotency.Options) *IdempotencyStore {
	return NewIdempotencyStore(c.rdb, c.p, opts)
}

// index, sizes and entry are the Redis keys of an app's set of keys, of
// their costs and of one key.
func (s *IdempotencyStore) index(scope string) string {
	_, prefix := s.place(scope)
	return prefix + "idem:{" + scope + "}"
}

// rdb is the Redis of scope's keys.
func (s *IdempotencyStore) rdb(scope string) redis.Scripter {
	rdb, _ := s.place(scope)
	return rdb
}
func (s *IdempotencyStore) sizes(scope string) string { return s.index(scope) + "#" }
func (s *IdempotencyStore) entry(scope, key string) string {
	return s.index(scope) + ":" + key
}

// keys are the KEYS of every idempotency script: the key's entry, then
// the app's index and sizes.
func (s *IdempotencyStore) keys(c idempotency.Claim) []string {
	return []string{s.entry(c.Scope, c.Key), s.index(c.Scope), s.sizes(c.Scope)}
}

// idemPrelude is the start of every idempotency script: KEYS entry index
// sizes. forget takes the app's key k out of everything, total is what
// the app's keys cost.
const idemPrelude = `
local index, sizes = KEYS[2], KEYS[3]
local function forget(prefix, k)
  redis.call('DEL', prefix .. k)
  redis.call('ZREM', index, k)
  local b = redis.call('HGET', sizes, k)
  if b then
    redis.call('HDEL', sizes, k)
    redis.call('HINCRBY', sizes, '', 0 - tonumber(b))
  end
end
local function total() return tonumber(redis.call('HGET', sizes, '') or '0') end
`

// idemBeginScript: ARGV fp token now_ms claim_end_ms expires_ms max
// entry_prefix member max_bytes cost. Answers nil when it claimed the key,
// else {fp, status, body} of what holds it.
var idemBeginScript = redis.NewScript(idemPrelude + `
local now, prefix, member = tonumber(ARGV[3]), ARGV[7], ARGV[8]
local e = redis.call('HMGET', KEYS[1], 'fp', 'status', 'body', 'exp')
if e[1] and tonumber(e[4]) > now then
  return {e[1], e[2], e[3]}
end
forget(prefix, member)
for _, k in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', now)) do
  forget(prefix, k)
end
local max, maxBytes, cost = tonumber(ARGV[6]), tonumber(ARGV[9]), tonumber(ARGV[10])
while true do
  local n = redis.call('ZCARD', index)
  if n == 0 or (n < max and total() + cost <= maxBytes) then break end
  forget(prefix, redis.call('ZRANGE', index, 0, 0)[1])
end
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'token', ARGV[2], 'status', '0', 'body', '', 'exp', ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(ARGV[4]) - now))
redis.call('ZADD', index, ARGV[5], member)
redis.call('HSET', sizes, member, cost)
redis.call('HINCRBY', sizes, '', cost)
local last = math.max(1, tonumber(redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')[2]) - now)
redis.call('PEXPIRE', index, last)
redis.call('PEXPIRE', sizes, last)
return false
`)

// idemCompleteScript: ARGV token status body expires_ms ttl_ms member
// entry_prefix max_bytes cost. Past max_bytes the app's oldest keys go,
// this one too should its answer alone be over.
var idemCompleteScript = redis.NewScript(idemPrelude + `
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'body', ARGV[3], 'exp', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
local cost = tonumber(ARGV[9])
local was = tonumber(redis.call('HGET', sizes, ARGV[6]) or '0')
redis.call('HSET', sizes, ARGV[6], cost)
redis.call('HINCRBY', sizes, '', cost - was)
while total() > tonumber(ARGV[8]) do
  local front = redis.call('ZRANGE', index, 0, 0)[1]
  if not front then break end
  forget(ARGV[7], front)
end
return 1
`)

// idemReleaseScript: ARGV token member entry_prefix.
var idemReleaseScript = redis.NewScript(idemPrelude + `
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
forget(ARGV[3], ARGV[2])
return 1
`)

// Begin implements idempotency.Store.
func (s *IdempotencyStore) Begin(ctx context.Context, c idempotency.Claim, fp idempotency.Fingerprint, now time.Time) (*idempotency.Entry, error) {
	nowMS := now.UnixMilli()
	claimEnd := min(now.Add(s.lock).UnixMilli(), c.Expires.UnixMilli())
	v, err := idemBeginScript.Run(ctx, s.rdb(c.Scope), s.keys(c), fp.String(), c.Token, nowMS, claimEnd, c.Expires.UnixMilli(),
		s.maxKeys, s.entry(c.Scope, ""), c.Key, s.maxBytes, idempotency.KeyCost(c.Key, 0)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim idempotency key: %w", err)
	}
	held, ok := v.([]any)
	if !ok || len(held) != 3 {
		return nil, fmt.Errorf("claim idempotency key: unexpected answer %v", v)
	}
	fpHex, _ := held[0].(string)
	statusText, _ := held[1].(string)
	body, _ := held[2].(string)
	status, _ := strconv.Atoi(statusText)
	e := &idempotency.Entry{Done: status != 0, Response: idempotency.Response{Status: status, Body: []byte(body)}}
	// A fingerprint that does not decode matches no request's.
	_, _ = hex.Decode(e.Fingerprint[:], []byte(fpHex))
	return e, nil
}

// Complete implements idempotency.Store.
func (s *IdempotencyStore) Complete(ctx context.Context, c idempotency.Claim, res idempotency.Response) error {
	ttl := max(time.Millisecond, time.Until(c.Expires))
	err := idemCompleteScript.Run(ctx, s.rdb(c.Scope), s.keys(c), c.Token, res.Status, res.Body, c.Expires.UnixMilli(), ttl.Milliseconds(),
		c.Key, s.entry(c.Scope, ""), s.maxBytes, idempotency.KeyCost(c.Key, len(res.Body))).Err()
	if err != nil {
		return fmt.Errorf("complete idempotency key: %w", err)
	}
	return nil
}

// Release implements idempotency.Store.
func (s *IdempotencyStore) Release(ctx context.Context, c idempotency.Claim) error {
	err := idemReleaseScript.Run(ctx, s.rdb(c.Scope), s.keys(c), c.Token, c.Key, s.entry(c.Scope, "")).Err()
	if err != nil {
		return fmt.Errorf("release idempotency key: %w", err)
	}
	return nil
}
