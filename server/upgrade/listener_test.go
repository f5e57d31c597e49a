package upgrade

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/internal/wait"
)

// upgradeHead is a WebSocket handshake request as clients send it.
func upgradeHead(path string, extra ...string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" + strings.Join(extra, "") + "\r\n"
}

// testServer serves handler through a Server in front of an http.Server on
// a loopback port.
type testServer struct {
	addr   string
	server *Server
	http   *http.Server
	served chan error
}

func startServer(t *testing.T, handler http.Handler, opts Options) *testServer {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: inner.Addr().String(), server: NewServer(handler, opts), served: make(chan error, 1)}
	ts.http = &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	ln := ts.server.Listen(inner)
	go func() { ts.served <- ts.http.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ts.http.Shutdown(ctx)
		_ = ts.server.Wait(ctx)
	})
	return ts
}

func (ts *testServer) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// writerKind tells which writer served a request: "here" for this
// package's, "net/http" for the http.Server's.
func writerKind(w http.ResponseWriter) string {
	if _, ok := w.(*responseWriter); ok {
		return "here"
	}
	return "net/http"
}

// echoUpgrade answers an upgrade by hijacking with the head unwritten,
// then sends the head followed by "hello" and every byte the client sent
// after its request, then echoes what comes next.
func echoUpgrade(kinds chan<- string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		kinds <- writerKind(w)
		w.Header().Set("Upgrade", "websocket")
		w.WriteHeader(http.StatusSwitchingProtocols)
		hw, ok := w.(*responseWriter)
		if !ok {
			http.Error(w, "not here", http.StatusTeapot)
			return
		}
		c, pending, head, err := hw.HijackWithHead()
		if err != nil {
			panic(err)
		}
		out := append(append(append([]byte{}, head...), "hello|"...), pending...)
		if _, err := c.Write(out); err != nil {
			c.Close()
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// readResponse reads one HTTP response head from br.
func readResponse(t *testing.T, br *bufio.Reader) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestUpgradeIsServedHereWithTheHeadLeavingWithTheFirstBytes(t *testing.T) {
	kinds := make(chan string, 1)
	ts := startServer(t, echoUpgrade(kinds), Options{})
	c := ts.dial(t)
	// Bytes right behind the head (a client's first frame) reach the new
	// owner.
	if _, err := io.WriteString(c, upgradeHead("/app/key?protocol=7")+"early"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp := readResponse(t, br)
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "websocket" {
		t.Fatalf("answer %d %v, want 101 with Upgrade: websocket", resp.StatusCode, resp.Header)
	}
	if kind := <-kinds; kind != "here" {
		t.Fatalf("served by %s, want here", kind)
	}
	got := make([]byte, len("hello|early"))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "hello|early" {
		t.Fatalf("after the head: %q, %v; want hello|early", got, err)
	}
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	got = make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo: %q, %v", got, err)
	}
}

// An upgraded connection outlives the head's deadline: the new owner still
// reads from it after HeaderTimeout has passed.
func TestUpgradedConnectionOutlivesTheHeadDeadline(t *testing.T) {
	const headerTimeout = 20 * time.Millisecond
	kinds := make(chan string, 1)
	ts := startServer(t, echoUpgrade(kinds), Options{HeaderTimeout: headerTimeout})
	c := ts.dial(t)
	if _, err := io.WriteString(c, upgradeHead("/app/key?protocol=7")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if resp := readResponse(t, br); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("answer %d, want 101", resp.StatusCode)
	}
	if kind := <-kinds; kind != "here" {
		t.Fatalf("served by %s, want here", kind)
	}
	got := make([]byte, len("hello|"))
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatal(err)
	}
	// The deadline is the property under test: let it pass (any longer wait
	// only makes a deadline left in place surer to show).
	time.Sleep(10 * headerTimeout)
	if _, err := io.WriteString(c, "late"); err != nil {
		t.Fatal(err)
	}
	got = make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "late" {
		t.Fatalf("echo after the head's deadline: %q, %v", got, err)
	}
}

// Everything that is not plainly an upgrade for the prefix goes to net/http
// with the bytes read put back, and is answered exactly as net/http
// answers it.
func TestOtherRequestsGoToNetHTTP(t *testing.T) {
	kinds := make(chan string, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kinds <- writerKind(w)
		body, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(body))
	})
	ts := startServer(t, handler, Options{})
	long := "X-Long: " + strings.Repeat("a", headBufferSize) + "\r\n"
	for _, tc := range []struct {
		name, request string
		status        int
		body          string
	}{
		{"another path", "GET /apps/1/channels HTTP/1.1\r\nHost: x\r\n\r\n", 200, "GET /apps/1/channels "},
		{"a POST", "POST /app/key HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 200, "POST /app/key abc"},
		{"no Upgrade header", "GET /app/key HTTP/1.1\r\nHost: x\r\n\r\n", 200, "GET /app/key "},
		{"HTTP/1.0", strings.Replace(upgradeHead("/app/key"), "HTTP/1.1", "HTTP/1.0", 1), 200, "GET /app/key "},
		{"a head too long for here", upgradeHead("/app/key", long), 200, "GET /app/key "},
		{"a body", upgradeHead("/app/key", "Content-Length: 2\r\n") + "hi", 200, "GET /app/key hi"},
		{"two Host lines", upgradeHead("/app/key", "Host: other.test\r\n"), 400, ""},
		{"no Host", strings.Replace(upgradeHead("/app/key"), "Host: example.test\r\n", "", 1), 400, ""},
		{"a malformed header", upgradeHead("/app/key", "Bad Name: x\r\n"), 400, ""},
		{"a bad header value", upgradeHead("/app/key", "X-Bad: a\x01b\r\n"), 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.dial(t)
			if _, err := io.WriteString(c, tc.request); err != nil {
				t.Fatal(err)
			}
			resp := readResponse(t, bufio.NewReader(c))
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tc.status)
			}
			if tc.status != 200 {
				return // net/http refused it before any handler
			}
			if kind := <-kinds; kind != "net/http" || string(body) != tc.body {
				t.Fatalf("served by %s with %q, want net/http with %q", kind, body, tc.body)
			}
		})
	}
}

