package ws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/signing"
	"github.com/heraldrt/herald/server/upgrade"
	"github.com/heraldrt/herald/server/ws/socket"
)

// socketApps is an AppLookup over a fixed set of apps.
type socketApps []App

func (s socketApps) ByKey(key string) (App, bool) {
	for _, a := range s {
		if a.Key == key {
			return a, true
		}
	}
	return App{}, false
}

func (s socketApps) ByID(id string) (App, bool) {
	for _, a := range s {
		if a.ID == id {
			return a, true
		}
	}
	return App{}, false
}

var wsApps = socketApps{
	{ID: "1", Key: "key1", Secret: "secret1", Enabled: true, ClientEvents: true, MaxPresenceMembers: 100, MaxPresenceUserInfoBytes: 1024},
	{ID: "2", Key: "off", Secret: "secret2", Enabled: false},
	{ID: "3", Key: "one", Secret: "secret3", Enabled: true, MaxConnections: 1},
	{ID: "4", Key: "noclient", Secret: "secret4", Enabled: true, ClientEvents: false},
	{ID: "8", Key: "strict", Secret: "s8", Enabled: true, UserAuthTimeout: 200 * time.Millisecond, MaxPresenceMembers: 100, MaxPresenceUserInfoBytes: 1024},
	{ID: "9", Key: "counting", Secret: "s9", Enabled: true, SubscriptionCount: true, MaxPresenceMembers: 100, MaxPresenceUserInfoBytes: 1024},
	// Apps with webhooks: every kind on every channel, and only some.
	{ID: "10", Key: "hooked", Secret: "s10", Enabled: true, ClientEvents: true, MaxPresenceMembers: 100, MaxPresenceUserInfoBytes: 1024,
		Webhooks: testHooks{}},
	{ID: "11", Key: "clienthooks", Secret: "s11", Enabled: true, ClientEvents: true,
		Webhooks: testHooks{kinds: "client_event"}},
}

type wsServer struct {
	hub     *hub.Hub
	handler *Handler
	url     string // ws://host:port
}

func newWSServer(t testing.TB, opts Options) *wsServer {
	return newWSServerSendBuffer(t, opts, 0)
}

// newWSServerSendBuffer starts a server whose accepted sockets have the given
// kernel send buffer (0: the system default). Slow-consumer tests shrink it so
// the kernel cannot hide a client that stopped reading behind megabytes of
// buffer.
func newWSServerSendBuffer(t testing.TB, opts Options, sendBuffer int) *wsServer {
	t.Helper()
	return newWSServerSetup(t, opts, sendBuffer, nil)
}

// newWSServerSetup is newWSServerSendBuffer with setup (when not nil) run on
// the hub before the server starts: an observer or a clock installed then is
// seen by every connection without a race.
func newWSServerSetup(t testing.TB, opts Options, sendBuffer int, setup func(*hub.Hub)) *wsServer {
	t.Helper()
	return newWSServerApps(t, opts, sendBuffer, setup, wsApps)
}

// newWSServerApps is newWSServerSetup over the apps of lookup. Upgrade
// requests are served as a node serves them on a plain listener: by
// server/upgrade, ahead of net/http (newWSServerNetHTTP leaves it out).
func newWSServerApps(t testing.TB, opts Options, sendBuffer int, setup func(*hub.Hub), lookup AppLookup) *wsServer {
	t.Helper()
	return startWSServer(t, opts, sendBuffer, setup, lookup, true)
}

// newWSServerNetHTTP is newWSServer with every request served by net/http,
// as over TLS.
func newWSServerNetHTTP(t testing.TB, opts Options) *wsServer {
	t.Helper()
	return startWSServer(t, opts, 0, nil, wsApps, false)
}

func startWSServer(t testing.TB, opts Options, sendBuffer int, setup func(*hub.Hub), lookup AppLookup, front bool) *wsServer {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	h := hub.New(log)
	if setup != nil {
		setup(h)
	}
	handler := NewHandler(h, lookup, log, opts)
	srv := httptest.NewUnstartedServer(handler)
	if sendBuffer > 0 {
		srv.Listener = sendBufferListener{srv.Listener, sendBuffer}
	}
	upgrades := upgrade.NewServer(handler, upgrade.Options{Go: handler.Go, Log: log})
	if front {
		srv.Listener = upgrades.Listen(srv.Listener)
	}
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
		defer cancel()
		srv.Close()
		if err := upgrades.Wait(ctx); err != nil {
			t.Errorf("upgrades under way: %v", err)
		}
		if err := handler.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		h.Close()
	})
	return &wsServer{hub: h, handler: handler, url: "ws" + strings.TrimPrefix(srv.URL, "http")}
}

