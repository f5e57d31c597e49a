package ws

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
)

// BenchmarkConnect measures accepting connections: each iteration opens a
// WebSocket over a real socket, reads pusher:connection_established,
// subscribes to a public channel and reads the answer, with several clients
// connecting at once. The connections stay open until the end, as in a
// connect storm; the time per operation covers both ends (the clients are
// minimal raw ones). Run it with a fixed count within the open-file limit
// (two descriptors per connection), e.g. -benchtime=5000x.
func BenchmarkConnect(b *testing.B) {
	log := zap.NewNop()
	h := hub.New(log)
	handler := NewHandler(h, wsApps, log, Options{})
	srv := httptest.NewServer(handler)
	defer srv.Close()
	defer handler.Shutdown(context.Background())
	addr := strings.TrimPrefix(srv.URL, "http://")

	var mu sync.Mutex
	var conns []net.Conn
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
	if n := h.Connections("1"); n != b.N {
		b.Fatalf("%d connections open, want %d", n, b.N)
	}
	for _, c := range conns {
		c.Close()
	}
}
