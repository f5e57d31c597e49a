package ws

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldrt/herald/server/internal/wait"
)

// testFrame encodes a frame as the server sends it (masked for a client).
func testFrame(payload []byte, masked bool) []byte {
	f := []byte{0x81}
	m := byte(0)
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		f = append(f, m|byte(n))
	case n <= 0xffff:
		f = append(f, m|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, m|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	if masked {
		f = append(f, 1, 2, 3, 4)
	}
	return append(f, payload...)
}

// A client may send its first message right behind the upgrade request, in
// the same packet; whoever read the request (server/upgrade or net/http) has
// then read it already, and it must not be lost.
func TestMessageSentWithTheHandshakeIsHandled(t *testing.T) {
	t.Run("Upgrade", func(t *testing.T) { testMessageSentWithTheHandshake(t, newWSServer(t, Options{})) })
	t.Run("NetHTTP", func(t *testing.T) { testMessageSentWithTheHandshake(t, newWSServerNetHTTP(t, Options{})) })
}

func testMessageSentWithTheHandshake(t *testing.T, s *wsServer) {
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "ws://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET /app/key1?protocol=7 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	// Masked with a zero key, so the payload goes as is.
	ping := testFrame([]byte(`{"event":"pusher:ping","data":{}}`), false)
	ping[1] |= 0x80
	ping = append(ping[:2:2], append([]byte{0, 0, 0, 0}, ping[2:]...)...)
	if _, err := c.Write(append([]byte(req), ping...)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	for _, want := range []string{"pusher:connection_established", "pusher:pong"} {
		var hdr [2]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		n := int(hdr[1] & 0x7f)
		if n == 126 {
			var ext [2]byte
			if _, err := io.ReadFull(br, ext[:]); err != nil {
				t.Fatal(err)
			}
			n = int(binary.BigEndian.Uint16(ext[:]))
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(br, payload); err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(payload, []byte(`"`+want+`"`)) {
			t.Fatalf("got %s, want %s", payload, want)
		}
	}
}

// Connections spend their idle time parked (with the poller, or on a small
// waiting goroutine); each way out of that state must finish the connection.
func TestParkedConnectionsWakeAndFinish(t *testing.T) {
	t.Run("Poller", func(t *testing.T) { testParkedConnections(t, false) })
	t.Run("WaitingGoroutines", func(t *testing.T) { testParkedConnections(t, true) })
}

func testParkedConnections(t *testing.T, noPoller bool) {
	s := newWSServer(t, Options{})
	if noPoller {
		s.handler.poller = nil
	}
	var clients []*client
	for range 20 {
		clients = append(clients, s.dial(t, "key1"))
	}
	// Input after idle periods wakes the connection each time.
	for range 3 {
		time.Sleep(20 * time.Millisecond)
		for _, c := range clients {
			c.ping()
		}
	}
	// A client that goes away without a close frame, one that closes
	// properly, and one the server closes while it is parked.
	_ = clients[0].ws.CloseNow()
	_ = clients[1].ws.Close(websocket.StatusNormalClosure, "bye")
	var victim *session
	s.handler.mu.Lock()
	for sess := range s.handler.sessions {
		if sess.conn.SocketID() == clients[2].socketID {
			victim = sess
		}
	}
	s.handler.mu.Unlock()
	_ = victim.ws.CloseNow()
	wait.NoError(t, func() error {
		if n := s.handler.Sessions(); n != 17 {
			return fmt.Errorf("%d sessions, want 17", n)
		}
		return nil
	})
	for _, c := range clients[3:] {
		c.ping()
	}
	for _, c := range clients[3:] {
		_ = c.ws.CloseNow()
	}
	wait.NoError(t, func() error {
		if n := s.handler.Sessions(); n != 0 {
			return fmt.Errorf("%d sessions, want 0", n)
		}
		return nil
	})
}

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