type sendBufferListener struct {
	net.Listener
	size int
}

func (l sendBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		err = c.(*net.TCPConn).SetWriteBuffer(l.size)
	}
	return c, err
}

// client is a raw protocol-7 test client.
type client struct {
	t        *testing.T
	ws       *websocket.Conn
	socketID string
}

type serverFrame struct {
	Event   string `json:"event"`
	Channel string `json:"channel"`
	Data    string `json:"data"`
	UserID  string `json:"user_id"`
}

func (s *wsServer) dial(t *testing.T, key string) *client {
	t.Helper()
	c := s.dialRaw(t, "/app/"+key+"?protocol=7&client=test&version=1")
	f := c.next()
	if f.Event != "pusher:connection_established" {
		t.Fatalf("first frame %+v", f)
	}
	var d struct {
		SocketID        string `json:"socket_id"`
		ActivityTimeout int    `json:"activity_timeout"`
	}
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil || !validSocketID(d.SocketID) || d.ActivityTimeout <= 0 {
		t.Fatalf("connection_established data %q", f.Data)
	}
	c.socketID = d.SocketID
	return c
}

func (s *wsServer) dialRaw(t *testing.T, path string) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(1 << 20)
	c := &client{t: t, ws: ws}
	t.Cleanup(func() { ws.CloseNow() })
	return c
}

func validSocketID(s string) bool {
	a, b, ok := strings.Cut(s, ".")
	return ok && a != "" && b != "" && strings.Trim(a+b, "0123456789") == ""
}

// next reads the next frame, failing the test after wait.Limit.
func (c *client) next() serverFrame {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
	defer cancel()
	typ, b, err := c.ws.Read(ctx)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		c.t.Fatalf("binary frame from the server")
	}
	var f serverFrame
	if err := json.Unmarshal(b, &f); err != nil {
		c.t.Fatalf("frame %s: %v", b, err)
	}
	return f
}

// expect reads the next frame and checks its event (and channel, when given).
func (c *client) expect(event, channel string) serverFrame {
	c.t.Helper()
	return checkFrame(c.t, c.next(), event, channel)
}

// checkFrame fails the test unless f is event (on channel, when given).
func checkFrame(t *testing.T, f serverFrame, event, channel string) serverFrame {
	t.Helper()
	if f.Event != event || (channel != "" && f.Channel != channel) {
		t.Fatalf("got %+v, want event %s on %q", f, event, channel)
	}
	return f
}

