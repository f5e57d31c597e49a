package cluster

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/idempotency/idempotencytest"
	"github.com/heraldrt/herald/server/internal/testredis"
)

func TestIdempotencyStore(t *testing.T) {
	rs := testredis.Start(t)
	opts, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	var n atomic.Int64
	idempotencytest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		// A prefix per test: one Redis serves them all.
		return NewIdempotencyStore(rdb, fmt.Sprintf("idem-test-%d:", n.Add(1)), o)
	})
}
