package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	pusher "github.com/pusher/pusher-http-go/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/wait"
)

// shortTimeout is the read and write timeout of the nodes below: short, so
// the tests are quick, and long enough for a loopback request to be sent.
const shortTimeout = 300 * time.Millisecond

const timeoutsInstance = "5b1a2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"

// startTimeoutNode runs a node with app 77, a Push instance, the admin token
// and the timeouts, and returns its host:port.
func startTimeoutNode(t *testing.T, read, write time.Duration) string {
	t.Helper()
	return startOpsNode(t, func(c *config.Config) {
		c.BodyReadTimeout, c.WriteTimeout = read, write
		c.InstanceID, c.InstanceSecretKey = timeoutsInstance, "hardening-secret-key"
	})
}

// slowRequests are requests whose bodies the tests below send slowly: a
// signed API read before its signature is checked, the anonymous Device API,
// the admin API, and a path with no route.
var slowRequests = []struct{ name, head string }{
	{"Trigger", "POST /apps/77/events?auth_key=go-sdk-key HTTP/1.1"},
	{"Device", "POST /device_api/v1/instances/" + timeoutsInstance + "/devices/fcm HTTP/1.1"},
	{"Admin", "POST /admin/v1/apps HTTP/1.1\r\nAuthorization: Bearer " + testAdminToken},
	{"NoRoute", "POST /nowhere HTTP/1.1"},
}

// dialRaw opens a TCP connection to addr that the test closes at its end.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// trickle writes msg one byte every 200 ms, as a slowloris client does, until
// a write fails or the test ends.
func trickle(t *testing.T, conn net.Conn, msg string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < len(msg); i++ {
			if _, err := conn.Write([]byte{msg[i]}); err != nil {
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
}

// waitClosed reads conn until the server closes it and returns what it
// sent; it fails when the connection is still open after wait.Limit.
func waitClosed(t *testing.T, conn net.Conn) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(wait.Limit))
	got, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open (read so far: %q)", got)
	}
	// A reset (the server closed with our bytes unread) is a close too.
	return string(got)
}

// Request bodies (and headers) sent a byte at a time cannot hold a
// connection: the read timeout closes it.
func TestSlowRequestsClosed(t *testing.T) {
	addr := startTimeoutNode(t, shortTimeout, shortTimeout)
	rows := append(slowRequests, struct{ name, head string }{"SlowHeaders", "GET /healthz HTTP/1.1\r\nX-Padding: " + strings.Repeat("x", 1000)})
	for _, tt := range rows {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn := dialRaw(t, addr)
			if tt.name == "SlowHeaders" {
				trickle(t, conn, tt.head)
			} else {
				head := tt.head + "\r\nHost: herald\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
				if _, err := io.WriteString(conn, head); err != nil {
					t.Fatal(err)
				}
				trickle(t, conn, "{"+strings.Repeat(" ", 998)+"}")
			}
			if got := waitClosed(t, conn); strings.HasPrefix(got, "HTTP/1.1 5") {
				t.Fatalf("answered %q", got)
			}
		})
	}
}

// A body that stops arriving is answered with the API's error body (not a
// 500), and the connection is closed. The answer needs a write timeout longer
// than the read timeout: net/http's write deadline runs from the end of the
// headers, as the read deadline does, so with equal timeouts (the defaults)
// the connection is closed without an answer, which TestSlowRequestsClosed
// allows.
func TestStalledBodyAnswered(t *testing.T) {
	addr := startTimeoutNode(t, shortTimeout, wait.Limit)
	for _, tt := range slowRequests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn := dialRaw(t, addr)
			req := tt.head + "\r\nHost: herald\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"name\":"
			status, kind, body := errorAnswer(t, conn, req)
			if status < 400 || status >= 500 || kind == "" {
				t.Fatalf("answered %d %s, want a 4xx with the error body", status, body)
			}
		})
	}
}

// errorAnswer sends req on conn and reads the answer: its status, the kind
// of its error body ("" when it has none with a description) and the body.
// The answer must close the connection, and the server must close it.
func errorAnswer(t *testing.T, conn net.Conn, req string) (status int, kind string, body []byte) {
	t.Helper()
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(wait.Limit))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	var e struct{ Error, Description string }
	if json.Unmarshal(body, &e) == nil && e.Description != "" {
		kind = e.Error
	}
	if !res.Close {
		t.Errorf("the answer does not close the connection")
	}
	waitClosed(t, conn)
	return res.StatusCode, kind, body
}