// expectClosed reads until the connection closes and returns the close code.
func (c *client) expectClosed() websocket.StatusCode {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
	defer cancel()
	for {
		_, _, err := c.ws.Read(ctx)
		if err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

func (c *client) send(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(websocket.MessageText, b)
}

func (c *client) sendRaw(typ websocket.MessageType, b []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
	defer cancel()
	if err := c.ws.Write(ctx, typ, b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) subscribe(channel, auth, channelData string) {
	c.t.Helper()
	c.send(map[string]any{"event": "pusher:subscribe", "data": map[string]string{"channel": channel, "auth": auth, "channel_data": channelData}})
}

// ping checks that the connection still answers.
func (c *client) ping() {
	c.t.Helper()
	c.send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
	c.expect("pusher:pong", "")
}

func errorData(t *testing.T, f serverFrame) (code *int, message string) {
	t.Helper()
	var d struct {
		Code    *int   `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil || d.Message == "" {
		t.Fatalf("pusher:error data %q", f.Data)
	}
	return d.Code, d.Message
}

func TestConnectRefusals(t *testing.T) {
	s := newWSServer(t, Options{})
	tests := []struct {
		name string
		path string
		code int
	}{
		{"ErrUnknownApp", "/app/nobody?protocol=7", 4001},
		{"ErrAppDisabled", "/app/off?protocol=7", 4003},
		{"ErrProtocol5", "/app/key1?protocol=5", 4007},
		{"ErrNoProtocol", "/app/key1", 4007},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := s.dialRaw(t, tt.path)
			code, _ := errorData(t, c.expect("pusher:error", ""))
			if code == nil || *code != tt.code {
				t.Fatalf("pusher:error code %v, want %d", code, tt.code)
			}
			if got := c.expectClosed(); int(got) != tt.code {
				t.Fatalf("close code %d, want %d", got, tt.code)
			}
		})
	}
	t.Run("ErrOverQuota", func(t *testing.T) {
		first := s.dial(t, "one")
		c := s.dialRaw(t, "/app/one?protocol=7")
		if code, _ := errorData(t, c.expect("pusher:error", "")); code == nil || *code != 4004 {
			t.Fatalf("code %v, want 4004", code)
		}
		if got := c.expectClosed(); got != 4004 {
			t.Fatalf("close code %d, want 4004", got)
		}
		first.ping()
	})
}

func TestSubscribeKinds(t *testing.T) {
	s := newWSServer(t, Options{})
	c := s.dial(t, "key1")

	c.subscribe("news", "", "")
	c.expect("pusher_internal:subscription_succeeded", "news")

	c.subscribe("private-x", "key1:00", "")
	f := c.expect("pusher:subscription_error", "private-x")
	if !strings.Contains(f.Data, `"status":401`) || !strings.Contains(f.Data, `"type":"AuthError"`) {
		t.Fatalf("subscription_error data %s", f.Data)
	}
	c.subscribe("private-x", signing.ChannelAuth("key1", "secret1", c.socketID, "private-x", ""), "")
	c.expect("pusher_internal:subscription_succeeded", "private-x")

	c.subscribe("private-encrypted-x", signing.ChannelAuth("key1", "secret1", "1.1", "private-encrypted-x", ""), "")
	c.expect("pusher:subscription_error", "private-encrypted-x") // auth of another socket

	data := `{"user_id":7,"user_info":{"name":"Seven"}}`
	c.subscribe("presence-room", signing.ChannelAuth("key1", "secret1", c.socketID, "presence-room", data), data)
	f = c.expect("pusher_internal:subscription_succeeded", "presence-room")
	if f.Data != `{"presence":{"ids":["7"],"hash":{"7":{"name":"Seven"}},"count":1}}` {
		t.Fatalf("presence data %s", f.Data)
	}
	// channel_data that the auth does not cover
	c.subscribe("presence-room2", signing.ChannelAuth("key1", "secret1", c.socketID, "presence-room2", data), `{"user_id":8}`)
	c.expect("pusher:subscription_error", "presence-room2")
	big := `{"user_id":"u","user_info":"` + strings.Repeat("x", 1100) + `"}`
	c.subscribe("presence-room3", signing.ChannelAuth("key1", "secret1", c.socketID, "presence-room3", big), big)
	if f := c.expect("pusher:subscription_error", "presence-room3"); !strings.Contains(f.Data, "LimitReached") {
		t.Fatalf("oversized user_info: %s", f.Data)
	}

	c.subscribe("#server-to-user-7", "", "")
	c.expect("pusher:subscription_error", "#server-to-user-7")
	c.subscribe("bad name", "", "")
	c.expect("pusher:subscription_error", "bad name")

	c.subscribe("cache-a", "", "")
	c.expect("pusher_internal:subscription_succeeded", "cache-a")
	c.expect("pusher:cache_miss", "cache-a")

	s.hub.Publish(hub.Message{AppID: "1", Channel: "news", Event: "hello", Data: `{"a":1}`})
	if f := c.expect("hello", "news"); f.Data != `{"a":1}` {
		t.Fatalf("data %s", f.Data)
	}
	c.send(map[string]any{"event": "pusher:unsubscribe", "data": map[string]string{"channel": "news"}})
	c.ping() // the unsubscribe has been handled once the pong is back
	s.hub.Publish(hub.Message{AppID: "1", Channel: "news", Event: "hello", Data: "again"})
	c.ping()
}

func TestBadInputKeepsConnection(t *testing.T) {
	s := newWSServer(t, Options{MaxMessageBytes: 1024})
	c := s.dial(t, "key1")
	for _, tt := range []struct {
		name string
		typ  websocket.MessageType
		msg  string
	}{
		{"NotJSON", websocket.MessageText, "hello"},
		{"JSONArray", websocket.MessageText, "[1,2]"},
		{"NoEvent", websocket.MessageText, `{"data":{}}`},
		{"EventNotString", websocket.MessageText, `{"event":5}`},
		{"Binary", websocket.MessageBinary, `{"event":"pusher:ping"}`},
		{"Unknown", websocket.MessageText, `{"event":"pusher:nonsense","data":{}}`},
		{"SubscribeNoData", websocket.MessageText, `{"event":"pusher:subscribe"}`},
		{"SubscribeDataNumber", websocket.MessageText, `{"event":"pusher:subscribe","data":5}`},
		{"UnsubscribeNoChannel", websocket.MessageText, `{"event":"pusher:unsubscribe","data":{}}`},
		{"TooLarge", websocket.MessageText, `{"event":"pusher:ping","data":"` + strings.Repeat("x", 2000) + `"}`},
		{"ClientEventNotSubscribed", websocket.MessageText, `{"event":"client-x","channel":"private-nope","data":{}}`},
		{"ClientEventPublic", websocket.MessageText, `{"event":"client-x","channel":"news","data":{}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c.sendRaw(tt.typ, []byte(tt.msg))
			f := c.expect("pusher:error", "")
			if code, _ := errorData(t, f); code != nil {
				t.Fatalf("non-fatal error with code %d", *code)
			}
			c.ping()
		})
	}
	// Subscribe data given as a JSON string is accepted too.
	c.send(map[string]any{"event": "pusher:subscribe", "data": `{"channel":"news"}`})
	c.expect("pusher_internal:subscription_succeeded", "news")
}

func TestSubscribeFloodIsBounded(t *testing.T) {
	s := newWSServer(t, Options{MaxChannelsPerConn: 5})
	c := s.dial(t, "key1")
	for i := 0; i < 5; i++ {
		c.subscribe(fmt.Sprintf("c%d", i), "", "")
		c.expect("pusher_internal:subscription_succeeded", "")
	}
	c.subscribe("c5", "", "")
	if f := c.expect("pusher:subscription_error", "c5"); !strings.Contains(f.Data, "LimitReached") {
		t.Fatalf("got %s", f.Data)
	}
	c.subscribe("c0", "", "") // resubscribing an existing channel is still answered
	c.expect("pusher_internal:subscription_succeeded", "c0")
}

func TestClientEvents(t *testing.T) {
	s := newWSServer(t, Options{})
	a, b := s.dial(t, "key1"), s.dial(t, "key1")
	for _, c := range []*client{a, b} {
		c.subscribe("private-chat", signing.ChannelAuth("key1", "secret1", c.socketID, "private-chat", ""), "")
		c.expect("pusher_internal:subscription_succeeded", "private-chat")
	}
	a.send(map[string]any{"event": "client-typing", "channel": "private-chat", "data": map[string]any{"who": "a"}})
	if f := b.expect("client-typing", "private-chat"); f.Data != `{"who":"a"}` || f.UserID != "" {
		t.Fatalf("b got %+v", f)
	}
	a.ping() // not echoed: the next frame a sees is its pong

	// Presence client events carry the sender's user_id.
	for i, c := range []*client{a, b} {
		data := fmt.Sprintf(`{"user_id":"u%d"}`, i)
		c.subscribe("presence-chat", signing.ChannelAuth("key1", "secret1", c.socketID, "presence-chat", data), data)
		c.expect("pusher_internal:subscription_succeeded", "presence-chat")
	}
	a.expect("pusher_internal:member_added", "presence-chat")
	b.send(map[string]any{"event": "client-hi", "channel": "presence-chat", "data": "plain text"})
	if f := a.expect("client-hi", "presence-chat"); f.Data != "plain text" || f.UserID != "u1" {
		t.Fatalf("a got %+v", f)
	}

	// Rate limit: 10 per second, then 4301 without closing. A fresh pair, so
	// that the events above do not count.
	a, b = s.dial(t, "key1"), s.dial(t, "key1")
	for _, c := range []*client{a, b} {
		c.subscribe("private-chat", signing.ChannelAuth("key1", "secret1", c.socketID, "private-chat", ""), "")
		c.expect("pusher_internal:subscription_succeeded", "private-chat")
	}
	for i := 0; i < 10; i++ {
		a.send(map[string]any{"event": "client-n", "channel": "private-chat", "data": i})
	}
	a.send(map[string]any{"event": "client-n", "channel": "private-chat", "data": 10})
	if code, _ := errorData(t, a.expect("pusher:error", "")); code == nil || *code != 4301 {
		t.Fatalf("code %v, want 4301", code)
	}
	for i := 0; i < 10; i++ {
		if f := b.expect("client-n", "private-chat"); f.Data != fmt.Sprint(i) {
			t.Fatalf("b got %+v, want data %d", f, i)
		}
	}
	a.ping()

	t.Run("ErrDisabledForApp", func(t *testing.T) {
		c := s.dial(t, "noclient")
		c.subscribe("private-chat", signing.ChannelAuth("noclient", "secret4", c.socketID, "private-chat", ""), "")
		c.expect("pusher_internal:subscription_succeeded", "private-chat")
		c.send(map[string]any{"event": "client-x", "channel": "private-chat", "data": 1})
		c.expect("pusher:error", "")
	})
}

func TestServerPingsIdleClientAndClosesOnSilence(t *testing.T) {
	// The answering client has a whole second to answer each ping: enough
	// on a loaded machine, while the silent one is closed a second after.
	s := newWSServer(t, Options{ActivityTimeout: 200 * time.Millisecond, PongTimeout: time.Second})
	answering, silent := s.dial(t, "key1"), s.dial(t, "key1")

	// The answering client replies to each ping and stays.
	for i := 0; i < 3; i++ {
		answering.expect("pusher:ping", "")
		answering.send(map[string]any{"event": "pusher:pong", "data": map[string]any{}})
	}
	answering.ping()

	silent.expect("pusher:ping", "")
	if code, _ := errorData(t, silent.expect("pusher:error", "")); code == nil || *code != 4201 {
		t.Fatalf("code %v, want 4201", code)
	}
	if got := silent.expectClosed(); got != 4201 {
		t.Fatalf("close code %d, want 4201", got)
	}
}

func TestShutdownClosesWith4200(t *testing.T) {
	s := newWSServer(t, Options{})
	c := s.dial(t, "key1")
	ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.handler.Shutdown(ctx) }()
	if code, _ := errorData(t, c.expect("pusher:error", "")); code == nil || *code != 4200 {
		t.Fatalf("code %v, want 4200", code)
	}
	if got := c.expectClosed(); got != 4200 {
		t.Fatalf("close code %d, want 4200", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := s.handler.Sessions(); n != 0 {
		t.Fatalf("%d sessions after shutdown", n)
	}
}

// A client that never reads is cut with 4100 while 1,000 others receive every
// event, and the publisher is never held up by it.
//
// On a busy machine dialing the 1,000 readers alone can take minutes, so
// nothing here is timed from the start: the readers read until the test ends
// (not for a fixed time from their dial, which once cut the first ones
// dialled before a single event was sent), the server never pings them (an
// unanswered ping would close them with 4201 after a long run), the write
// watchdog never fires (with the publisher paced on 1,000 slow readers, the
// slow client's writer could be stuck past WriteTimeout, and closed for
// that, before its queue overflowed), and the publisher gives up only when
// no reader has moved for wait.Limit.
func TestSlowConsumerIsCutOthersReceiveEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1,001 connections")
	}
	const (
		readers = 1000
		events  = 200
	)
	s := newWSServerSendBuffer(t, Options{MaxQueueBytes: 16 * 1024, ActivityTimeout: time.Hour, WriteTimeout: time.Hour}, 8*1024)

	// The slow client's socket has a tiny receive buffer so that it backs up
	// quickly, and it never reads.
	// SO_RCVBUF is set before connecting so the advertised window is small
	// from the handshake on.
	dialer := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
		})
		return errors.Join(err, serr)
	}}
	slowHTTP := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
	slow, _, err := websocket.Dial(ctx, s.url+"/app/key1?protocol=7", &websocket.DialOptions{HTTPClient: slowHTTP})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer slow.CloseNow()
	slowClient := &client{t: t, ws: slow}
	slowClient.expect("pusher:connection_established", "")
	slowClient.subscribe("firehose", "", "")
	slowClient.expect("pusher_internal:subscription_succeeded", "firehose")

	var wg sync.WaitGroup
	counts := make([]atomic.Int64, readers)
	errs := make(chan error, readers)
	// Cancelled when the test returns, so that a reader left waiting after
	// a failure ends then.
	readCtx, stopReading := context.WithCancel(context.Background())
	defer stopReading()
	for i := 0; i < readers; i++ {
		c := s.dial(t, "key1")
		c.subscribe("firehose", "", "")
		c.expect("pusher_internal:subscription_succeeded", "firehose")
		wg.Add(1)
		go func(i int, ws *websocket.Conn) {
			defer wg.Done()
			for counts[i].Load() < events {
				typ, b, err := ws.Read(readCtx)
				if err != nil {
					errs <- fmt.Errorf("reader %d after %d events: %w", i, counts[i].Load(), err)
					return
				}
				var f serverFrame
				if typ != websocket.MessageText || json.Unmarshal(b, &f) != nil || f.Event != "tick" {
					errs <- fmt.Errorf("reader %d after %d events: unexpected frame %q", i, counts[i].Load(), b)
					return
				}
				counts[i].Add(1)
			}
		}(i, c.ws)
	}
	// The publisher paces itself on the readers (at most `window` events
	// ahead of the slowest one, a few KiB, well inside their queues), so only
	// the client that never reads can fall behind, however loaded the machine.
	const window = 8
	slowest := func() int64 {
		low := int64(events)
		for i := range counts {
			low = min(low, counts[i].Load())
		}
		return low
	}
	failed := func(at string) {
		t.Helper()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		t.Fatalf("readers stalled at %d of %d events %s", slowest(), events, at)
	}
	data := strings.Repeat("x", 512)
	for i := 0; i < events; i++ {
		// A stall is no reader moving for wait.Limit, however long the
		// whole run takes.
		low, moved := slowest(), time.Now()
		for int64(i)-low > window {
			if len(errs) > 0 || time.Since(moved) > wait.Limit {
				stopReading()
				wg.Wait()
				failed(fmt.Sprintf("(publishing event %d)", i))
			}
			time.Sleep(time.Millisecond)
			if now := slowest(); now != low {
				low, moved = now, time.Now()
			}
		}
		s.hub.Publish(hub.Message{AppID: "1", Channel: "firehose", Event: "tick", Data: data})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	wait.Until(t, "every reader to receive every event", func() bool {
		select {
		case <-done:
			return true
		default:
			return len(errs) > 0
		}
	})
	stopReading()
	wg.Wait()
	if len(errs) > 0 {
		failed("(after publishing)")
	}
	wait.Until(t, "the slow consumer to be closed", func() bool { return s.handler.SlowConsumersClosed() == 1 })
}

