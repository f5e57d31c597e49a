package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/eventlog"
)

// BenchmarkEventLogStoreHeld fills one app's history in Redis with 1,000
// channels of 100 events of 100 bytes (a 2-byte name, 98 bytes of data) and
// reports the memory Redis uses for it (used_memory before and after,
// redis-B), per fill, and the time of an append (ns per event, append-ns).
func BenchmarkEventLogStoreHeld(b *testing.B) {
	rdb := redisClient(b)
	const channels, events = 1000, 100
	p := eventlog.Policy{Events: events, TTL: time.Hour}
	var used, appendNS float64
	for i := 0; b.Loop(); i++ {
		ctx := context.Background()
		s := NewEventLogStore(func(string) redis.Cmdable { return rdb }, fmt.Sprintf("bench-%d:", i), eventlog.Limits{MaxBytes: 1 << 30, MaxChannels: channels})
		before := usedMemory(b, rdb)
		start := time.Now()
		for e := range events {
			for c := range channels {
				data := strings.Repeat("x", 90) + fmt.Sprintf("%08d", e)
				if err := s.Append(ctx, "app", p, []eventlog.Entry{{Channel: "channel-" + strconv.Itoa(c), Name: "ev", Data: data}}, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
		}
		appendNS += float64(time.Since(start).Nanoseconds()) / (channels * events)
		used += float64(usedMemory(b, rdb) - before)
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(used/float64(b.N), "redis-B")
	b.ReportMetric(appendNS/float64(b.N), "append-ns")
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}
