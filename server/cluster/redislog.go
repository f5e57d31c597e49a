package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// The Redis client logs with the standard library's logger, to stderr, in
// its own format, once per failed attempt (a dial retried while Redis is
// down, say). Herald logs with zap only: the client's lines go to the
// newest cluster's logger at debug level — the node reports an outage
// itself, once, at error level.
var redisLogger atomic.Pointer[zap.Logger]

// useRedisLog points the Redis client's logger, one for the whole process,
// at redisLog, the first time it is called: New calls it before it builds
// a client, so a process without a cluster keeps the library's default.
var useRedisLog = sync.OnceFunc(func() { redis.SetLogger(redisLog{}) })

type redisLog struct{}

func (redisLog) Printf(_ context.Context, format string, v ...any) {
	if l := redisLogger.Load(); l != nil && l.Core().Enabled(zap.DebugLevel) {
		l.Debug(fmt.Sprintf(format, v...))
	}
}
