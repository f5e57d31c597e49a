package ws

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/internal/wait"
)

// xhrClient is a raw client of the HTTP fallback, as pusher-js's HTTP socket
// behaves: one receiving request at a time (a stream, or polls one after
// the other), messages sent with xhr_send. Its receiver runs on a goroutine
// and hands the lines it reads to the test.
type xhrClient struct {
	t        *testing.T
	base     string // http://host:port/pusher/app/<key>/<server>/<session>
	lines    chan string
	pending  []serverFrame // of the last a[...] line, not read yet
	socketID string
	stop     context.CancelFunc
}

var xhrSessions atomic.Int64

// httpURL is the server's base URL for plain HTTP requests.
func (s *wsServer) httpURL() string { return "http" + strings.TrimPrefix(s.url, "ws") }

// xhrOpen opens a session of the app with key over transport
// (transportStreaming or transportPolling), reading from it until the test
// ends or stopReceiving is called.
func (s *wsServer) xhrOpen(t *testing.T, key, transport string) *xhrClient {
	t.Helper()
	c := s.xhrSession(t, key)
	c.receive(transport, "protocol=7&client=js&version=8.6.0")
	return c
}

// xhrSession is a client of a new session id that receives nothing yet.
func (s *wsServer) xhrSession(t *testing.T, key string) *xhrClient {
	n := xhrSessions.Add(1)
	return &xhrClient{t: t, base: fmt.Sprintf("%s/pusher/app/%s/%d/sess%d", s.httpURL(), key, n%1000, n), lines: make(chan string, 1024)}
}

// receive starts the receiver: a stream, reopened by stopReceiving only; or
// polls, each after the last one's answer, until a close frame.
func (c *xhrClient) receive(transport, query string) {
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.t.Cleanup(cancel)
	go func() {
		defer func() { c.lines <- "end" }()
		for n := 0; ; n++ {
			resp, err := c.post(ctx, transport, fmt.Sprintf("%s&t=%d", query, n), "")
			if err != nil {
				return
			}
			if resp.StatusCode != http.StatusOK {
				resp.Body.Close()
				c.lines <- fmt.Sprintf("status %d", resp.StatusCode)
				return
			}
			closed := false
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 4<<20)
			for sc.Scan() {
				closed = closed || strings.HasPrefix(sc.Text(), "c[")
				c.lines <- sc.Text()
			}
			resp.Body.Close()
			if transport == transportStreaming || closed || ctx.Err() != nil {
				return
			}
		}
	}()
}

// id is the session's id on the server: <key>/<server>/<session>.
func (c *xhrClient) id() string { return c.base[strings.Index(c.base, "/app/")+len("/app/"):] }

// stopReceiving ends the receiving request and waits until its reader has.
func (c *xhrClient) stopReceiving() {
	c.stop()
	for l := range c.lines {
		if l == "end" {
			return
		}
	}
}

func (c *xhrClient) post(ctx context.Context, transport, query, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/"+transport+"?"+query, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// line is the next line received (or "end" once the receiver stopped),
// failing the test after wait.Limit.
func (c *xhrClient) line() string {
	c.t.Helper()
	select {
	case l := <-c.lines:
		return l
	case <-time.After(wait.Limit):
		c.t.Fatalf("no line from the server in %v", wait.Limit)
		return ""
	}
}

// next is the next server frame, skipping heartbeats and the open frame.
func (c *xhrClient) next() serverFrame {
	c.t.Helper()
	for len(c.pending) == 0 {
		l := c.line()
		switch {
		case strings.HasPrefix(l, "h"), l == "o":
		case strings.HasPrefix(l, "a"):
			c.pending = decodeMessages(c.t, l)
		default:
			c.t.Fatalf("got %.200q, want a frame", l)
		}
	}
	f := c.pending[0]
	c.pending = c.pending[1:]
	return f
}

// expect reads the next frame and checks its event (and channel, when given).
func (c *xhrClient) expect(event, channel string) serverFrame {
	c.t.Helper()
	return checkFrame(c.t, c.next(), event, channel)
}

// established reads pusher:connection_established and keeps the socket id.
func (c *xhrClient) established() {
	c.t.Helper()
	f := c.expect("pusher:connection_established", "")
	var d struct {
		SocketID string `json:"socket_id"`
	}
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil || !validSocketID(d.SocketID) {
		c.t.Fatalf("connection_established data %q", f.Data)
	}
	c.socketID = d.SocketID
}

// expectClose reads past frames to the close frame and returns its code and
// the pusher:error code before it (0 when there was none).
func (c *xhrClient) expectClose() (code, errorCode int) {
	c.t.Helper()
	for {
		if len(c.pending) > 0 {
			f := c.next()
			if f.Event == "pusher:error" {
				if ec, _ := errorData(c.t, f); ec != nil {
					errorCode = *ec
				}
			}
			continue
		}
		l := c.line()
		switch {
		case strings.HasPrefix(l, "c["):
			var v []any
			if err := json.Unmarshal([]byte(l[1:]), &v); err != nil || len(v) != 2 {
				c.t.Fatalf("close frame %q", l)
			}
			return int(v[0].(float64)), errorCode
		case strings.HasPrefix(l, "a"):
			c.pending = decodeMessages(c.t, l)
		case l == "end" || strings.HasPrefix(l, "status"):
			c.t.Fatalf("receiver ended (%s) without a close frame", l)
		}
	}
}

// send posts messages with xhr_send and returns the status.
func (c *xhrClient) send(msgs ...any) int {
	c.t.Helper()
	var strs []string
	for _, m := range msgs {
		b, err := json.Marshal(m)
		if err != nil {
			c.t.Fatal(err)
		}
		strs = append(strs, string(b))
	}
	body, _ := json.Marshal(strs)
	if strs == nil {
		body = []byte("[]")
	}
	status, _ := c.sendRaw(string(body))
	return status
}

// sendRaw posts body to xhr_send and returns the status and answer.
func (c *xhrClient) sendRaw(body string) (int, string) {
	c.t.Helper()
	resp, err := c.post(context.Background(), transportSend, "t=1", body)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (c *xhrClient) subscribe(channel, auth, channelData string) {
	c.t.Helper()
	if status := c.send(map[string]any{"event": "pusher:subscribe", "data": map[string]string{"channel": channel, "auth": auth, "channel_data": channelData}}); status != http.StatusNoContent {
		c.t.Fatalf("xhr_send: status %d, want 204", status)
	}
}

// decodeMessages decodes the frames of an a[...] line.
func decodeMessages(t *testing.T, line string) []serverFrame {
	t.Helper()
	var msgs []string
	if err := json.Unmarshal([]byte(line[1:]), &msgs); err != nil {
		t.Fatalf("message frame %.200q: %v", line, err)
	}
	frames := make([]serverFrame, len(msgs))
	for i, m := range msgs {
		if err := json.Unmarshal([]byte(m), &frames[i]); err != nil {
			t.Fatalf("frame %.200q: %v", m, err)
		}
	}
	return frames
}