// A burst queues frames faster than the writer sends them, so the writer
// corks the socket and several frames leave in one write; meanwhile the
// library answers the client's pings from the reader. Every event must still
// arrive whole and in order, and every ping be answered.
func TestBurstArrivesInOrderWithPongsBetween(t *testing.T) {
	s := newWSServer(t, Options{})
	c := s.dial(t, "key1")
	c.subscribe("burst", "", "")
	c.expect("pusher_internal:subscription_succeeded", "burst")

	const events = 2000
	pings := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for range 50 {
			if err := c.ws.Ping(ctx); err != nil {
				pings <- err
				return
			}
		}
		pings <- nil
	}()
	data := func(i int) string {
		if i%97 == 0 { // now and then more than a pooled chunk
			return fmt.Sprintf("%d:%s", i, strings.Repeat("y", 2*socket.ChunkSize))
		}
		return fmt.Sprintf("%d:%s", i, strings.Repeat("x", i%200))
	}
	go func() {
		for i := range events {
			s.hub.Publish(hub.Message{AppID: "1", Channel: "burst", Event: "tick", Data: data(i)})
		}
	}()
	for i := range events {
		f := c.expect("tick", "burst")
		if f.Data != data(i) {
			t.Fatalf("event %d: got data %.20q…, want %.20q…", i, f.Data, data(i))
		}
	}
	// The pings need a reader: keep reading (nothing more is sent) until
	// they are all answered.
	readCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _, _ = c.ws.Read(readCtx) }()
	if err := <-pings; err != nil {
		t.Fatalf("ping during the burst: %v", err)
	}
}

