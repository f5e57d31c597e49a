package node

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/idempotency/dbstore"
)

// channelKeys returns the guard of the Channels API's Idempotency-Key
// headers: in Redis in cluster mode, so a retry on another node is seen,
// else in this node's memory.
func (n *Node) channelKeys(opts idempotency.Options) *idempotency.Guard {
	if n.cluster != nil {
		return idempotency.NewGuard(n.cluster.Idempotency(opts), opts) // Redis expires them itself
	}
	mem := idempotency.NewMemory(opts)
	n.keys.memory = mem
	return idempotency.NewGuard(mem, opts)
}

// publishKeys returns the guard of the Publish API's Idempotency-Key
// headers, kept in the database: across restarts, and over every node that
// shares a PostgreSQL one.
func (n *Node) publishKeys(opts idempotency.Options) *idempotency.Guard {
	n.keys.db = dbstore.New(n.db, opts)
	return idempotency.NewGuard(n.keys.db, opts)
}

// keySweepers are the key stores that do not forget expired keys by
// themselves until a request comes for the same app or instance.
type keySweepers struct {
	memory *idempotency.Memory // nil in cluster mode
	db     *dbstore.Store
}

// sweep forgets the expired keys of every store.
func (k keySweepers) sweep(ctx context.Context, log *zap.Logger) {
	now := time.Now()
	if k.memory != nil {
		k.memory.Sweep(now)
	}
	if k.db != nil {
		if err := k.db.Sweep(ctx, now); err != nil && ctx.Err() == nil {
			log.Warn("purging expired idempotency keys failed; the next sweep tries again", zap.Error(err))
		}
	}
}
