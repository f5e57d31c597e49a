package ws

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
)

// BenchmarkFanout measures delivery through real sockets: each iteration
// publishes one event to a channel with 1,000 subscribers and the time is
// reported per delivery (ns/delivery). The subscribers are minimal raw
// readers that only count frames, so the server side dominates the profile.
func BenchmarkFanout(b *testing.B) {
	const subs = 1000
	log := zap.NewNop()
	h := hub.New(log)
	handler := NewHandler(h, wsApps, log, Options{})
	srv := httptest.NewServer(handler)
	defer srv.Close()
	defer handler.Shutdown(context.Background())

	var received atomic.Int64
	var wg sync.WaitGroup
	addr := strings.TrimPrefix(srv.URL, "http://")
	for i := 0; i < subs; i++ {
		conn, br := rawDial(b, addr)
		defer conn.Close()
		// connection_established, then subscribe and its answer.
		readRawFrame(b, br)
		writeRawText(b, conn, `{"event":"pusher:subscribe","data":{"channel":"bench"}}`)
		readRawFrame(b, br)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := readRawFrameErr(br); err != nil {
					return
				}
				received.Add(1)
			}
		}()
	}
	data := strings.Repeat("x", 100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.Publish(hub.Message{AppID: "1", Channel: "bench", Event: "tick", Data: data})
	}
	want := int64(b.N) * subs
	deadline := time.Now().Add(30 * time.Second)
	for received.Load() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	if got := received.Load(); got < want {
		b.Fatalf("received %d of %d", got, want)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(want), "ns/delivery")
}

// rawDial opens a WebSocket to app key1 with a hand-written handshake.
func rawDial(b testing.TB, addr string) (net.Conn, *bufio.Reader) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	req := "GET /app/key1?protocol=7 HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		b.Fatalf("handshake: %v %v", res, err)
	}
	return conn, br
}

// writeRawText sends a masked text frame (clients must mask).
func writeRawText(b testing.TB, conn net.Conn, s string) {
	p := []byte(s)
	frame := []byte{0x81, 0x80 | byte(len(p)), 0, 0, 0, 0} // zero mask key: payload unchanged
	if len(p) > 125 {
		b.Fatal("frame too long for the short form")
	}
	if _, err := conn.Write(append(frame, p...)); err != nil {
		b.Fatal(err)
	}
}

func readRawFrame(b testing.TB, br *bufio.Reader) []byte {
	p, err := readRawFrameErr(br)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// readRawFrameErr reads one unmasked server frame and returns its payload.
func readRawFrameErr(br *bufio.Reader) ([]byte, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, err
	}
	n := int(hdr[1] & 0x7f)
	switch n {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			return nil, err
		}
		n = int(ext[0])<<8 | int(ext[1])
	case 127:
		var ext [8]byte
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			return nil, err
		}
		n = 0
		for _, c := range ext {
			n = n<<8 | int(c)
		}
	}
	p := make([]byte, n)
	_, err := io.ReadFull(br, p)
	return p, err
}
