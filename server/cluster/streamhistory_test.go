package cluster

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// A publish keeps about the last 10 s of its stream (StreamHistory, the
// README's figure) by Redis's clock: an entry 11 s old by Redis's clock is
// trimmed, one 9 s old is kept. (One entry a stream node, so that Redis's
// approximate trimming, which drops whole nodes, is exact; the entries are
// written with ids of those ages instead of waiting for them to age.)
func TestStreamsKeepTheirLastTenSecondsByRedissClock(t *testing.T) {
	rs := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.ConfigSet(t.Context(), "stream-node-max-entries", "1").Err(); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, rs, "hist:", "n1")
	wait.Until(t, "the node is up", func() bool { return n.c.Stats().Up })
	stream := "hist:" + streamOf(slotOf("app", "news"))
	now := redisMillis(t, rdb)
	old, recent := fmt.Sprintf("%d-0", now-11_000), fmt.Sprintf("%d-0", now-9_000)
	for _, id := range []string{old, recent} {
		if err := rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: stream, ID: id, Values: []any{"f", fieldsOf("m", "old")}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "e", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	entries, err := rdb.XRange(t.Context(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.ID)
	}
	if len(ids) != 2 || ids[0] != recent {
		t.Fatalf("the stream holds %v after a publish, want the entry 9 s old (%s) and the new one, not the one 11 s old (%s)", ids, recent, old)
	}
}
