package ws

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/signing"
)

// A stream starts with the 2,048-byte prelude and the open frame, carries
// the frames as a[...] lines of JSON strings and heartbeats between them;
// xhr_send takes a JSON array of messages and answers 204.
func TestXHRStreamingFraming(t *testing.T) {
	s := newWSServer(t, Options{HeartbeatInterval: 20e6})
	c := s.xhrSession(t, "key1")
	c.receive(transportStreaming, "protocol=7&client=js&version=8.6.0")
	if l := c.line(); l != strings.Repeat("h", 2048) {
		t.Fatalf("first line %.40q (%d bytes), want the 2,048-byte prelude", l, len(l))
	}
	if l := c.line(); l != "o" {
		t.Fatalf("second line %q, want the open frame", l)
	}
	c.established()
	c.subscribe("news", "", "")
	c.expect("pusher_internal:subscription_succeeded", "news")
	data := "quote \" backslash \\ newline \n é \u2028"
	if err := s.hub.Publish(hub.Message{AppID: "1", Channel: "news", Event: "update", Data: data}); err != nil {
		t.Fatal(err)
	}
	if f := c.expect("update", "news"); f.Data != data {
		t.Fatalf("data %q, want %q", f.Data, data)
	}
	if status := c.send(); status != http.StatusNoContent { // pusher-js's heartbeat
		t.Fatalf("xhr_send []: status %d", status)
	}
	for l := c.line(); l != "h"; l = c.line() {
		if !strings.HasPrefix(l, "a") {
			t.Fatalf("line %q, want a heartbeat", l)
		}
	}
	c.send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
	c.expect("pusher:pong", "")
}

// Polls: the first answers the open frame, each later one what waits, or
// waits for it; the session's frames are those of a WebSocket.
func TestXHRPolling(t *testing.T) {
	s := newWSServer(t, Options{})
	c := s.xhrOpen(t, "key1", transportPolling)
	if l := c.line(); l != "o" {
		t.Fatalf("first line %q, want the open frame", l)
	}
	c.established()
	ch := "private-polled"
	c.subscribe(ch, signing.ChannelAuth("key1", "secret1", c.socketID, ch, ""), "")
	c.expect("pusher_internal:subscription_succeeded", ch)
	other := s.dial(t, "key1")
	other.subscribe(ch, signing.ChannelAuth("key1", "secret1", other.socketID, ch, ""), "")
	other.expect("pusher_internal:subscription_succeeded", ch)
	for i := range 3 {
		other.send(map[string]any{"event": "client-typing", "channel": ch, "data": map[string]int{"n": i}})
		if f := c.expect("client-typing", ch); f.Data != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("client event %d data %q", i, f.Data)
		}
	}
	c.send(map[string]any{"event": "client-back", "channel": ch, "data": "hi"})
	other.expect("client-back", ch)
}

// Every close code the WebSocket path sends at connect time is sent as the
// close frame after the open frame and a pusher:error of the same code.
func TestXHRConnectRefusals(t *testing.T) {
	s := newWSServer(t, Options{})
	tests := []struct {
		name, key, query string
		code             int
	}{
		{"ErrUnknownApp", "nobody", "protocol=7", 4001},
		{"ErrAppDisabled", "off", "protocol=7", 4003},
		{"ErrProtocol5", "key1", "protocol=5", 4007},
	}
	for _, tt := range tests {
		for _, transport := range []string{transportStreaming, transportPolling} {
			t.Run(tt.name+"/"+transport, func(t *testing.T) {
				c := s.xhrSession(t, tt.key)
				c.receive(transport, tt.query)
				if code, errCode := c.expectClose(); code != tt.code || errCode != tt.code {
					t.Fatalf("closed with %d after pusher:error %d, want %d", code, errCode, tt.code)
				}
			})
		}
	}
	t.Run("ErrOverQuota", func(t *testing.T) {
		first := s.xhrOpen(t, "one", transportStreaming)
		first.established()
		c := s.xhrOpen(t, "one", transportPolling)
		if code, errCode := c.expectClose(); code != 4004 || errCode != 4004 {
			t.Fatalf("closed with %d after pusher:error %d, want 4004", code, errCode)
		}
		ws := s.dialRaw(t, "/app/one?protocol=7") // the WebSocket side counts it too
		if code, _ := errorData(t, ws.expect("pusher:error", "")); code == nil || *code != 4004 {
			t.Fatalf("WebSocket beside a session: code %v, want 4004", code)
		}
	})
}

