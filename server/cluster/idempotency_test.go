package cluster

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/idempotency/idempotencytest"
)

// The node's store of Idempotency-Key headers, on each topology: on a
// list of shards it is the first shard's, on a Redis Cluster each app's
// keys are where their hash tag puts them.
func TestIdempotencyStore(t *testing.T) {
	onEachTopology(t, func(t *testing.T, cluster startCluster) {
		c := cluster(1)[0].c
		var n atomic.Int64
		idempotencytest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
			s := c.Idempotency(o)
			s.prefix += fmt.Sprintf("idem-test-%d:", n.Add(1)) // one Redis serves every test
			return s
		})
	})
}
