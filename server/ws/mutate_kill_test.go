package ws

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/signing"
	"github.com/heraldrt/herald/server/ws/socket"
)

// More tests that kill mutants gremlins found alive (make mutate), after
// mutate_test.go; the equivalent ones are listed in
// scripts/mutate-equivalent.md.
//
// The tests of timers (the idle ping, the user-authentication timeout, the
// client event rate, the overflow grace, the write watchdog) run in fake time
// (testing/synctest), where instants are exact and nothing sleeps: their
// sessions are the transport's own (a real WebSocket connection of the
// library, over socket.Conn, as upgrade makes them) on an in-memory socket.

// A request to the endpoint that is not a WebSocket upgrade is answered by
// the library (426), and the handler returns normally.
func TestPlainHTTPRequestIsAnswered(t *testing.T) {
	s := newWSServer(t, Options{})
	resp, err := http.Get("http" + strings.TrimPrefix(s.url, "ws") + "/app/key1?protocol=7")
	if err != nil {
		t.Fatalf("plain GET: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("plain GET: status %d, want 426", resp.StatusCode)
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

// packetClient is a raw WebSocket client that writes frames exactly as
// given, so that several messages reach the server in one packet.
type packetClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialPackets(t *testing.T, s *wsServer) *packetClient {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "ws://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := "GET /app/key1?protocol=7 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	pc := &packetClient{t: t, c: c, br: bufio.NewReader(c)}
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	if f := pc.next(); f.Event != "pusher:connection_established" {
		t.Fatalf("first frame %+v", f)
	}
	return pc
}

// maskedText is a client text frame of payload, masked with a zero key (so
// the payload goes as is).
func maskedText(payload string) []byte {
	if len(payload) > 125 {
		panic("maskedText: payload too long")
	}
	return append([]byte{0x81, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...)
}

// next reads the next server frame (unmasked text, at most 64 KiB).
func (pc *packetClient) next() serverFrame {
	pc.t.Helper()
	_ = pc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(pc.br, hdr[:2]); err != nil {
		pc.t.Fatalf("read: %v", err)
	}
	n := int(hdr[1] & 0x7f)
	if n == 126 {
		if _, err := io.ReadFull(pc.br, hdr[2:4]); err != nil {
			pc.t.Fatalf("read: %v", err)
		}
		n = int(binary.BigEndian.Uint16(hdr[2:4]))
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(pc.br, payload); err != nil {
		pc.t.Fatalf("read: %v", err)
	}
	var f serverFrame
	if err := json.Unmarshal(payload, &f); err != nil {
		pc.t.Fatalf("frame %s: %v", payload, err)
	}
	return f
}

// Two messages that arrive in one packet are both handled, including when
// the second one is small enough to have been read whole into the
// library's buffer while the first was read: input buffered there counts
// as pending, and the connection is not parked on it.
func TestTwoMessagesInOnePacketAreBothAnswered(t *testing.T) {
	s := newWSServer(t, Options{})
	pc := dialPackets(t, s)
	// 7 + 9 bytes: the library's first 16-byte read takes both.
	if _, err := pc.c.Write(append(maskedText("x"), maskedText("[1]")...)); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if f := pc.next(); f.Event != "pusher:error" || !strings.Contains(f.Data, "Invalid message") {
			t.Fatalf("answer %d: %+v, want pusher:error", i+1, f)
		}
	}
}

// An idle connection holds no goroutine: it is parked with the poller,
// before and after its first message.
func TestIdleConnectionsHoldNoGoroutine(t *testing.T) {
	s := newWSServer(t, Options{})
	warm := s.dial(t, "key1")
	warm.ping()
	base := runtime.NumGoroutine()
	const conns = 100
	for range conns {
		c := s.dial(t, "key1")
		c.ping()
	}
	// The client side holds none either; the pool's goroutines that served
	// the upgrades wait for more work for a second, a handful at most.
	if n := runtime.NumGoroutine() - base; n >= conns/2 {
		t.Fatalf("%d idle connections: %d more goroutines, want fewer than %d", conns, n, conns/2)
	}
}

// memConn is an in-memory socket: what the server writes is recorded, and
// while stalled (a client that stopped reading) writes block until it is
// closed. Reads wait for the close.
type memConn struct {
	mu      sync.Mutex
	writes  [][]byte
	stalled bool
	closed  chan struct{}
	once    sync.Once
}

func newMemConn(stalled bool) *memConn {
	return &memConn{stalled: stalled, closed: make(chan struct{})}
}

func (c *memConn) Read([]byte) (int, error) {
	<-c.closed
	return 0, io.EOF
}

func (c *memConn) Write(p []byte) (int, error) {
	if c.stalled {
		<-c.closed
	}
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

func (c *memConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *memConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

func (c *memConn) written() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// memResponse is the http.ResponseWriter of an upgrade over a memConn.
type memResponse struct {
	header http.Header
	conn   *memConn
}

func (w *memResponse) Header() http.Header         { return w.header }
func (w *memResponse) Write(p []byte) (int, error) { return len(p), nil }
func (w *memResponse) WriteHeader(int)             {}
func (w *memResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.conn, bufio.NewReadWriter(bufio.NewReader(w.conn), bufio.NewWriter(w.conn)), nil
}

// memHandler is a Handler without the poller and without its write
// watchdog running (a test starts watchWrites itself), so that it can live
// in a synctest bubble.
func memHandler(h *hub.Hub, opts Options) *Handler {
	return &Handler{hub: h, apps: wsApps, log: zap.NewNop(), opts: opts.withDefaults(),
		sessions: make(map[*session]struct{}), stopWatch: make(chan struct{}), pool: socket.NewPool(16, memLinger)}
}

// memLinger is how long memHandler's pooled goroutines wait for more work. A
// bubble ends only once they have gone: letPoolGo waits for that.
const memLinger = time.Second

func letPoolGo() { time.Sleep(2 * memLinger) }

// memSession is a session of app 1 over mc set up as upgrade does (the
// hijacker, the library's Accept), registered with the hub; its writer is
// w, or the session itself when w is nil.
func memSession(t *testing.T, s *Handler, mc *memConn, w hub.Writer) *session {
	t.Helper()
	hj := &hijacker{ResponseWriter: &memResponse{header: http.Header{}, conn: mc}}
	r := httptest.NewRequest(http.MethodGet, "/app/key1?protocol=7", nil)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	ws, err := websocket.Accept(hj, r, &websocket.AcceptOptions{InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		t.Fatal(err)
	}
	sess := &session{peer: peer{s: s, appID: "1"}, ws: ws, sock: hj.sock, br: hj.br}
	sess.writeLoopFn = sess.writeLoop
	if w == nil {
		w = sess
	}
	conn, err := s.hub.Connect("1", hub.ConnectOptions{MaxQueueBytes: s.opts.MaxQueueBytes, Writer: w})
	if err != nil {
		t.Fatal(err)
	}
	sess.conn = conn
	return sess
}

// takeSession is a session whose frames the test takes itself (hub.Conn's
// Take), for the protocol's answers.
func takeSession(t *testing.T, s *Handler, appID string) *session {
	t.Helper()
	conn, err := s.hub.Connect(appID, hub.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &session{peer: peer{s: s, conn: conn, appID: appID}}
}

// takeEvents takes the frames queued to sess and returns their events (a
// pusher:error as "pusher:error:<code>") and the close reason, if any.
func takeEvents(t *testing.T, sess *session) (events []string, reason *hub.CloseReason) {
	t.Helper()
	frames, reason := sess.conn.Take(nil)
	for _, f := range frames {
		var fr serverFrame
		if err := json.Unmarshal(f, &fr); err != nil {
			t.Fatalf("frame %s: %v", f, err)
		}
		if fr.Event == "pusher:error" {
			code, _ := errorData(t, fr)
			fr.Event += ":" + codeString(code)
		}
		events = append(events, fr.Event)
	}
	return events, reason
}

// nopWriter is a hub.Writer that is never woken: the test runs the writer.
type nopWriter struct{}

func (nopWriter) Wake()     {}
func (nopWriter) Overflow() {}

// Frames queued together leave the writer corked: in one socket write.
func TestFramesQueuedTogetherLeaveInOneWrite(t *testing.T) {
	h := hub.New(zap.NewNop())
	defer h.Close()
	s := memHandler(h, Options{})
	mc := newMemConn(false)
	sess := memSession(t, s, mc, nopWriter{})
	defer sess.ws.CloseNow()
	var want []byte
	for i := range 3 {
		f := hub.EventFrame("tick", "burst", fmt.Sprint(i), "")
		sess.conn.Send(f)
		want = append(want, 0x81, byte(len(f)))
		want = append(want, f...)
	}
	sess.writeLoop() // the writer the first Send claimed
	if w := mc.written(); len(w) != 1 || !bytes.Equal(w[0], want) {
		t.Fatalf("3 frames queued together went out in %d socket writes, want 1 with all three", len(w))
	}
}

// A connection that signs in within the app's user-authentication timeout
// stays open past it; one that does not is closed with 4009.
func TestSignedInConnectionOutlivesTheUserAuthTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hub.New(zap.NewNop())
		defer h.Close()
		s := memHandler(h, Options{})
		app, _ := wsApps.ByID("8") // UserAuthTimeout 200 ms
		signedIn, idle := takeSession(t, s, "8"), takeSession(t, s, "8")
		for _, sess := range []*session{signedIn, idle} {
			sess.start(app)
			defer sess.idle.Stop()
		}
		userData := `{"id":"alice"}`
		msg, _ := json.Marshal(map[string]any{"event": "pusher:signin", "data": map[string]string{
			"auth": signing.UserAuth("strict", "s8", signedIn.conn.SocketID(), userData), "user_data": userData}})
		signedIn.handle(msg)
		time.Sleep(time.Second)
		if events, reason := takeEvents(t, signedIn); reason != nil || strings.Join(events, " ") != "pusher:connection_established pusher:signin_success" {
			t.Fatalf("signed in: %v, closed with %v", events, reason)
		}
		if _, reason := takeEvents(t, idle); reason == nil || reason.Code != 4009 {
			t.Fatalf("not signed in: closed with %v, want 4009", reason)
		}
	})
}

// The client event rate is 10 in each window of a second: an event exactly
// a second after the window opened starts a new one; until then the 11th
// and later are refused with 4301.
func TestClientEventRateWindowIsOneSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hub.New(zap.NewNop())
		defer h.Close()
		s := memHandler(h, Options{})
		sess := takeSession(t, s, "1")
		const ch = "private-rate"
		sub, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{
			"channel": ch, "auth": signing.ChannelAuth("key1", "secret1", sess.conn.SocketID(), ch, "")}})
		sess.handle(sub)
		event := []byte(`{"event":"client-n","channel":"` + ch + `","data":{}}`)
		send := func() (relayed bool) {
			t.Helper()
			before := s.Counters().ClientEvents
			sess.handle(event)
			relayed = s.Counters().ClientEvents == before+1
			events, _ := takeEvents(t, sess)
			if refused := strings.Contains(strings.Join(events, " "), "pusher:error:4301"); refused == relayed {
				t.Fatalf("relayed %v, answers %v", relayed, events)
			}
			return relayed
		}
		for i := range ClientEventsPerSecond {
			if !send() {
				t.Fatalf("event %d of the first second refused", i+1)
			}
		}
		if send() {
			t.Fatal("11th event of the first second relayed")
		}
		time.Sleep(time.Second - time.Nanosecond)
		if send() {
			t.Fatal("an event 1 ns before the window's second is over relayed")
		}
		time.Sleep(time.Nanosecond)
		if !send() {
			t.Fatal("an event a second after the window opened refused")
		}
	})
}