// terminate_connections and a bad sign-in close the session with 4009, a
// pong timeout with 4201 (shutdown's 4200: TestXHRShutdown); a client that
// is not receiving when its session closes gets the close frame with its
// next receiving request.
func TestXHRCloseCodes(t *testing.T) {
	s := newWSServer(t, Options{})
	signedIn := s.xhrOpen(t, "key1", transportStreaming)
	signedIn.established()
	userData := `{"id":"carol"}`
	signedIn.send(map[string]any{"event": "pusher:signin", "data": map[string]string{
		"auth": signing.UserAuth("key1", "secret1", signedIn.socketID, userData), "user_data": userData}})
	signedIn.expect("pusher:signin_success", "")
	if n := s.hub.TerminateUser("1", "carol"); n != 1 {
		t.Fatalf("terminated %d connections, want 1", n)
	}
	if code, errCode := signedIn.expectClose(); code != 4009 || errCode != 4009 {
		t.Fatalf("terminated: closed with %d after pusher:error %d, want 4009", code, errCode)
	}

	// Between two receiving requests (a stream: no poll in flight arrives
	// late and takes the close frame first).
	away := s.xhrOpen(t, "key1", transportStreaming)
	away.established()
	userData = `{"id":"dave"}`
	away.send(map[string]any{"event": "pusher:signin", "data": map[string]string{
		"auth": signing.UserAuth("key1", "secret1", away.socketID, userData), "user_data": userData}})
	away.expect("pusher:signin_success", "")
	away.stopReceiving()
	x := s.handler.xhrSession(away.id())
	wait.Until(t, "the stream has detached", func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		return x.recv == nil
	})
	if n := s.hub.TerminateUser("1", "dave"); n != 1 {
		t.Fatalf("terminated %d connections, want 1", n)
	}
	away.receive(transportPolling, "protocol=7")
	if code, errCode := away.expectClose(); code != 4009 || errCode != 4009 {
		t.Fatalf("terminated while away: closed with %d after pusher:error %d, want 4009", code, errCode)
	}

	badSignIn := s.xhrOpen(t, "key1", transportPolling)
	badSignIn.established()
	badSignIn.send(map[string]any{"event": "pusher:signin", "data": map[string]string{"auth": "key1:00", "user_data": userData}})
	if code, _ := badSignIn.expectClose(); code != 4009 {
		t.Fatalf("bad sign-in: closed with %d, want 4009", code)
	}

	// Nobody answers the ping: 4201.
	quick := newWSServer(t, Options{ActivityTimeout: 50e6, PongTimeout: 50e6})
	silent := quick.xhrOpen(t, "key1", transportPolling)
	silent.established()
	if code, _ := silent.expectClose(); code != 4201 {
		t.Fatalf("no pong: closed with %d, want 4201", code)
	}
	for _, srv := range []*wsServer{s, quick} {
		wait.NoError(t, func() error {
			if n := srv.hub.Connections("1"); n != 0 {
				return fmt.Errorf("%d connections left", n)
			}
			return nil
		})
	}
}

// Shutdown closes streaming and polling sessions with 4200, and refuses new
// ones.
func TestXHRShutdown(t *testing.T) {
	s := newWSServer(t, Options{})
	streamed := s.xhrOpen(t, "key1", transportStreaming)
	streamed.established()
	polled := s.xhrOpen(t, "key1", transportPolling)
	polled.established()
	if err := s.handler.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*xhrClient{streamed, polled} {
		if code, errCode := c.expectClose(); code != 4200 || errCode != 4200 {
			t.Fatalf("closed with %d after pusher:error %d, want 4200", code, errCode)
		}
	}
	if n := s.handler.HTTPSessions(); n != 0 {
		t.Fatalf("%d sessions after shutdown", n)
	}
	late := s.xhrOpen(t, "key1", transportPolling)
	if code, _ := late.expectClose(); code != 4200 {
		t.Fatalf("a session opened after shutdown: closed with %d, want 4200", code)
	}
}