// The WebSocket connection and the console's event stream outlive the read
// and write timeouts: they still carry messages after a slow request opened
// later has been closed by them.
func TestLongLivedRoutesOutliveTimeouts(t *testing.T) {
	addr := startTimeoutNode(t, shortTimeout, shortTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
	defer cancel()

	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/app/go-sdk-key?protocol=7", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	readUntil := func(event string) {
		t.Helper()
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for %s: %v", event, err)
			}
			if strings.Contains(string(b), `"event":"`+event+`"`) {
				return
			}
		}
	}
	readUntil("pusher:connection_established")

	stream := consoleStream(t, ctx, addr)

	// The clock: a slow request opened after both, closed by its timeout.
	conn := dialRaw(t, addr)
	trickle(t, conn, "POST /apps/77/events HTTP/1.1\r\nHost: herald\r\nContent-Length: 100\r\n\r\n")
	waitClosed(t, conn)

	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:ping","data":{}}`)); err != nil {
		t.Fatal(err)
	}
	readUntil("pusher:pong")
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:subscribe","data":{"channel":"news"}}`)); err != nil {
		t.Fatal(err)
	}
	readUntil("pusher_internal:subscription_succeeded")
	if err := goClient(addr, "go-sdk-key", "go-sdk-secret").Trigger("news", "late", map[string]string{"after": "timeouts"}); err != nil {
		t.Fatal(err)
	}
	readUntil("late")
	for stream.Scan() {
		if strings.Contains(stream.Text(), `"kind":"trigger","channel":"news","event":"late"`) {
			return
		}
	}
	t.Fatalf("the console stream ended: %v", stream.Err())
}

// consoleStream opens the console's event stream of app 77 with a ticket and
// returns its lines, past the opening comment.
func consoleStream(t *testing.T, ctx context.Context, addr string) *bufio.Scanner {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/console/tickets", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tk struct{ Ticket string }
	err = json.NewDecoder(res.Body).Decode(&tk)
	res.Body.Close()
	if res.StatusCode != 200 || err != nil || tk.Ticket == "" {
		t.Fatalf("ticket: %d %v", res.StatusCode, err)
	}
	req, _ = http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/console/events?app=77&ticket="+tk.Ticket, nil)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != 200 {
		t.Fatalf("stream: %d", res.StatusCode)
	}
	lines := bufio.NewScanner(res.Body)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), ": watching") {
		t.Fatalf("stream opened with %q", lines.Text())
	}
	return lines
}

// The access log names the client from X-Forwarded-For only when the peer is
// one of HERALD_TRUSTED_PROXIES.
func TestTrustedProxiesWired(t *testing.T) {
	for _, tt := range []struct {
		name    string
		trusted []string
		want    string
	}{
		{"ByDefaultThePeer", nil, "127.0.0.1"},
		{"FromATrustedProxy", []string{"127.0.0.1"}, "203.0.113.7"},
		{"FromAnotherProxy", []string{"192.0.2.0/24"}, "127.0.0.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			cfg := config.Config{DB: filepath.Join(t.TempDir(), "herald.db"), TrustedProxies: tt.trusted}
			_, addr := serveNodeLog(t, cfg, zap.New(core), Options{})
			req, _ := http.NewRequest("GET", "http://"+addr+"/healthz", nil)
			req.Header.Set("X-Forwarded-For", "203.0.113.7")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			entries := logs.FilterMessage("request").All()
			if len(entries) != 1 || entries[0].ContextMap()["remote"] != tt.want {
				t.Fatalf("access log %v, want remote %s", entries, tt.want)
			}
		})
	}
	// A list that is not addresses stops the node from starting.
	_, err := New(context.Background(), config.Config{DB: filepath.Join(t.TempDir(), "herald.db"), TrustedProxies: []string{"proxy.example"}}, zap.NewNop(), Options{})
	if err == nil || !strings.Contains(err.Error(), "HERALD_TRUSTED_PROXIES") {
		t.Fatalf("New with a bad proxy: %v", err)
	}
}