// A connection handed over stays a keep-alive HTTP connection.
func TestHandedOverConnectionKeepsAlive(t *testing.T) {
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) }), Options{})
	c := ts.dial(t)
	br := bufio.NewReader(c)
	for _, path := range []string{"/one", "/two"} {
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp := readResponse(t, br)
		body, _ := io.ReadAll(resp.Body)
		if string(body) != path {
			t.Fatalf("answer %q, want %q", body, path)
		}
	}
}

// A refusal (no hijack) is written as a complete response, and the
// connection is closed after it.
func TestRefusalIsAnsweredAndClosed(t *testing.T) {
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	}), Options{})
	c := ts.dial(t)
	if _, err := io.WriteString(c, upgradeHead("/app/key")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp := readResponse(t, br)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" ||
		string(body) != "slow down\n" || !resp.Close || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("answer %d %v %q, want 429 with Retry-After, the body and Connection: close", resp.StatusCode, resp.Header, body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want EOF", err)
	}
}

// A client that never finishes its head is dropped after HeaderTimeout.
func TestSlowHeadIsDropped(t *testing.T) {
	ts := startServer(t, http.NotFoundHandler(), Options{HeaderTimeout: 50 * time.Millisecond})
	c := ts.dial(t)
	if _, err := io.WriteString(c, "GET /app/key HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read %d, %v; want the connection closed by the server", n, err)
	}
}

// A panic outside the handler's own recovery loses only its connection.
func TestPanicLosesOnlyItsConnection(t *testing.T) {
	var calls atomic.Int32
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		w.WriteHeader(http.StatusNoContent)
	}), Options{})
	c := ts.dial(t)
	if _, err := io.WriteString(c, upgradeHead("/app/key")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the panicking request's connection is still open")
	}
	if ts.server.Panics() != 1 {
		t.Fatalf("%d panics counted, want 1", ts.server.Panics())
	}
	c = ts.dial(t)
	if _, err := io.WriteString(c, upgradeHead("/app/key")); err != nil {
		t.Fatal(err)
	}
	if resp := readResponse(t, bufio.NewReader(c)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("next request: %d, want 204", resp.StatusCode)
	}
}

// Closing the listener ends the http.Server's Serve, and Wait returns once
// the requests under way here are done.
func TestShutdownWaitsForRequestsUnderWay(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.WriteHeader(http.StatusNoContent)
	}), Options{})
	c := ts.dial(t)
	if _, err := io.WriteString(c, upgradeHead("/app/key")); err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.http.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-ts.served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if err := ts.server.Wait(short); err == nil {
		t.Fatal("Wait returned while a request was under way")
	}
	close(release)
	if resp := readResponse(t, bufio.NewReader(c)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the request under way got %d, want 204", resp.StatusCode)
	}
	wait.NoError(t, func() error { return ts.server.Wait(ctx) })
}

// A connection handed over to net/http keeps the head deadline it had from
// accept: a head left unfinished is dropped by HeaderTimeout, behind an
// http.Server with no timeouts of its own (which would wait for ever) as
// behind one whose ReadHeaderTimeout is longer (which would start another).
func TestHandedOverHeadKeepsItsDeadline(t *testing.T) {
	for _, headerTimeout := range []time.Duration{0, 10 * wait.Limit} {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		server := NewServer(http.NotFoundHandler(), Options{HeaderTimeout: 100 * time.Millisecond})
		hs := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: headerTimeout}
		go func() { _ = hs.Serve(server.Listen(inner)) }()
		t.Cleanup(func() { _ = hs.Close() })

		for _, partial := range []string{
			"GET /elsewhere HTTP/1.1\r\nHost: x\r\n",                            // handed over at its first bytes
			"GET /app/key HTTP/1.1\r\nX: " + strings.Repeat("x", 5000) + "\r\n", // too long for here
		} {
			c, err := net.Dial("tcp", inner.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, partial); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(wait.Limit))
			got, err := io.ReadAll(c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("ReadHeaderTimeout %v: the unfinished head %.30q held its connection past HeaderTimeout", headerTimeout, partial)
			}
			if len(got) > 0 && !strings.HasPrefix(string(got), "HTTP/1.1 4") {
				t.Fatalf("answered %q", got)
			}
		}
	}
}

// A zero Options takes the documented defaults: upgrades under /app/, 10 s
// for a head and for an answer that is no upgrade, no read timeout, the
// wall clock, a new goroutine per upgrade and a logger that drops lines.
func TestOptionsDefaults(t *testing.T) {
	o := Options{}.WithDefaults()
	if o.PathPrefix != "/app/" || o.HeaderTimeout != 10*time.Second || o.WriteTimeout != 10*time.Second || o.ReadTimeout != 0 ||
		o.Now == nil || o.Go == nil || o.Log == nil {
		t.Fatalf("defaults %+v", o)
	}
	set := Options{PathPrefix: "/ws/", HeaderTimeout: time.Second, WriteTimeout: 2 * time.Second}.WithDefaults()
	if set.PathPrefix != "/ws/" || set.HeaderTimeout != time.Second || set.WriteTimeout != 2*time.Second {
		t.Fatalf("set fields changed: %+v", set)
	}
}
