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

// BenchmarkMemoryHeld fills one app's history with 1,000 channels of 100
// events of 100 bytes (a 2-byte name, 98 bytes of data, each a string of
// its own as a decoded request's is) and reports what that holds: the live
// heap it adds (heap-B) and the process's resident memory it adds (rss-B),
// per fill. The bounds are raised so that nothing is dropped.
func BenchmarkMemoryHeld(b *testing.B) {
	const channels, events = 1000, 100
	p := eventlog.Policy{Events: events, TTL: time.Hour}
	names := make([]string, channels)
	for i := range names {
		names[i] = "channel-" + strconv.Itoa(i)
	}
	var heap, rss float64
	for b.Loop() {
		runtime.GC()
		heap0, rss0 := heapInUse(), residentBytes(b)
		m := eventlog.NewMemory(eventlog.Limits{MaxBytes: 1 << 30, MaxChannels: channels})
		now := time.Now()
		for e := range events {
			for _, ch := range names {
				data := strings.Repeat("x", 90) + fmt.Sprintf("%08d", e)
				if err := m.Append(b.Context(), "app", p, []eventlog.Entry{{Channel: ch, Name: "ev", Data: data}}, now); err != nil {
					b.Fatal(err)
				}
			}
		}
		runtime.GC()
		heap += float64(heapInUse() - heap0)
		rss += float64(residentBytes(b) - rss0)
		if st := m.Stats(); st.Apps[0].Events != channels*events || st.Apps[0].Bytes != channels*events*100 {
			b.Fatalf("held %+v, want %d events of 100 bytes", st.Apps, channels*events)
		}
		runtime.KeepAlive(m)
	}
	b.ReportMetric(heap/float64(b.N), "heap-B")
	b.ReportMetric(rss/float64(b.N), "rss-B")
}

func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
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