func TestHTTPTimeoutDefaults(t *testing.T) {
	for _, tt := range []struct{ read, write, wantRead, wantWrite time.Duration }{
		{0, 0, DefaultReadTimeout, DefaultWriteTimeout},
		{time.Second, 2 * time.Second, time.Second, 2 * time.Second},
	} {
		r, w := httpTimeouts(config.Config{BodyReadTimeout: tt.read, WriteTimeout: tt.write})
		if r != tt.wantRead || w != tt.wantWrite {
			t.Errorf("httpTimeouts(%v, %v) = %v, %v; want %v, %v", tt.read, tt.write, r, w, tt.wantRead, tt.wantWrite)
		}
	}
}

// upgradeHead is a valid WebSocket upgrade of app 77's key, up to the blank
// line that ends it (the caller adds headers and that line).
const upgradeHead = "GET /app/go-sdk-key?protocol=7 HTTP/1.1\r\nHost: herald\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"

// A request to a long-lived route (the WebSocket upgrade, the fallback's
// receiving requests) that announces a body and never sends it is refused at
// once with 400 and Connection: close, rather than held: those routes lift
// the read deadline, and net/http would wait for the body with none.
func TestStalledBodyOnLongLivedRoutesRefused(t *testing.T) {
	addr := startTimeoutNode(t, shortTimeout, shortTimeout)
	for _, tt := range []struct{ name, head string }{
		{"GetApp", "GET /app/anything HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n"},
		{"GetAppChunked", "GET /app/anything HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"Upgrade", upgradeHead + "Content-Length: 1\r\n\r\n"},
		{"XHRStreaming", "POST /pusher/app/go-sdk-key/123/stalled1/xhr_streaming HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n"},
		{"XHRPolling", "POST /pusher/app/go-sdk-key/123/stalled2/xhr HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n"},
		{"XHRChunked", "POST /pusher/app/go-sdk-key/123/stalled3/xhr HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn := dialRaw(t, addr)
			if status, kind, body := errorAnswer(t, conn, tt.head); status != http.StatusBadRequest || kind != "unexpected_body" {
				t.Fatalf("answered %d %s, want 400 unexpected_body", status, body)
			}
		})
	}
}

// An upgrade refused with an HTTP answer closes its connection, whichever
// path serves it (the fast path takes heads up to 4 KiB, net/http the
// rest) and whoever refuses it (the WebSocket library, or the router: no
// route, another method, a redirect): a request pipelined behind it (here
// GET /metrics) is never answered.
func TestRefusedUpgradeClosesConnection(t *testing.T) {
	addr := startTimeoutNode(t, wait.Limit, wait.Limit)
	// Without Sec-WebSocket-Key the WebSocket library refuses with 400.
	refused := strings.Replace(upgradeHead, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "", 1)
	// asking turns upgradeHead's request line into another.
	asking := func(requestLine string) string {
		return requestLine + upgradeHead[strings.Index(upgradeHead, "\r\n"):]
	}
	padding := "X-Padding: " + strings.Repeat("p", 5000) + "\r\n"
	for _, tt := range []struct{ name, head, status string }{
		{"ShortHead", refused, "400"},
		{"LongHead", refused + padding, "400"},
		{"NoRoute", asking("GET /nowhere HTTP/1.1"), "404"},
		{"NoRouteUnderApp", asking("GET /app/go-sdk-key/more HTTP/1.1"), "404"},
		{"NoRouteLongHead", asking("GET /nowhere HTTP/1.1") + padding, "404"},
		{"OtherMethod", asking("POST /app/go-sdk-key HTTP/1.1") + "Content-Length: 0\r\n", "405"},
		{"Redirect", asking("GET /docs HTTP/1.1"), "301"},
		{"TrailingSlash", asking("GET /app/go-sdk-key/ HTTP/1.1"), "301"},
		{"HTTP10KeepAlive", strings.Replace(asking("GET /nowhere HTTP/1.0"), "Connection: Upgrade", "Connection: keep-alive, Upgrade", 1), "404"},
		{"HTTP10KeepAliveApp", strings.Replace(asking("GET /app/go-sdk-key HTTP/1.0"), "Connection: Upgrade", "Connection: keep-alive, Upgrade", 1), "426"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			answeredAndClosed(t, addr, tt.head, tt.status)
		})
	}
}

