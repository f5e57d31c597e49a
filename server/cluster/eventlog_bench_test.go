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
// channels that keep 100 events each, twice over (every channel has
// dropped as many as it keeps: a busy app's steady state), with events of
// 1, 100 and 1,000 bytes (name and data), a hundred events a call, and
// reports per event kept: the memory Redis uses for it (used_memory before
// and after, redis-B/event), what the store counts against
// HERALD_HISTORY_MAX_BYTES (counted-B/event) and Redis's memory per byte
// counted (redis/counted), which the cost model keeps at 1 or below; and
// the time of an append (append-ns, per event).
func BenchmarkEventLogStoreHeld(b *testing.B) {
	for _, size := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { benchmarkEventLogStoreHeld(b, size) })
	}
}

func benchmarkEventLogStoreHeld(b *testing.B, size int) {
	rdb := redisClient(b)
	const channels, events = 1000, 100
	p := eventlog.Policy{Events: events, TTL: time.Hour}
	var used, counted, appendNS float64
	for i := 0; b.Loop(); i++ {
		ctx := context.Background()
		s := NewEventLogStore(rdb, fmt.Sprintf("bench-%d:", i), eventlog.Limits{MaxBytes: 1 << 40, MaxChannels: channels})
		before := usedMemory(b, rdb)
		start := time.Now()
		for e := range 2 * events {
			for c := 0; c < channels; c += 100 {
				batch := make([]eventlog.Entry, 100)
				for j := range batch {
					batch[j] = eventlog.Entry{Channel: "channel-" + strconv.Itoa(c+j), Name: "e"}
					if size > 1 {
						batch[j].Data = fmt.Sprintf("%0*d", size-1, e)
					}
				}
				if err := s.Append(ctx, "app", p, batch, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
		}
		appendNS += float64(time.Since(start).Nanoseconds()) / (2 * channels * events)
		used += float64(usedMemory(b, rdb) - before)
		st := s.Stats()
		if st.Apps[0].Events != channels*events {
			b.Fatalf("held %+v, want %d events", st.Apps, channels*events)
		}
		counted += float64(st.Apps[0].Bytes)
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N) * channels * events
	b.ReportMetric(used/n, "redis-B/event")
	b.ReportMetric(counted/n, "counted-B/event")
	b.ReportMetric(used/counted, "redis/counted")
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
