package upgrade

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"
)

func TestHeadEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\nrest", len("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"GET / HTTP/1.1\nHost: x\n\nrest", len("GET / HTTP/1.1\nHost: x\n\n")},
		{"GET / HTTP/1.1\r\nHost: x\r\n", 0},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r", 0},
		{"", 0},
		{"\n\n", 2},
	} {
		if got := headEnd([]byte(tc.in)); got != tc.want {
			t.Errorf("headEnd(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// pipeConn is a connection for parseUpgrade's RemoteAddr.
func pipeConn(t testing.TB) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a
}

// Whatever the bytes, judging them does not panic, and a request taken
// here is a GET upgrade under the prefix with a Host.
func FuzzParseUpgrade(f *testing.F) {
	f.Add([]byte(upgradeHead("/app/key?protocol=7")))
	f.Add([]byte(upgradeHead("/app/key", "Host: y\r\n")))
	f.Add([]byte(strings.ReplaceAll(upgradeHead("/app/key"), "\r\n", "\n")))
	f.Add([]byte("GET /app/ HTTP/1.1\r\nHost: \r\nUpgrade: websocket\r\n\r\n"))
	f.Add([]byte("GET /app/%zz HTTP/1.1\r\nHost: x\r\nUpgrade: WebSocket, x\r\nTransfer-Encoding: chunked\r\n\r\n"))
	c := pipeConn(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		end := headEnd(raw)
		if end == 0 {
			return
		}
		if !bytes.HasSuffix(raw[:end], []byte("\n\n")) && !bytes.HasSuffix(raw[:end], []byte("\n\r\n")) {
			t.Fatalf("head %q does not end with an empty line", raw[:end])
		}
		req := parseUpgrade(raw[:end], "/app/", c)
		if req == nil {
			return
		}
		if req.Method != "GET" || !strings.HasPrefix(req.URL.Path, "/app/") || req.Host == "" ||
			req.ContentLength != 0 || req.Header.Get("Upgrade") == "" || req.Header["Host"] != nil {
			t.Fatalf("took %q: %s %s host %q length %d header %v", raw[:end], req.Method, req.URL, req.Host, req.ContentLength, req.Header)
		}
	})
}

// A handed-over connection keeps the head's pooled buffer while any of its
// bytes are still to be replayed, however small net/http's reads, and gives
// it back once the last is read: a buffer given back early would be reused
// by another connection's head under the bytes still to come.
func TestReplayConnKeepsItsBufferUntilReplayed(t *testing.T) {
	buf := headBuffers.Get().(*[]byte)
	*buf = append((*buf)[:0], "GET /x HTTP/1.1\r\n"...)
	rc := newReplayConn(pipeConn(t), head{buf: buf}, time.Now(), 0)
	var got []byte
	p := make([]byte, 5)
	for len(got) < len("GET /x HTTP/1.1\r\n") {
		if rc.h.buf == nil {
			t.Fatalf("buffer given back with %q still to replay", rc.pending)
		}
		n, err := rc.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
	}
	if string(got) != "GET /x HTTP/1.1\r\n" {
		t.Fatalf("replayed %q", got)
	}
	if rc.h.buf != nil {
		t.Fatal("buffer kept after the last byte was replayed")
	}

	empty := headBuffers.Get().(*[]byte)
	*empty = (*empty)[:0]
	if rc := newReplayConn(pipeConn(t), head{buf: empty}, time.Now(), 0); rc.h.buf != nil {
		t.Fatal("an empty head's buffer kept by the handed-over connection")
	}
}

// readHead over a connection that delivers each of the client's writes as
// it was written (net.Pipe): a head that comes in pieces, split anywhere,
// even inside "GET ", is read whole and judged; a GET for another path is
// given up on at its first bytes, without waiting for more.
func TestReadHeadInPieces(t *testing.T) {
	opts := Options{}.WithDefaults()
	full := upgradeHead("/app/key")
	for _, split := range []int{2, 4, 9, len(full) - 2} {
		server, client := net.Pipe()
		go func() {
			_, _ = client.Write([]byte(full[:split]))
			_, _ = client.Write([]byte(full[split:]))
		}()
		h, err := readHead(server, time.Now(), opts)
		if err != nil || h.req == nil || h.req.URL.Path != "/app/key" {
			t.Errorf("split at %d: request %v, error %v; want the upgrade read whole", split, h.req, err)
		}
		h.release()
		server.Close()
		client.Close()
	}

	// The client sends no more and hangs up: only a reader that waited for
	// more would see the end.
	server, client := net.Pipe()
	defer server.Close()
	go func() {
		_, _ = client.Write([]byte("GET /other HTTP/1.1\r\n"))
		client.Close()
	}()
	h, err := readHead(server, time.Now(), opts)
	if err != nil || h.req != nil || string(*h.buf) != "GET /other HTTP/1.1\r\n" {
		t.Fatalf("another path: request %v, error %v, read %q; want it handed over after its first bytes", h.req, err, *h.buf)
	}
	h.release()
}

// An upgrade is served here when its path starts with the prefix, the
// prefix alone included.
func TestServedHereByPathPrefix(t *testing.T) {
	for path, want := range map[string]bool{"/app/": true, "/app/key": true, "/app": false, "/ap": false, "/other/key": false} {
		req := parseUpgrade([]byte(upgradeHead(path)), "/app/", pipeConn(t))
		if got := req != nil; got != want {
			t.Errorf("%s served here: %v, want %v", path, got, want)
		}
	}
}
