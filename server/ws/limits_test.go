package ws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/signing"
)

// subscriptionErrorData decodes a pusher:subscription_error's data.
func subscriptionErrorData(t *testing.T, f serverFrame) (typ string, status int, message string) {
	t.Helper()
	var d struct {
		Type   string `json:"type"`
		Error  string `json:"error"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil || d.Error == "" {
		t.Fatalf("subscription_error data %q", f.Data)
	}
	return d.Type, d.Status, d.Error
}

// Which subscribes can make webhooks, by what the app's endpoints take.
func TestSubscribeMakesWebhooks(t *testing.T) {
	counting := App{SubscriptionCount: true}
	for _, tt := range []struct {
		name    string
		app     App
		hooks   Webhooks
		channel string
		want    bool
	}{
		{"NoWebhooks", counting, nil, "news", false},
		{"EveryKind", App{}, testHooks{}, "news", true},
		{"OccupiedOnly", App{}, testHooks{kinds: "channel_occupied"}, "news", true},
		{"VacatedOnly", App{}, testHooks{kinds: "channel_vacated"}, "news", true},
		{"ClientEventsOnly", counting, testHooks{kinds: "client_event"}, "private-chat", false},
		{"OtherPrefix", App{}, testHooks{prefix: "presence-"}, "news", false},
		{"Prefix", App{}, testHooks{prefix: "presence-"}, "presence-room", true},
		{"MemberAddedOnPresence", App{}, testHooks{kinds: "member_added"}, "presence-room", true},
		{"MemberRemovedOnPresence", App{}, testHooks{kinds: "member_removed"}, "presence-room", true},
		{"MembersOffPresence", App{}, testHooks{kinds: "member_added,member_removed"}, "private-x", false},
		{"CacheMissOnCache", App{}, testHooks{kinds: "cache_miss"}, "private-cache-x", true},
		{"CacheMissOffCache", App{}, testHooks{kinds: "cache_miss"}, "news", false},
		{"CountWhenCounting", counting, testHooks{kinds: "subscription_count"}, "news", true},
		{"CountWhenNotCounting", App{}, testHooks{kinds: "subscription_count"}, "news", false},
		{"CountOnPresence", counting, testHooks{kinds: "subscription_count"}, "presence-room", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.app.Webhooks = tt.hooks
			kind, cache := hub.ChannelKind(tt.channel)
			if got := subscribeMakesWebhooks(tt.app, tt.channel, kind, cache); got != tt.want {
				t.Fatalf("subscribeMakesWebhooks(%s) = %v, want %v", tt.channel, got, tt.want)
			}
		})
	}
}

// Subscribes to channels with webhooks come from a bucket per connection;
// one beyond it is refused with 429 and subscribes nothing, while repeated
// subscribes, unsubscribes, channels without webhooks and other connections
// go on.
func TestSubscribeRateLimit(t *testing.T) {
	// A rate so low that no token comes back during the test: the bucket is
	// its burst.
	s := newWSServer(t, Options{SubscribeBurst: 3, SubscribeRate: 1.5e-9})
	c := s.dial(t, "hooked")
	for _, name := range []string{"a", "b"} {
		c.subscribe(name, "", "")
		c.expect("pusher_internal:subscription_succeeded", name)
	}
	// A refused authorization makes no webhook and takes no token.
	c.subscribe("private-x", "hooked:00", "")
	c.expect("pusher:subscription_error", "private-x")
	c.subscribe("private-x", signing.ChannelAuth("hooked", "s10", c.socketID, "private-x", ""), "")
	c.expect("pusher_internal:subscription_succeeded", "private-x")

	c.subscribe("d", "", "")
	typ, status, msg := subscriptionErrorData(t, c.expect("pusher:subscription_error", "d"))
	if typ != "LimitReached" || status != 429 || !strings.Contains(msg, "may subscribe to 1.5e-09 channels a second after the first 3;") {
		t.Fatalf("refusal: type %s, status %d, %q; want LimitReached, 429, the rate", typ, status, msg)
	}
	if st := s.hub.Channel("10", "d"); st.Occupied {
		t.Fatal("the refused subscribe occupied its channel")
	}
	// Repeating a subscription makes no webhook: answered as before.
	c.subscribe("a", "", "")
	c.expect("pusher_internal:subscription_succeeded", "a")
	// Unsubscribing is never refused.
	c.send(map[string]any{"event": "pusher:unsubscribe", "data": map[string]string{"channel": "a"}})
	c.ping()
	if st := s.hub.Channel("10", "a"); st.Occupied {
		t.Fatal("unsubscribe over the limit was not done")
	}
	c.subscribe("a", "", "")
	c.expect("pusher:subscription_error", "a")

	// Another connection has its own bucket.
	other := s.dial(t, "hooked")
	other.subscribe("d", "", "")
	other.expect("pusher_internal:subscription_succeeded", "d")

	// An app whose webhooks a subscribe does not make is not limited.
	quiet := s.dial(t, "clienthooks")
	for i := range 10 {
		name := fmt.Sprintf("q%d", i)
		quiet.subscribe(name, "", "")
		quiet.expect("pusher_internal:subscription_succeeded", name)
	}
	if got := s.handler.Counters().SubscribeRateLimited; got != 2 {
		t.Fatalf("SubscribeRateLimited = %d, want 2", got)
	}
}

// The defaults leave a page's worth of subscribes at connect alone.
func TestSubscribeRateDefaults(t *testing.T) {
	s := newWSServer(t, Options{})
	c := s.dial(t, "hooked")
	for i := range DefaultSubscribeBurst {
		c.subscribe(fmt.Sprintf("c%d", i), "", "")
	}
	for i := range DefaultSubscribeBurst {
		c.expect("pusher_internal:subscription_succeeded", fmt.Sprintf("c%d", i))
	}
	if got := s.handler.Counters().SubscribeRateLimited; got != 0 {
		t.Fatalf("SubscribeRateLimited = %d, want 0", got)
	}
}

// The cap on an app's subscriptions holds over all its connections, answers
// 429 naming the app's limit, and frees up as subscriptions end.
func TestAppSubscriptionCap(t *testing.T) {
	s := newWSServer(t, Options{MaxSubscriptionsPerApp: 3})
	a, b := s.dial(t, "key1"), s.dial(t, "key1")
	for _, sub := range []struct {
		c    *client
		name string
	}{{a, "x"}, {a, "y"}, {b, "x"}} {
		sub.c.subscribe(sub.name, "", "")
		sub.c.expect("pusher_internal:subscription_succeeded", sub.name)
	}
	b.subscribe("y", "", "")
	typ, status, msg := subscriptionErrorData(t, b.expect("pusher:subscription_error", "y"))
	if typ != "LimitReached" || status != 429 || !strings.Contains(msg, "app") || !strings.Contains(msg, "3") {
		t.Fatalf("refusal: type %s, status %d, %q; want LimitReached, 429, the app's cap", typ, status, msg)
	}
	// Another app is not affected.
	other := s.dial(t, "counting")
	other.subscribe("y", "", "")
	other.expect("pusher_internal:subscription_succeeded", "y")

	_ = a.ws.Close(websocket.StatusNormalClosure, "")
	// The server lets a's subscriptions go after the close handshake, on
	// its own time: wait for that rather than race it.
	wait.Until(t, "a's subscriptions to end", func() bool {
		for _, st := range s.hub.AppStats() {
			if st.AppID == "1" {
				return st.Subscriptions == 1
			}
		}
		return false
	})
	b.subscribe("y", "", "")
	b.expect("pusher_internal:subscription_succeeded", "y")
	if got := s.handler.Counters().AppSubscriptionsCapped; got != 1 {
		t.Fatalf("AppSubscriptionsCapped = %d, want 1", got)
	}
}

// dialStatus tries a WebSocket connection and returns the HTTP status that
// refused it (101 when it was accepted) and the response.
func (s *wsServer) dialStatus(t *testing.T, path string) (int, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, s.url+path, nil)
	if err == nil {
		t.Cleanup(func() { ws.CloseNow() })
		return http.StatusSwitchingProtocols, resp
	}
	if resp == nil {
		t.Fatalf("dial: %v", err)
	}
	return resp.StatusCode, resp
}

// New connections per client address are limited when configured: the one
// over is refused with 429, Retry-After and the error body before any
// upgrade.
func TestConnectRateLimit(t *testing.T) {
	s := newWSServer(t, Options{ConnectRateLimit: 0.0125}) // a burst of 1, the next in 80 s
	s.dial(t, "key1")
	code, resp := s.dialStatus(t, "/app/key1?protocol=7")
	if code != http.StatusTooManyRequests {
		t.Fatalf("second connection answered %d, want 429", code)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 70 || ra > 80 {
		t.Fatalf("Retry-After %q, want about 80 s", resp.Header.Get("Retry-After"))
	}
	var body struct{ Error, Description string }
	const want = "More than 0.0125 new connections per second from this address; retry after the time in Retry-After."
	if resp.Header.Get("Content-Type") != "application/json" || json.NewDecoder(resp.Body).Decode(&body) != nil ||
		body.Error != "rate_limited" || body.Description != want {
		t.Fatalf("body %+v (%s), want the description %q", body, resp.Header.Get("Content-Type"), want)
	}
	c := s.handler.Counters()
	if c.ConnectRateLimited != 1 || c.ConnectionsOpened != 1 || c.ConnectLimiterAddresses != 1 {
		t.Fatalf("counters %+v, want 1 refused, 1 opened, 1 address tracked", c)
	}
}

// Off by default: many connections from one address.
func TestConnectRateLimitOffByDefault(t *testing.T) {
	s := newWSServer(t, Options{})
	for range 20 {
		s.dial(t, "key1")
	}
	if s.handler.connects != nil || s.handler.Counters().ConnectRateLimited != 0 {
		t.Fatal("a connect limit without ConnectRateLimit")
	}
}

// The limit is per client address as the caller names it (IPv6: per /64).
func TestConnectRateLimitPerAddress(t *testing.T) {
	s := newWSServer(t, Options{ConnectRateLimit: 0.01})
	status := func(ip string) int {
		w := httptest.NewRecorder()
		// Not an upgrade: an allowed request reaches the upgrade and fails
		// there, with a status other than 429.
		s.handler.ServeClient(w, httptest.NewRequest(http.MethodGet, "/app/key1?protocol=7", nil), ip)
		return w.Code
	}
	for _, tt := range []struct {
		ip      string
		limited bool
	}{
		{"192.0.2.1", false},
		{"192.0.2.1", true},
		{"::ffff:192.0.2.1", true}, // the same IPv4 address
		{"192.0.2.2", false},
		{"2001:db8::1", false},
		{"2001:db8::2", true}, // the same /64
		{"2001:db8:0:1::1", false},
		{"not an address", false},
		{"not an address", true},
	} {
		if got := status(tt.ip) == http.StatusTooManyRequests; got != tt.limited {
			t.Errorf("%s: limited %v, want %v", tt.ip, got, tt.limited)
		}
	}
	// ServeHTTP takes the peer's address.
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/app/key1?protocol=7", nil)
	r.RemoteAddr = "192.0.2.2:4567"
	s.handler.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("ServeHTTP from 192.0.2.2 answered %d, want 429", w.Code)
	}
}

// The connect limiter's bucket holds a second's worth (at least one) and
// refills at the rate; the buckets themselves are clientrate's (tested there).
func TestConnectLimiterBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newConnectLimiter(2) // burst 2
	for i := range 2 {
		if ok, _ := l.take("192.0.2.200", t0); !ok {
			t.Fatalf("take %d of the burst refused", i+1)
		}
	}
	ok, wait := l.take("192.0.2.200", t0)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("third take: %v, wait %v; want refused, 500ms", ok, wait)
	}
	if got := l.buckets.Len(); got != 1 {
		t.Fatalf("%d buckets, want 1", got)
	}
	// A rate below one a second still lets one connection through.
	slow := newConnectLimiter(0.5)
	if ok, _ := slow.take("192.0.2.1", t0); !ok {
		t.Fatal("the first connection at 0.5 a second refused")
	}
	if ok, wait := slow.take("192.0.2.1", t0); ok || wait != 2*time.Second {
		t.Fatalf("second connection at 0.5 a second: %v, wait %v; want refused, 2s", ok, wait)
	}
	if newConnectLimiter(0) != nil || newConnectLimiter(-1) != nil {
		t.Fatal("a limiter for a rate of 0 or less")
	}
}

// user_info of exactly the app's limit is accepted (one byte more is refused:
// TestSubscribeKinds).
func TestPresenceUserInfoAtTheLimit(t *testing.T) {
	s := newWSServer(t, Options{})
	c := s.dial(t, "key1")
	info := `"` + strings.Repeat("x", 1024-2) + `"` // 1,024 bytes of JSON, app 1's limit
	data := `{"user_id":"u","user_info":` + info + `}`
	c.subscribe("presence-full", signing.ChannelAuth("key1", "secret1", c.socketID, "presence-full", data), data)
	c.expect("pusher_internal:subscription_succeeded", "presence-full")
}

// A watchlist of exactly MaxWatchlist ids is taken whole, without the 4302
// warning that a longer one gets (TestWatchlist).
func TestWatchlistOfExactlyTheMaximum(t *testing.T) {
	s := newWSServer(t, Options{})
	ids := make([]string, hub.MaxWatchlist)
	for i := range ids {
		ids[i] = fmt.Sprintf("u%d", i)
	}
	list, _ := json.Marshal(ids)
	c := s.dial(t, "key1")
	c.signin(`{"id":"watcher","watchlist":` + string(list) + `}`)
	c.expect("pusher:signin_success", "")
	if got := watchlist(t, c.next()); !strings.HasPrefix(got, "offline:u0,u1,") || !strings.HasSuffix(got, ",u99") {
		t.Fatalf("watchlist: %.40s…", got)
	}
	c.ping() // no pusher:error before the pong
}

// A client event name of exactly hub.MaxEventNameLength characters is
// relayed.
func TestClientEventNameOfTheMaximumLength(t *testing.T) {
	s := newWSServer(t, Options{})
	const ch = "private-names"
	sender, receiver := s.dial(t, "key1"), s.dial(t, "key1")
	for _, c := range []*client{sender, receiver} {
		c.subscribe(ch, signing.ChannelAuth("key1", "secret1", c.socketID, ch, ""), "")
		c.expect("pusher_internal:subscription_succeeded", ch)
	}
	name := "client-" + strings.Repeat("n", hub.MaxEventNameLength-len("client-"))
	if f := sender.clientEvent([]byte(`{"event":"` + name + `","channel":"` + ch + `","data":{}}`)); f != nil {
		t.Fatalf("a %d-character event name was refused: %s", len(name), f.Data)
	}
	receiver.expect(name, ch)
}

// A connection refused by the connect rate limit is closed after its 429,
// on every path that answers one: the WebSocket upgrade on server/upgrade's
// fast path and through net/http (a long head, HTTP/1.0 keep-alive, a
// server without the fast path, as over TLS), and a new HTTP fallback
// session on either receiving transport. A request pipelined behind the
// refused one (a fallback preflight, which every server answers) is never
// answered: the client was refused a connection, not one request on it.
func TestConnectRateLimitClosesConnection(t *testing.T) {
	const (
		upgradeRest = " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		upgrade   = "GET /app/key1?protocol=7" + upgradeRest
		fallback  = "POST /pusher/app/key1/123/refused/%s?protocol=7 HTTP/1.%d\r\nHost: x\r\nContent-Length: 0\r\n%s"
		keepAlive = "Connection: keep-alive\r\n"
		next      = "OPTIONS /pusher/app/key1/123/other/xhr_send HTTP/1.1\r\nHost: x\r\n\r\n"
	)
	servers := map[string]*wsServer{
		"Front":   newWSServer(t, Options{ConnectRateLimit: 0.01}), // one now, the next in 100 s
		"NetHTTP": newWSServerNetHTTP(t, Options{ConnectRateLimit: 0.01}),
	}
	for _, s := range servers {
		s.dial(t, "key1") // the address's one connection
	}
	for _, tt := range []struct{ name, server, head string }{
		{"UpgradeFastPath", "Front", upgrade},
		{"UpgradeLongHead", "Front", upgrade + "X-Padding: " + strings.Repeat("p", 5000) + "\r\n"},
		{"UpgradeHTTP10KeepAlive", "Front", strings.Replace("GET /app/key1?protocol=7"+upgradeRest, "HTTP/1.1", "HTTP/1.0", 1) + "Connection: keep-alive, Upgrade\r\n"},
		{"UpgradeNetHTTP", "NetHTTP", upgrade},
		{"Polling", "Front", fmt.Sprintf(fallback, transportPolling, 1, "")},
		{"Streaming", "Front", fmt.Sprintf(fallback, transportStreaming, 1, "")},
		{"PollingHTTP10KeepAlive", "Front", fmt.Sprintf(fallback, transportPolling, 0, keepAlive)},
		{"StreamingNetHTTP", "NetHTTP", fmt.Sprintf(fallback, transportStreaming, 1, "")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := servers[tt.server]
			before := s.handler.Counters().ConnectRateLimited
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "ws://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tt.head+"\r\n"+next); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(wait.Limit))
			got, err := io.ReadAll(conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection stayed open after %q", got)
			}
			if !strings.HasPrefix(string(got), "HTTP/1.1 429 ") && !strings.HasPrefix(string(got), "HTTP/1.0 429 ") {
				t.Fatalf("answered %.200q, want a 429", got)
			}
			if n := strings.Count("\n"+string(got), "\nHTTP/1."); n != 1 {
				t.Fatalf("%d answers on the connection, want only the 429: %q", n, got)
			}
			if n := s.handler.Counters().ConnectRateLimited - before; n != 1 {
				t.Fatalf("%d refused by the connect rate, want 1", n)
			}
		})
	}
}