// A second receiving request on a session while one is attached gets
// SockJS's 2010 close frame, and the first one goes on.
func TestXHRSecondReceiverRefused(t *testing.T) {
	s := newWSServer(t, Options{})
	c := s.xhrOpen(t, "key1", transportStreaming)
	c.established()
	second := &xhrClient{t: t, base: c.base, lines: make(chan string, 16)}
	second.receive(transportPolling, "protocol=7")
	if code, _ := second.expectClose(); code != 2010 {
		t.Fatalf("second receiver: closed with %d, want 2010", code)
	}
	c.send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
	c.expect("pusher:pong", "")
}

// A receiving request that arrives while the one before it is still
// attached (pusher-js reopening its stream before the server has seen the
// old request go) waits for it to detach, and then takes the session's
// frames. In fake time: the second request is still waiting halfway through
// takeoverWait when the first is cancelled.
func TestXHRTakeoverWaitsForTheAttachedReceiver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hub.New(zap.NewNop())
		defer h.Close()
		s := memHandler(h, Options{})
		s.xhr = make(map[string]*xhrSession)
		r := httptest.NewRequest(http.MethodPost, "/pusher/app/key1/1/takeover/xhr_streaming?protocol=7", nil)
		x, opened, refusal := s.openXHR(httptest.NewRecorder(), r, "192.0.2.1", "key1", "key1/1/takeover")
		if !opened || refusal != nil {
			t.Fatalf("openXHR: opened %v, refusal %v", opened, refusal)
		}
		defer x.finish()
		first, err := x.attach(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		type attached struct {
			recv *xhrReceiver
			err  error
		}
		second := make(chan attached, 1)
		go func() {
			recv, err := x.attach(context.Background())
			second <- attached{recv, err}
		}()
		time.Sleep(takeoverWait / 2)
		synctest.Wait()
		select {
		case a := <-second:
			t.Fatalf("the second receiver did not wait for the first: %v", a.err)
		default:
		}
		x.detach(first) // the first request is cancelled
		a := <-second
		if a.err != nil {
			t.Fatalf("second receiver: %v, want it attached", a.err)
		}
		defer x.detach(a.recv)
		out, reason := x.take(nil)
		if reason != nil || !strings.HasPrefix(string(out), "a[") {
			t.Fatalf("second receiver took %q (closing: %v), want the frames queued", out, reason)
		}
		if f := decodeMessages(t, strings.TrimSuffix(string(out), "\n")); len(f) != 1 || f[0].Event != "pusher:connection_established" {
			t.Fatalf("frames %+v, want pusher:connection_established", f)
		}
	})
}

// A stream ends after StreamLimitBytes; the next one on the session goes on
// where it stopped, without an open frame.
func TestXHRStreamLimit(t *testing.T) {
	s := newWSServer(t, Options{StreamLimitBytes: 4096})
	c := s.xhrOpen(t, "key1", transportStreaming)
	c.established()
	c.subscribe("news", "", "")
	c.expect("pusher_internal:subscription_succeeded", "news")
	publish := func(event string) {
		t.Helper()
		if err := s.hub.Publish(hub.Message{AppID: "1", Channel: "news", Event: event, Data: strings.Repeat("x", 3000)}); err != nil {
			t.Fatal(err)
		}
	}
	publish("e0")
	c.expect("e0", "news")
	if l := c.line(); l != "end" {
		t.Fatalf("line %.40q after the limit, want the end of the stream", l)
	}
	publish("e1") // waits for the next receiver
	c.receive(transportStreaming, "protocol=7")
	if l := c.line(); !strings.HasPrefix(l, "hhhh") {
		t.Fatalf("reopened stream: first line %.40q, want the prelude", l)
	}
	// Read as a line: next would skip an open frame.
	if l := c.line(); !strings.HasPrefix(l, "a[") {
		t.Fatalf("reopened stream: line %.40q after the prelude, want the frame of e1 (no open frame)", l)
	} else {
		c.pending = decodeMessages(t, l)
	}
	c.expect("e1", "news")
}

