package cluster

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/internal/testredis"
)

// A node's record lock expires by itself within 30 seconds: a node that
// dies holding it (rebuilding its record, or taking out another's) does not
// keep that record locked for good, so its heartbeat's expiry still gets it
// taken out.
func TestARecordLockExpiresByItself(t *testing.T) {
	rs := testredis.Start(t)
	n := startNode(t, rs, "locks:", "n1")
	unlock, err := n.m().lock(t.Context(), "other", false)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	ttl, err := rdb.PTTL(t.Context(), n.m().key("lock:", "other")).Result()
	if err != nil || ttl <= 0 || ttl > 30*time.Second {
		t.Fatalf("a held record lock's time to live is %v (%v), want up to 30s", ttl, err)
	}
}
