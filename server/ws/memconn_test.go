package ws

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/ws/socket"
)

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

func (c *memConn) LocalAddr() net.Addr { return &net.TCPAddr{} }

func (c *memConn) RemoteAddr() net.Addr { return &net.TCPAddr{} }

func (c *memConn) SetDeadline(time.Time) error { return nil }

func (c *memConn) SetReadDeadline(time.Time) error { return nil }

func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// memResponse is the http.ResponseWriter of an upgrade over a memConn.
type memResponse struct {
	header http.Header
	conn   *memConn
}

func (w *memResponse) Header() http.Header { return w.header }

func (w *memResponse) Write(p []byte) (int, error) { return len(p), nil }

func (w *memResponse) WriteHeader(int) {}

func (w *memResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.conn, bufio.NewReadWriter(bufio.NewReader(w.conn), bufio.NewWriter(w.conn)), nil
}

// memHandler is a Handler without the poller and without its write
// watchdog running (a test starts watchWrites itself), so that it can live
// in a synctest bubble.
func memHandler(h *hub.Hub, opts Options) *Handler {
	return &Handler{hub: h, apps: wsApps, log: zap.NewNop(), opts: opts.WithDefaults(),
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

func (nopWriter) Wake() {}

func (nopWriter) Overflow() {}