// A session neither streaming nor polled for the disconnect delay is
// closed and leaves its channels: the others on a presence channel see
// member_removed, as when a WebSocket drops.
func TestXHRDisconnectDelayLeavesChannels(t *testing.T) {
	for _, transport := range []string{transportStreaming, transportPolling} {
		t.Run(transport, func(t *testing.T) {
			s := newWSServer(t, Options{DisconnectDelay: 100e6})
			const ch = "presence-lobby"
			watcher := s.dial(t, "key1")
			wd := `{"user_id":"watcher"}`
			watcher.subscribe(ch, signing.ChannelAuth("key1", "secret1", watcher.socketID, ch, wd), wd)
			watcher.expect("pusher_internal:subscription_succeeded", ch)
			c := s.xhrOpen(t, "key1", transport)
			c.established()
			cd := `{"user_id":"leaver"}`
			c.subscribe(ch, signing.ChannelAuth("key1", "secret1", c.socketID, ch, cd), cd)
			c.expect("pusher_internal:subscription_succeeded", ch)
			watcher.expect("pusher_internal:member_added", ch)
			c.stopReceiving()
			if f := watcher.expect("pusher_internal:member_removed", ch); !strings.Contains(f.Data, "leaver") {
				t.Fatalf("member_removed data %q", f.Data)
			}
			wait.NoError(t, func() error {
				if n := s.handler.HTTPSessions(); n != 0 {
					return fmt.Errorf("%d sessions left", n)
				}
				return nil
			})
			if code, _ := c.sendRaw("[]"); code != http.StatusNotFound {
				t.Fatalf("xhr_send to the closed session: %d, want 404", code)
			}
		})
	}
}

// Bad xhr_send requests get a 4xx with the error body; a message over
// MaxMessageBytes gets the WebSocket's pusher:error.
func TestXHRSendRefusals(t *testing.T) {
	s := newWSServer(t, Options{MaxMessageBytes: 100})
	c := s.xhrOpen(t, "key1", transportStreaming)
	c.established()
	tests := []struct {
		name, body string
		status     int
		kind       string
	}{
		{"ErrEmpty", "", 400, kindInvalidBody},
		{"ErrNotJSON", "{", 400, kindInvalidBody},
		{"ErrNotArray", `{"event":"pusher:ping"}`, 400, kindInvalidBody},
		{"ErrNull", `null`, 400, kindInvalidBody},
		{"ErrNumbers", `[1]`, 400, kindInvalidBody},
		{"ErrNotUTF8", "[\"\xff\"]", 400, kindInvalidBody},
		{"ErrTooLarge", `["` + strings.Repeat("x", 6*100+1) + `"]`, 413, kindBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := c.sendRaw(tt.body)
			var e struct{ Error, Description string }
			if status != tt.status || json.Unmarshal([]byte(body), &e) != nil || e.Error != tt.kind || e.Description == "" {
				t.Fatalf("status %d body %s, want %d %s", status, body, tt.status, tt.kind)
			}
		})
	}
	t.Run("ErrUnreadable", func(t *testing.T) {
		// A chunked body whose chunk size is not hex: net/http fails the read.
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.httpURL(), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		path := c.base[len(s.httpURL()):] + "/" + transportSend
		if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", path); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct{ Error, Description string }
		if resp.StatusCode != http.StatusBadRequest || json.NewDecoder(resp.Body).Decode(&e) != nil || e.Error != kindUnreadableBody {
			t.Fatalf("status %d body %+v, want 400 %s", resp.StatusCode, e, kindUnreadableBody)
		}
	})
	if status, _ := c.sendRaw(`["` + strings.Repeat("x", 101) + `"]`); status != http.StatusNoContent {
		t.Fatalf("a message over the limit: status %d, want 204 (and a pusher:error)", status)
	}
	if _, msg := errorData(t, c.expect("pusher:error", "")); !strings.Contains(msg, "too large") {
		t.Fatalf("pusher:error %q", msg)
	}
	unknown := s.xhrSession(t, "key1")
	if status, body := unknown.sendRaw("[]"); status != http.StatusNotFound || !strings.Contains(body, kindNotFound) {
		t.Fatalf("xhr_send to no session: %d %s", status, body)
	}
	req, _ := http.NewRequest(http.MethodPut, c.base+"/xhr_send", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("PUT: %d, want 405", resp.StatusCode)
	}
	for _, path := range []string{"/pusher/app/key1/1/s/eventsource", "/pusher/app/key1/1.2/s/xhr", "/pusher/app/key1/s/xhr"} {
		resp, err := http.Post(s.httpURL()+path, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("POST %s: %d, want 404", path, resp.StatusCode)
		}
	}
	// The CORS preflight a browser makes before these requests.
	req, _ = http.NewRequest(http.MethodOptions, c.base+"/xhr_send", nil)
	req.Header.Set("Origin", "http://example.test")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Content-Type") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
}

