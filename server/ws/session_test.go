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
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
)

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

// A message of exactly the limit is read; a larger one is discarded to its
// end.
func TestReadMessageLimit(t *testing.T) {
	msg, tooBig, err := readMessage(strings.NewReader("12345"), 5)
	if err != nil || tooBig || string(msg) != "12345" {
		t.Fatalf("5 bytes with a 5-byte limit: %q, %v, %v", msg, tooBig, err)
	}
	r := strings.NewReader("123456")
	msg, tooBig, err = readMessage(r, 5)
	if err != nil || !tooBig || msg != nil || r.Len() != 0 {
		t.Fatalf("6 bytes with a 5-byte limit: %q, %v, %v, %d left", msg, tooBig, err, r.Len())
	}
}
