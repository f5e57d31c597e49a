package cluster

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/eventlog/eventlogtest"
	"github.com/heraldrt/herald/server/internal/testredis"
)

func TestEventLogStore(t *testing.T) {
	rs := testredis.Start(t)
	opts, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	var n atomic.Int64
	eventlogtest.Run(t, func(t *testing.T, l eventlog.Limits) eventlog.Store {
		// A prefix per test: one Redis serves them all.
		return NewEventLogStore(func(string) redis.Cmdable { return rdb }, fmt.Sprintf("hist-test-%d:", n.Add(1)), l)
	})
}