func TestConnectionsAndGoroutinesReturnToBaseline(t *testing.T) {
	s := newWSServer(t, Options{})
	warm := s.dial(t, "key1") // the server's own goroutines exist from here on
	warm.ping()
	base := runtime.NumGoroutine()
	var clients []*client
	for i := 0; i < 50; i++ {
		c := s.dial(t, "key1")
		data := fmt.Sprintf(`{"user_id":"u%d"}`, i)
		c.subscribe("presence-x", signing.ChannelAuth("key1", "secret1", c.socketID, "presence-x", data), data)
		c.expect("pusher_internal:subscription_succeeded", "presence-x")
		clients = append(clients, c)
	}
	if n := s.hub.Connections("1"); n != 51 {
		t.Fatalf("%d connections, want 51", n)
	}
	for _, c := range clients {
		c.ws.Close(websocket.StatusNormalClosure, "bye")
	}
	// Pooled goroutines wait goroutineLinger for more work before they end.
	wait.NoError(t, func() error {
		if n := s.hub.Connections("1"); n != 1 {
			return fmt.Errorf("%d connections left", n)
		}
		if n := len(s.hub.Channels("1", "")); n != 0 {
			return fmt.Errorf("%d channels left", n)
		}
		if n := runtime.NumGoroutine(); n > base {
			return fmt.Errorf("%d goroutines, baseline %d", n, base)
		}
		return nil
	})
}

