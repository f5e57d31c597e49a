package console

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/heraldrt/herald/server/httpapi"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/webhook"
)

const token = "console-unit-token-0123456789"

func serve(t *testing.T) (*Console, string) {
	t.Helper()
	return serveAt(t, func() time.Time { return time.UnixMilli(1700000000123) })
}

// serveAt serves a console whose clock is now.
func serveAt(t *testing.T, now func() time.Time) (*Console, string) {
	t.Helper()
	return serveWith(t, func(c *Console) { c.now = now })
}

// serveWith serves a console that setup has adjusted.
func serveWith(t *testing.T, setup func(*Console)) (*Console, string) {
	t.Helper()
	gin.SetMode(gin.TestMode)
	c := New()
	setup(c)
	engine := gin.New()
	httpapi.Mount(engine, httpapi.Routes{Console: c.Routes(), AdminToken: token})
	srv := httptest.NewServer(engine)
	t.Cleanup(func() { c.Close(); srv.Close() })
	return c, srv.URL
}

func get(t *testing.T, url string, headers ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestPage(t *testing.T) {
	_, base := serve(t)
	for path, ctype := range map[string]string{"/console": "text/html", "/console/console.js": "text/javascript", "/console/console.css": "text/css"} {
		res := get(t, base+path)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), ctype) || len(body) == 0 ||
			res.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: %d %v", path, res.StatusCode, res.Header)
		}
		if path == "/console" && (!strings.Contains(string(body), `src="/console/console.js"`) || !strings.Contains(string(body), `id="publishes"`)) {
			t.Errorf("the page does not load its script or lacks the publishes table")
		}
	}
}

func TestStreamAuth(t *testing.T) {
	_, base := serve(t)
	for _, tt := range []struct {
		name    string
		query   string
		headers []string
		status  int
		kind    string
	}{
		{"ErrNoToken", "?app=1", nil, 401, "unauthorized"},
		{"ErrWrongQueryToken", "?app=1&token=nope-nope-nope-nope", nil, 401, "unauthorized"},
		// The token never goes in a URL, not even the right one.
		{"ErrQueryToken", "?app=1&token=" + token, nil, 401, "unauthorized"},
		{"ErrUnknownTicket", "?app=1&ticket=" + token, nil, 401, "unauthorized"},
		{"ErrWrongBearer", "?app=1", []string{"Authorization", "Bearer " + token + "x"}, 401, "unauthorized"},
		{"ErrNotBearer", "?app=1", []string{"Authorization", "Basic " + token}, 401, "unauthorized"},
		{"ErrMissingApp", "", []string{"Authorization", "Bearer " + token}, 400, "missing_app"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := get(t, base+"/console/events"+tt.query, tt.headers...)
			defer res.Body.Close()
			var e struct{ Error, Description string }
			if err := json.NewDecoder(res.Body).Decode(&e); err != nil || res.StatusCode != tt.status || e.Error != tt.kind || e.Description == "" {
				t.Fatalf("got %d %+v (%v), want %d %s", res.StatusCode, e, err, tt.status, tt.kind)
			}
			if tt.status == 401 && !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate %q", res.Header.Get("WWW-Authenticate"))
			}
		})
	}
	t.Run("OKBearer", func(t *testing.T) {
		res := get(t, base+"/console/events?app=1", "Authorization", "Bearer "+token)
		defer res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("got %d %v", res.StatusCode, res.Header)
		}
	})
}

// readEvent reads one SSE message: its lines up to the blank line.
func readEvent(t *testing.T, r *bufio.Reader) []string {
	t.Helper()
	var lines []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v (so far %q)", err, lines)
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			return lines
		}
		lines = append(lines, line)
	}
}

func TestStream(t *testing.T) {
	c, base := serve(t)
	res := get(t, base+"/console/events?app=1", "Authorization", "Bearer "+token)
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Cache-Control") != "no-cache" || res.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("got %d %v", res.StatusCode, res.Header)
	}
	r := bufio.NewReader(res.Body)
	if got := readEvent(t, r); len(got) != 1 || got[0] != ": watching app 1" {
		t.Fatalf("first message %q, want the watching comment", got)
	}
	if c.watching.Load() != 1 {
		t.Fatalf("watching = %d", c.watching.Load())
	}

	c.Triggered("2", "news", "skipped", "{}") // another app: not on this stream
	c.Triggered("1", "news", "breaking", `{"headline":"hi"}`)
	c.Observe(hub.Event{AppID: "1", Kind: hub.ClientEvent, Channel: "private-chat", Name: "client-typing", Data: "{}", SocketID: "1.2", UserID: "u1"})
	c.Observe(hub.Event{AppID: "1", Kind: hub.SubscriptionCount, Channel: "news", Count: 0})
	c.WebhookAttempt(webhook.Attempt{AppID: "1", URL: "http://hooks.example/x", Status: 500, Error: "status 500"})
	// Two-byte characters after one byte: maxDataBytes falls inside one.
	c.Triggered("1", "news", "big", "x"+strings.Repeat("é", maxDataBytes))

	want := []string{
		`{"time_ms":1700000000123,"app_id":"1","kind":"trigger","channel":"news","event":"breaking","data":"{\"headline\":\"hi\"}"}`,
		`{"time_ms":1700000000123,"app_id":"1","kind":"client_event","channel":"private-chat","event":"client-typing","data":"{}","user_id":"u1","socket_id":"1.2"}`,
		`{"time_ms":1700000000123,"app_id":"1","kind":"subscription_count","channel":"news","count":0}`,
		`{"time_ms":1700000000123,"app_id":"1","kind":"webhook","url":"http://hooks.example/x","status":500,"error":"status 500"}`,
	}
	for _, w := range want {
		got := readEvent(t, r)
		if len(got) != 1 || got[0] != "data: "+w {
			t.Fatalf("message %q, want %q", got, "data: "+w)
		}
	}
	got := readEvent(t, r)
	var big Event
	if len(got) != 1 || json.Unmarshal([]byte(strings.TrimPrefix(got[0], "data: ")), &big) != nil ||
		big.Data != "x"+strings.Repeat("é", (maxDataBytes-1)/2)+"…" {
		t.Fatalf("long data not cut at the last whole character within %d bytes: %.120q", maxDataBytes, got)
	}

	// Close ends the stream, and the watcher goes away.
	c.Close()
	if _, err := io.ReadAll(r); err != nil {
		t.Fatalf("after Close: %v", err)
	}
	wait.Until(t, "the watcher to go", func() bool { return c.watching.Load() == 0 })
}

func TestSlowWatcherDrops(t *testing.T) {
	c := New()
	c.Triggered("1", "news", "nobody-watching", "") // free and lost
	w := c.watch("1")
	for i := 0; i < watcherQueue+5; i++ {
		c.Triggered("1", "news", "e", "")
	}
	if len(w.queue) != watcherQueue || w.dropped.Load() != 5 {
		t.Fatalf("queued %d, dropped %d; want %d and 5", len(w.queue), w.dropped.Load(), watcherQueue)
	}
	c.unwatch(w)
	if c.watching.Load() != 0 {
		t.Fatalf("watching = %d after unwatch", c.watching.Load())
	}
}
