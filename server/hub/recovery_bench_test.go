package hub

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/internal/testkit"
)

// BenchmarkFanoutRecovery is what recovery costs the fan-out of one
// channel with 1,000 subscribers, in CPU per delivery (the process's,
// fan-out workers and the queues' draining included, cpu-ns/delivery):
//
//   - unkept: an app without history (Publish);
//   - plain: an app with history (PublishKept, appended then queued under
//     the hub's lock) whose subscribers did not ask for recovery;
//   - recoverable: the same, every subscriber recoverable, so each gets
//     pusher_internal:position before each event (two frames);
//   - one_recoverable: one recoverable subscriber among 999 plain ones,
//     which puts the whole channel on the positioned loop.
//
// Run the variants together, alternating, on a busy machine:
//
//	go test -run '^$' -bench FanoutRecovery -count 5 ./server/hub/
func BenchmarkFanoutRecovery(b *testing.B) {
	const subs = 1000
	b.Run("unkept", func(b *testing.B) { benchFanoutRecovery(b, false, 0, subs) })
	b.Run("plain", func(b *testing.B) { benchFanoutRecovery(b, true, 0, subs) })
	b.Run("recoverable", func(b *testing.B) { benchFanoutRecovery(b, true, subs, subs) })
	b.Run("one_recoverable", func(b *testing.B) { benchFanoutRecovery(b, true, 1, subs) })
}

func benchFanoutRecovery(b *testing.B, kept bool, recoverable, subs int) {
	h := New(zap.NewNop())
	defer h.Close()
	log := eventlog.NewMemory(eventlog.Limits{})
	policy := eventlog.Policy{Events: 100, TTL: time.Hour}
	conns := make([]*Conn, subs)
	for i := range conns {
		c, err := h.Connect("1", ConnectOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var opts SubscribeOptions
		if i < recoverable {
			opts.Recovery = benchRecovery(log, policy)
		}
		if err := h.Subscribe(c, "bench", opts); err != nil {
			b.Fatal(err)
		}
		conns[i] = c
	}
	var buf [][]byte
	drain := func() (frames int) {
		h.Flush()
		for _, c := range conns {
			buf, _ = c.Take(buf[:0])
			frames += len(buf)
		}
		return frames
	}
	drain()
	const batch = 100 // events between drains: 200 KiB a queue at most, under its bound
	data := `{"symbol":"HRLD","price":42.5}`
	now := time.Unix(1_700_000_000, 0)
	frames := 0
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := testkit.CPU()
	for i := 0; i < b.N; i++ {
		m := Message{AppID: "1", Channel: "bench", Event: "price", Data: data}
		if kept {
			if _, err := h.PublishKept(log, policy, now, m); err != nil {
				b.Fatal(err)
			}
		} else if err := h.Publish(m); err != nil {
			b.Fatal(err)
		}
		if i%batch == batch-1 {
			frames += drain()
		}
	}
	frames += drain()
	cpu := testkit.CPU() - cpu0
	b.StopTimer()
	if want := b.N * (subs + recoverable); frames != want {
		b.Fatalf("%d frames, want %d", frames, want)
	}
	deliveries := float64(b.N) * float64(subs)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/deliveries, "ns/delivery")
	b.ReportMetric(float64(cpu.Nanoseconds())/deliveries, "cpu-ns/delivery")
}

// benchRecovery makes a subscription recoverable (no resume).
func benchRecovery(log *eventlog.Memory, policy eventlog.Policy) *Recovery {
	return &Recovery{
		Log: log, Policy: policy, Window: 2 * time.Minute,
		Token: func(p eventlog.ID, mark string) string { return "token@" + p.String() + "/" + mark },
	}
}

// BenchmarkIdleConnMemory is the live heap an idle connection with one
// subscription holds in the hub (live-B/conn), plain or recoverable, for
// 10,000 connections: all on one channel, or each on a channel of its own
// (where a recoverable one also makes its channel's map of them). Their
// queues are drained, as a writer would.
//
//	go test -run '^$' -bench IdleConnMemory -count 5 ./server/hub/
func BenchmarkIdleConnMemory(b *testing.B) {
	for _, shared := range []bool{true, false} {
		for _, recoverable := range []bool{false, true} {
			name := "own_channel"
			if shared {
				name = "one_channel"
			}
			name += map[bool]string{false: "/plain", true: "/recoverable"}[recoverable]
			b.Run(name, func(b *testing.B) { benchIdleConnMemory(b, shared, recoverable) })
		}
	}
}

func benchIdleConnMemory(b *testing.B, shared, recoverable bool) {
	const conns = 10_000
	log := eventlog.NewMemory(eventlog.Limits{})
	policy := eventlog.Policy{Events: 100, TTL: time.Hour}
	var live float64
	for range b.N {
		h := New(zap.NewNop())
		held := make([]*Conn, 0, conns)
		before := liveHeap()
		for i := range conns {
			c, err := h.Connect("1", ConnectOptions{})
			if err != nil {
				b.Fatal(err)
			}
			var opts SubscribeOptions
			if recoverable {
				opts.Recovery = benchRecovery(log, policy)
			}
			channel := "bench"
			if !shared {
				channel += strconv.Itoa(i)
			}
			if err := h.Subscribe(c, channel, opts); err != nil {
				b.Fatal(err)
			}
			held = append(held, c)
		}
		h.Flush() // the recoveries' turns: their pusher_internal:recovery is queued
		for _, c := range held {
			c.Take(nil)
		}
		live += float64(liveHeap() - before)
		runtime.KeepAlive(held)
		h.Close()
	}
	b.ReportMetric(live/float64(b.N)/conns, "live-B/conn")
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
