package ws

import (
	"context"
	"net"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/upgrade"
)

// BenchmarkConnect measures accepting connections: each iteration opens a
// WebSocket over a real socket, reads pusher:connection_established,
// subscribes to a public channel and reads the answer, with several clients
// connecting at once. The connections stay open until the end, as in a
// connect storm; the time per operation covers both ends (the clients are
// minimal raw ones). Run it with a fixed count within the open-file limit
// (two descriptors per connection), e.g. -benchtime=5000x.
//
// Upgrade serves the requests as a node does on a plain listener
// (server/upgrade ahead of net/http), NetHTTP as over TLS (net/http alone).
// Besides the time it reports conns/s and live-KiB/conn: the heap in use
// after a collection with the connections parked, minus before, per
// connection (the raw client's socket, about 0.4 KiB, included).
func BenchmarkConnect(b *testing.B) {
	b.Run("Upgrade", func(b *testing.B) { benchmarkConnect(b, true) })
	b.Run("NetHTTP", func(b *testing.B) { benchmarkConnect(b, false) })
}

func benchmarkConnect(b *testing.B, front bool) {
	log := zap.NewNop()
	h := hub.New(log)
	handler := NewHandler(h, wsApps, log, Options{})
	srv := httptest.NewUnstartedServer(handler)
	upgrades := upgrade.NewServer(handler, upgrade.Options{Go: handler.Go})
	if front {
		srv.Listener = upgrades.Listen(srv.Listener)
	}
	srv.Start()
	defer srv.Close()
	defer handler.Shutdown(context.Background())
	addr := strings.TrimPrefix(srv.URL, "http://")

	var mu sync.Mutex
	var conns []net.Conn
	before := liveHeap()
	start := time.Now()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		var mine []net.Conn
		for pb.Next() {
			conn, br := rawDial(b, addr)
			mine = append(mine, conn)
			readRawFrame(b, br) // pusher:connection_established
			writeRawText(b, conn, `{"event":"pusher:subscribe","data":{"channel":"bench"}}`)
			if p := readRawFrame(b, br); !strings.Contains(string(p), "subscription_succeeded") {
				b.Fatalf("subscribe answered %s", p)
			}
		}
		mu.Lock()
		conns = append(conns, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "conns/s")
	if n := h.Connections("1"); n != b.N {
		b.Fatalf("%d connections open, want %d", n, b.N)
	}
	b.ReportMetric(float64(liveHeap()-before)/1024/float64(b.N), "live-KiB/conn")
	for _, c := range conns {
		c.Close()
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
