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
// (<prefix>idem:{<app>}:<key>) that expires by itself, and each app has a
// sorted set of its keys by expiry (<prefix>idem:{<app>}), which bounds
// their count: the hash tag keeps an app's keys in one slot, so every
// change is one script. Times are the caller's (the node's clock), kept in
// the hash, and Redis's own expiry follows them; a clock far off another
// node's shortens or lengthens a key's life by as much, nothing worse.
type IdempotencyStore struct {
	rdb     redis.Scripter
	prefix  string
	maxKeys int
	lock    time.Duration
}

var _ idempotency.Store = (*IdempotencyStore)(nil)

// NewIdempotencyStore returns the store over rdb, its keys under prefix,
// with opts' bounds.
func NewIdempotencyStore(rdb redis.Scripter, prefix string, opts idempotency.Options) *IdempotencyStore {
	d := opts.WithDefaults()
	return &IdempotencyStore{rdb: rdb, prefix: prefix, maxKeys: d.MaxKeys, lock: d.Lock}
}

// Idempotency returns the store of the cluster's Idempotency-Key headers, on
// the cluster's Redis under its prefix: on the first shard of a list of
// shards; over a whole Redis Cluster, under the prefix without a shard's
// hash tag, so that each app's hash tag places its keys.
func (c *Cluster) Idempotency(opts idempotency.Options) *IdempotencyStore {
	if c.rdb == nil {
		c = c.home()
	}
	return NewIdempotencyStore(c.rdb, c.p, opts)
}

// index and entry are the Redis keys of an app's set of keys and of one key.
func (s *IdempotencyStore) index(scope string) string { return s.prefix + "idem:{" + scope + "}" }
func (s *IdempotencyStore) entry(scope, key string) string {
	return s.index(scope) + ":" + key
}

// idemBeginScript: KEYS entry index; ARGV fp token now_ms claim_end_ms
// expires_ms max entry_prefix member. Answers nil when it claimed the key,
// else {fp, status, body} of what holds it.
var idemBeginScript = redis.NewScript(`
local now = tonumber(ARGV[3])
local e = redis.call('HMGET', KEYS[1], 'fp', 'status', 'body', 'exp')
if e[1] and tonumber(e[4]) > now then
  return {e[1], e[2], e[3]}
end
if e[1] then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[8])
end
for _, k in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('DEL', ARGV[7] .. k)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local n, max = redis.call('ZCARD', KEYS[2]), tonumber(ARGV[6])
if n >= max then
  for _, k in ipairs(redis.call('ZRANGE', KEYS[2], 0, n - max)) do
    redis.call('DEL', ARGV[7] .. k)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - max)
end
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'token', ARGV[2], 'status', '0', 'body', '', 'exp', ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(ARGV[4]) - now))
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[8])
redis.call('PEXPIRE', KEYS[2], math.max(1, tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]) - now))
return false
`)

// idemCompleteScript: KEYS entry; ARGV token status body expires_ms ttl_ms.
var idemCompleteScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'body', ARGV[3], 'exp', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`)

// idemReleaseScript: KEYS entry index; ARGV token member.
var idemReleaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
`)

// Begin implements idempotency.Store.
func (s *IdempotencyStore) Begin(ctx context.Context, c idempotency.Claim, fp idempotency.Fingerprint, now time.Time) (*idempotency.Entry, error) {
	nowMS := now.UnixMilli()
	claimEnd := min(now.Add(s.lock).UnixMilli(), c.Expires.UnixMilli())
	v, err := idemBeginScript.Run(ctx, s.rdb, []string{s.entry(c.Scope, c.Key), s.index(c.Scope)},
		fp.String(), c.Token, nowMS, claimEnd, c.Expires.UnixMilli(), s.maxKeys, s.entry(c.Scope, ""), c.Key).Result()
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
	err := idemCompleteScript.Run(ctx, s.rdb, []string{s.entry(c.Scope, c.Key)},
		c.Token, res.Status, res.Body, c.Expires.UnixMilli(), ttl.Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("complete idempotency key: %w", err)
	}
	return nil
}

// Release implements idempotency.Store.
func (s *IdempotencyStore) Release(ctx context.Context, c idempotency.Claim) error {
	err := idemReleaseScript.Run(ctx, s.rdb, []string{s.entry(c.Scope, c.Key), s.index(c.Scope)}, c.Token, c.Key).Err()
	if err != nil {
		return fmt.Errorf("release idempotency key: %w", err)
	}
	return nil
}