// A client active after connecting is pinged ActivityTimeout after its last
// activity, not later.
func TestIdlePingComesActivityTimeoutAfterTheLastActivity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hub.New(zap.NewNop())
		defer h.Close()
		s := memHandler(h, Options{ActivityTimeout: 10 * time.Second, PongTimeout: 10 * time.Second})
		app, _ := wsApps.ByID("1")
		sess := takeSession(t, s, "1")
		sess.start(app)
		defer sess.idle.Stop()
		time.Sleep(4 * time.Second)
		sess.touch() // a message from the client (readMessages)
		time.Sleep(9 * time.Second)
		if events, _ := takeEvents(t, sess); strings.Join(events, " ") != "pusher:connection_established" {
			t.Fatalf("9 s after the client's last message: %v, want no ping yet", events)
		}
		time.Sleep(1500 * time.Millisecond)
		if events, _ := takeEvents(t, sess); strings.Join(events, " ") != "pusher:ping" {
			t.Fatalf("10.5 s after the client's last message: %v, want the ping", events)
		}
	})
}

// When a connection's queue overflows while its writer is stuck on a
// socket the client stopped reading, the socket is dropped after the
// overflow grace, without waiting for the write timeout.
func TestOverflowDropsAStuckWriterAfterTheGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hub.New(zap.NewNop())
		defer h.Close()
		s := memHandler(h, Options{MaxQueueBytes: 4096, WriteTimeout: time.Hour})
		mc := newMemConn(true)
		sess := memSession(t, s, mc, nil)
		frame := hub.EventFrame("tick", "c", strings.Repeat("x", 1000), "")
		sess.conn.Send(frame)
		synctest.Wait() // the writer is stuck in the socket write
		for sess.conn.Send(frame) {
		}
		if n := s.SlowConsumersClosed(); n != 1 {
			t.Fatalf("%d slow consumers, want 1", n)
		}
		time.Sleep(overflowGrace - time.Nanosecond)
		if mc.isClosed() {
			t.Fatal("socket dropped before the overflow grace")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if !mc.isClosed() {
			t.Fatal("the stuck socket was not dropped after the overflow grace")
		}
		letPoolGo()
	})
}