// answeredAndClosed sends the request whose head (up to its blank line) is
// head with GET /metrics pipelined behind it, and fails unless the first is
// answered with status and the connection then closed, the second never
// answered.
func answeredAndClosed(t *testing.T, addr, head, status string) {
	t.Helper()
	conn := dialRaw(t, addr)
	req := head + "\r\n" + "GET /metrics HTTP/1.1\r\nHost: herald\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	got := waitClosed(t, conn)
	if !strings.HasPrefix(got, "HTTP/1.1 "+status+" ") && !strings.HasPrefix(got, "HTTP/1.0 "+status+" ") {
		t.Fatalf("answered %.200q, want a %s", got, status)
	}
	if n := strings.Count("\n"+got, "\nHTTP/1."); n != 1 {
		t.Fatalf("%d answers on the connection, want only the refusal: %q", n, got)
	}
}

// A connection refused by HERALD_WS_CONNECT_RATE_LIMIT is closed after its
// 429 on every path of a node that answers one: the WebSocket upgrade on the
// fast path and through net/http (a long head, HTTP/1.0 keep-alive), and a
// new HTTP fallback session on either receiving transport. The GET /metrics
// pipelined behind it is never answered.
func TestConnectRateLimitClosesConnection(t *testing.T) {
	addr := startOpsNode(t, func(c *config.Config) { c.ConnectRateLimit = 0.01 }) // one now, the next in 100 s
	if _, code := dialSocket(t, "http://"+addr, ""); code != http.StatusSwitchingProtocols {
		t.Fatalf("the address's one connection: %d", code)
	}
	const fallback = "POST /pusher/app/go-sdk-key/123/refused/%s?protocol=7 HTTP/1.%d\r\nHost: herald\r\nContent-Length: 0\r\n%s"
	http10 := strings.Replace(upgradeHead, "HTTP/1.1", "HTTP/1.0", 1)
	for _, tt := range []struct{ name, head string }{
		{"UpgradeFastPath", upgradeHead},
		{"UpgradeLongHead", upgradeHead + "X-Padding: " + strings.Repeat("p", 5000) + "\r\n"},
		{"UpgradeHTTP10KeepAlive", strings.Replace(http10, "Connection: Upgrade", "Connection: keep-alive, Upgrade", 1)},
		{"Polling", fmt.Sprintf(fallback, "xhr", 1, "")},
		{"Streaming", fmt.Sprintf(fallback, "xhr_streaming", 1, "")},
		{"PollingHTTP10KeepAlive", fmt.Sprintf(fallback, "xhr", 0, "Connection: keep-alive\r\n")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			answeredAndClosed(t, addr, tt.head, "429")
		})
	}
}

// A fallback session whose receiving request announces a body it never
// sends is not held open by it: the request is refused, the session has no
// receiver, and it ends after the disconnect delay, leaving its channels.
func TestStalledReceiverDoesNotHoldFallbackSession(t *testing.T) {
	addr := startTimeoutNode(t, shortTimeout, shortTimeout)
	base := "http://" + addr + "/pusher/app/go-sdk-key/123/stalled/"
	post := func(transport, body string) string {
		t.Helper()
		res, err := http.Post(base+transport+"?protocol=7", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode/100 != 2 {
			t.Fatalf("%s: %d %s", transport, res.StatusCode, b)
		}
		return string(b)
	}
	if got := post("xhr", ""); !strings.HasPrefix(got, "o\n") {
		t.Fatalf("opening poll: %q", got)
	}
	post("xhr_send", `["{\"event\":\"pusher:subscribe\",\"data\":{\"channel\":\"news\"}}"]`)
	client := goClient(addr, "go-sdk-key", "go-sdk-secret")
	occupied := func() bool {
		ch, err := client.Channel("news", pusher.ChannelParams{})
		if err != nil {
			t.Fatal(err)
		}
		return ch.Occupied
	}
	wait.Until(t, "the fallback session to subscribe", occupied)

	conn := dialRaw(t, addr)
	if _, err := io.WriteString(conn, "POST /pusher/app/go-sdk-key/123/stalled/xhr?protocol=7 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if got := waitClosed(t, conn); !strings.HasPrefix(got, "HTTP/1.1 400 ") {
		t.Fatalf("the stalled receiving request was answered %q, want a 400", got)
	}
	wait.Until(t, "the session to end and leave its channel", func() bool { return !occupied() })
}