// FuzzClientMessage feeds arbitrary client messages to a session: whatever
// arrives, the session answers without panicking and the registry stays
// consistent.
func FuzzClientMessage(f *testing.F) {
	for _, seed := range []string{
		`{"event":"pusher:subscribe","data":{"channel":"presence-x","auth":"key1:00","channel_data":"{\"user_id\":1}"}}`,
		`{"event":"pusher:subscribe","data":"{\"channel\":\"news\"}"}`,
		`{"event":"pusher:unsubscribe","data":{"channel":"news"}}`,
		`{"event":"client-x","channel":"private-a","data":{"k":[1,2]}}`,
		`{"event":"pusher:ping"}`,
		`{"event":"","data":null}`,
		`not json`,
		`{"event":"pusher:subscribe","data":{"channel":"#server-to-user-1"}}`,
	} {
		f.Add([]byte(seed))
	}
	log := zap.NewNop()
	h := hub.New(log)
	handler := NewHandler(h, wsApps, log, Options{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		conn, err := h.Connect("1", hub.ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sess := &session{peer: peer{s: handler, conn: conn, appID: "1"}}
		sess.handle(msg)
		sess.handle(msg)
		frames, reason := conn.Take(nil)
		if reason != nil && reason.Code != hub.CloseAppDisabled.Code {
			t.Fatalf("connection closed by a message: %v", reason)
		}
		for _, fr := range frames {
			if !json.Valid(fr) {
				t.Fatalf("invalid frame %s", fr)
			}
		}
		h.Remove(conn)
		if n := h.Connections("1"); n != 0 {
			t.Fatalf("%d connections left", n)
		}
		if n := h.Subscriptions("1"); n != 0 {
			t.Fatalf("%d subscriptions counted with no connection", n)
		}
	})
}

// testHooks is a ws.Webhooks: endpoints for the kinds listed, comma-separated
// (none: every kind), on the channels starting with prefix.
type testHooks struct{ kinds, prefix string }

func (h testHooks) Sends(kind hub.EventKind, channel string) bool {
	if !strings.HasPrefix(channel, h.prefix) {
		return false
	}
	return h.kinds == "" || slices.Contains(strings.Split(h.kinds, ","), string(kind))
}

// A zero Options takes the documented defaults.
func TestDefaults(t *testing.T) {
	o := Options{}.WithDefaults()
	if o.ActivityTimeout != 120*time.Second || o.PongTimeout != 30*time.Second || o.WriteTimeout != 10*time.Second ||
		o.MaxQueueBytes != hub.DefaultMaxQueueBytes || o.MaxMessageBytes != 16*1024 || o.MaxChannelsPerConn != 1000 ||
		o.SubscribeRate != 10 || o.SubscribeBurst != 100 || o.MaxSubscriptionsPerApp != 0 || o.ConnectRateLimit != 0 {
		t.Fatalf("defaults %+v", o)
	}
}