// The write watchdog closes a socket whose write has taken longer than
// WriteTimeout (at its next tick), and no other: not one whose write
// started exactly WriteTimeout before the tick, nor an idle one.
func TestWatchdogClosesOnlyWritesOverTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hub.New(zap.NewNop())
		defer h.Close()
		s := memHandler(h, Options{WriteTimeout: 10 * time.Second})
		go s.watchWrites() // ticks every second from now on
		defer close(s.stopWatch)
		stuckConn, idleConn := newMemConn(true), newMemConn(false)
		stuck, idle := memSession(t, s, stuckConn, nil), memSession(t, s, idleConn, nil)
		for _, sess := range []*session{stuck, idle} {
			if !s.add(sess) {
				t.Fatal("handler closing")
			}
		}
		stuck.conn.Send(hub.EventFrame("tick", "c", "x", "")) // its write starts now, and never ends
		synctest.Wait()
		time.Sleep(10*time.Second + 500*time.Millisecond) // the tick at 10 s has seen a write of exactly 10 s
		synctest.Wait()
		if stuckConn.isClosed() {
			t.Fatal("a write of at most WriteTimeout was cut")
		}
		time.Sleep(time.Second) // the tick at 11 s
		synctest.Wait()
		if !stuckConn.isClosed() {
			t.Fatal("a write stuck for longer than WriteTimeout was not cut")
		}
		if idleConn.isClosed() {
			t.Fatal("an idle connection was closed by the write watchdog")
		}
		_ = idle.ws.CloseNow()
		letPoolGo()
	})
}
