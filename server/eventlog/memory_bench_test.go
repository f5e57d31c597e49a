package eventlog_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
)

// BenchmarkMemoryHeld fills one app's history with 1,000 channels that
// keep 100 events each, twice over (so that every channel has dropped as
// many as it keeps: the steady state of a busy app), with events of 1, 100
// and 1,000 bytes (name and data, each a string of its own as a decoded
// request's is), and reports per event kept: the live heap it holds
// (heap-B/event: its objects), the heap's spans in use (inuse-B/event: with
// the room that events dropped left between those kept), the process's
// resident memory (rss-B/event), what the store counts against
// HERALD_HISTORY_MAX_BYTES (counted-B/event), and the live heap per byte
// counted (heap/counted), which the cost model keeps at 1 or below.
// The bounds are raised so that nothing is dropped for them.
func BenchmarkMemoryHeld(b *testing.B) {
	for _, size := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { benchmarkMemoryHeld(b, size) })
	}
}

func benchmarkMemoryHeld(b *testing.B, size int) {
	const channels, events = 1000, 100
	p := eventlog.Policy{Events: events, TTL: time.Hour}
	names := make([]string, channels)
	for i := range names {
		names[i] = "channel-" + strconv.Itoa(i)
	}
	var heap, inuse, rss, counted float64
	for b.Loop() {
		runtime.GC()
		heap0, inuse0 := heapBytes()
		rss0 := residentBytes(b)
		m := eventlog.NewMemory(eventlog.Limits{MaxBytes: 1 << 40, MaxChannels: channels})
		now := time.Now()
		for e := range 2 * events {
			for _, ch := range names {
				entry := eventlog.Entry{Channel: ch, Name: string([]byte{'e'})}
				if size > 1 {
					entry.Data = fmt.Sprintf("%0*d", size-1, e)
				}
				if err := m.Append(b.Context(), "app", p, []eventlog.Entry{entry}, now); err != nil {
					b.Fatal(err)
				}
			}
		}
		runtime.GC()
		heap1, inuse1 := heapBytes()
		heap += float64(heap1 - heap0)
		inuse += float64(inuse1 - inuse0)
		rss += float64(residentBytes(b) - rss0)
		st := m.Stats()
		if st.Apps[0].Events != channels*events {
			b.Fatalf("held %+v, want %d events", st.Apps, channels*events)
		}
		counted += float64(st.Apps[0].Bytes)
		runtime.KeepAlive(m)
	}
	n := float64(b.N) * channels * events
	b.ReportMetric(heap/n, "heap-B/event")
	b.ReportMetric(inuse/n, "inuse-B/event")
	b.ReportMetric(rss/n, "rss-B/event")
	b.ReportMetric(counted/n, "counted-B/event")
	b.ReportMetric(heap/counted, "heap/counted")
}

// heapBytes returns the bytes of the heap's live objects and of its spans
// in use.
func heapBytes() (alloc, inuse int64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), int64(ms.HeapInuse)
}

// residentBytes is the process's resident set size, from /proc/self/statm.
func residentBytes(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skip("no /proc/self/statm:", err)
	}
	fields := strings.Fields(string(raw))
	pages, _ := strconv.ParseInt(fields[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// BenchmarkMemoryAppend is one trigger's share of the history: one event
// appended to a channel that keeps its last 100, so that from the 101st on
// each append also drops the oldest.
func BenchmarkMemoryAppend(b *testing.B) {
	m := eventlog.NewMemory(eventlog.Limits{})
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	now := time.Now()
	entries := []eventlog.Entry{{Channel: "news", Name: "price", Data: `{"symbol":"HRLD","price":42.5}`}}
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Append(b.Context(), "app", p, entries, now); err != nil {
			b.Fatal(err)
		}
	}
}