// Client events keep their per-connection rate limit over the fallback.
func TestXHRClientEventRate(t *testing.T) {
	s := newWSServer(t, Options{})
	c := s.xhrOpen(t, "key1", transportStreaming)
	c.established()
	const ch = "private-rate"
	c.subscribe(ch, signing.ChannelAuth("key1", "secret1", c.socketID, ch, ""), "")
	c.expect("pusher_internal:subscription_succeeded", ch)
	var msgs []any
	for range ClientEventsPerSecond + 1 {
		msgs = append(msgs, map[string]any{"event": "client-x", "channel": ch, "data": "{}"})
	}
	c.send(msgs...) // all in one body: well within one second
	if code, _ := errorData(t, c.expect("pusher:error", "")); code == nil || *code != 4301 {
		t.Fatalf("11th client event: code %v, want 4301", code)
	}
}

// Opening a session counts against the connect rate limit, like a
// WebSocket upgrade: over it, HTTP 429 with Retry-After and the error body.
// The receiving and sending requests of an open session do not count: a
// poller's polls all come through, and the only request refused is the one
// opening a second session.
func TestXHRConnectRateLimit(t *testing.T) {
	s := newWSServer(t, Options{ConnectRateLimit: 0.01}) // one now, the next in 100 s
	c := s.xhrOpen(t, "key1", transportPolling)
	c.established()
	for range 3 { // each pong is the answer of a poll of its own
		c.send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
		c.expect("pusher:pong", "")
	}
	refused := s.xhrOpen(t, "key1", transportPolling)
	if l := refused.line(); l != "status 429" {
		t.Fatalf("a second session: %q, want status 429", l)
	}
	if n := s.handler.Counters().ConnectRateLimited; n != 1 {
		t.Fatalf("%d refused by the connect rate, want 1 (the second session)", n)
	}
}

// A request whose <session> part is empty, "." or "..", or longer than 64
// characters is refused with 404 on every transport and opens no session;
// one of 64 characters is a session like any other.
func TestXHRSessionPartRefused(t *testing.T) {
	s := newWSServer(t, Options{})
	post := func(path string) (int, string) {
		t.Helper()
		// Sent as written: a client's URL parsing would clean up "." and "..".
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.httpURL(), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", path); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		// A stream's first line, or the error body. The deferred close of
		// the connection ends a stream (closing the body would read it all).
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		return resp.StatusCode, line
	}
	for _, session := range []string{"", ".", "..", strings.Repeat("s", maxSessionIDPart+1)} {
		for _, transport := range []string{transportStreaming, transportPolling, transportSend} {
			path := "/pusher/app/key1/123/" + session + "/" + transport + "?protocol=7&client=js&version=8.6.0"
			status, body := post(path)
			var e struct{ Error, Description string }
			if status != http.StatusNotFound || json.Unmarshal([]byte(body), &e) != nil || e.Error != kindNotFound {
				t.Errorf("POST %s: %d %.80q, want 404 %s", path, status, body, kindNotFound)
			}
		}
	}
	if n := s.handler.HTTPSessions(); n != 0 {
		t.Fatalf("%d sessions opened by refused requests", n)
	}
	longest := "/pusher/app/key1/123/" + strings.Repeat("s", maxSessionIDPart) + "/" + transportPolling + "?protocol=7"
	if status, body := post(longest); status != http.StatusOK || body != "o\n" {
		t.Fatalf("POST %s: %d %q, want 200 and the open frame", longest, status, body)
	}
	if n := s.handler.HTTPSessions(); n != 1 {
		t.Fatalf("%d sessions after a 64-character session id, want 1", n)
	}
}
