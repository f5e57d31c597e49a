package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestHistogram(t *testing.T) {
	var h histogram
	for v := uint64(1); v <= 100000; v++ { // 1 µs .. 100 ms, uniform
		h.record(int(v), v)
	}
	n, q, maxUS := h.summary(0.5, 0.9, 0.99)
	if n != 100000 || maxUS != 100000 {
		t.Fatalf("n=%d max=%d", n, maxUS)
	}
	for i, want := range []float64{50000, 90000, 99000} {
		if math.Abs(q[i]-want)/want > 0.02 {
			t.Errorf("quantile %d: got %.0f, want %.0f ±2%%", i, q[i], want)
		}
	}
	for us := uint64(0); us < 1<<30; us = us*3/2 + 1 { // buckets are contiguous and ordered
		b := bucketOf(us)
		if b2 := bucketOf(us + 1); b2 != b && b2 != b+1 {
			t.Fatalf("bucketOf(%d)=%d, bucketOf(%d)=%d", us, b, us+1, b2)
		}
		if mid := bucketMid(b); math.Abs(mid-float64(us)) > float64(us)/60+1 {
			t.Fatalf("bucketMid(bucketOf(%d)) = %.0f", us, mid)
		}
	}
}

func TestFrameParsing(t *testing.T) {
	msg := []byte(`{"event":"load","channel":"load-0","data":"hl:42:1700000000123456789:xxxx"}`)
	name, ok := eventName(msg)
	if !ok || string(name) != "load" {
		t.Fatalf("eventName = %q, %v", name, ok)
	}
	if _, ok := eventName([]byte(`{"channel":"c","event":"load"}`)); ok {
		t.Fatal("eventName accepted a frame in another field order")
	}
	i := bytes.Index(msg, marker)
	seq, rest, ok := parseUint(msg[i+len(marker):], ':')
	if !ok || seq != 42 {
		t.Fatalf("seq = %d, %v", seq, ok)
	}
	ns, _, ok := parseUint(rest, 0)
	if !ok || ns != 1700000000123456789 {
		t.Fatalf("ns = %d, %v", ns, ok)
	}
	for _, bad := range []string{"", ":1", "x:1", "12"} {
		if _, _, ok := parseUint([]byte(bad), ':'); ok {
			t.Errorf("parseUint(%q) accepted", bad)
		}
	}
}

// TestRawClient drives the hand-rolled client against coder/websocket's
// server side: masking, the three length encodings, fragmentation, ping and
// the close code.
func TestRawClient(t *testing.T) {
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		ctx := context.Background()
		go func() { // the reader answers the ping and collects client messages
			for {
				_, p, err := c.Read(ctx)
				if err != nil {
					return
				}
				got <- string(p)
			}
		}()
		_ = c.Write(ctx, websocket.MessageText, []byte("short"))
		_ = c.Write(ctx, websocket.MessageText, bytes.Repeat([]byte("m"), 300))
		_ = c.Write(ctx, websocket.MessageText, bytes.Repeat([]byte("L"), 70000))
		wr, _ := c.Writer(ctx, websocket.MessageText)
		_, _ = wr.Write([]byte("frag"))
		_, _ = wr.Write([]byte("mented"))
		_ = wr.Close()
		if err := c.Ping(ctx); err != nil {
			t.Errorf("ping: %v", err)
		}
		_ = c.Close(4100, "too slow")
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dial := func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "tcp", u.Host) }
	c, err := dialRaw(ctx, dial, u.Host, "/", 512, maxMessage)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteText([]byte(strings.Repeat("c", 200))); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"short", strings.Repeat("m", 300), strings.Repeat("L", 70000), "fragmented"} {
		msg, err := c.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if string(msg) != want {
			t.Fatalf("got %d bytes %.20q…, want %d bytes", len(msg), msg, len(want))
		}
	}
	if _, err := c.ReadMessage(); closeCode(err) != "4100" {
		t.Fatalf("read after close: %v (code %s), want 4100", err, closeCode(err))
	}
	select {
	case m := <-got:
		if m != strings.Repeat("c", 200) {
			t.Fatalf("server got %q", m)
		}
	case <-ctx.Done():
		t.Fatal("server did not get the client's message")
	}
}

func TestSeveralNodesAndProcesses(t *testing.T) {
	cfg, err := parseFlags([]string{"-key", "k", "-app-id", "a", "-secret", "s", "-channels", "2",
		"-url", "ws://127.0.0.1:1,ws://127.0.0.1:2,ws://127.0.0.1:3", "-server-pid", "1,1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.httpURL != "http://127.0.0.1:1" {
		t.Errorf("publishes go to %q, want the first node", cfg.httpURL)
	}
	// Each channel's subscribers go round the nodes: subscribers 0 and 1
	// are the first of channels 0 and 1, 2 and 3 their second, and so on.
	r := &runner{cfg: cfg}
	var got []string
	for i := range 7 {
		got = append(got, strings.TrimPrefix(r.hostOf(i), "127.0.0.1:"))
	}
	if want := "1 1 2 2 3 3 1"; strings.Join(got, " ") != want {
		t.Errorf("subscribers' nodes = %v, want %s", got, want)
	}
	if _, pids := cfg.serverProc(io.Discard); pids != "1,1" {
		t.Errorf("measured processes = %q", pids)
	}
	// Figures of several processes are their sum.
	one, err1 := cpuSeconds("self")
	two, err2 := cpuSeconds("self,self")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if two < 2*one {
		t.Errorf("CPU of self twice = %v, of self once = %v", two, one)
	}
	rss, _ := rssKiB("self")
	rss2, _ := rssKiB("self,self")
	if rss <= 0 || rss2 < 2*rss*9/10 {
		t.Errorf("RSS of self twice = %d, of self once = %d", rss2, rss)
	}
	for _, bad := range []string{"ws://127.0.0.1:1,", "ws://127.0.0.1:1,ftp://x"} {
		if _, err := parseFlags([]string{"-key", "k", "-idle", "-url", bad}, io.Discard); err == nil {
			t.Errorf("-url %q accepted", bad)
		}
	}
	if _, err := parseFlags([]string{"-key", "k", "-idle", "-server-pid", "1,x"}, io.Discard); err == nil {
		t.Error("-server-pid 1,x accepted")
	}
}
