package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func read(t *testing.T, ctx context.Context, ws *websocket.Conn) map[string]any {
	t.Helper()
	_, msg, err := ws.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(msg, &f); err != nil {
		t.Fatalf("%v: %s", err, msg)
	}
	return f
}

func post(t *testing.T, url, body string) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

func TestBroadcast(t *testing.T) {
	srv := httptest.NewServer(newBroker(1 << 20))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var clients []*websocket.Conn
	for _, ch := range []string{"a", "a", "b"} {
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/app/key?protocol=7", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		f := read(t, ctx, ws)
		var est map[string]any
		if f["event"] != "pusher:connection_established" || json.Unmarshal([]byte(f["data"].(string)), &est) != nil || est["socket_id"] == "" {
			t.Fatalf("first frame %v", f)
		}
		_ = ws.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:subscribe","data":{"channel":"`+ch+`"}}`))
		if f := read(t, ctx, ws); f["event"] != "pusher_internal:subscription_succeeded" || f["channel"] != ch {
			t.Fatalf("subscribe answer %v", f)
		}
		clients = append(clients, ws)
	}

	if got := post(t, srv.URL+"/apps/1/events", `{"name":"ev","channel":"a","data":"one"}`); got != "{}" {
		t.Fatalf("trigger answered %q", got)
	}
	post(t, srv.URL+"/apps/1/events", `{"name":"ev","channels":["a","b"],"data":{"n":2}}`)
	for i, ws := range clients {
		if i < 2 {
			if f := read(t, ctx, ws); f["event"] != "ev" || f["channel"] != "a" || f["data"] != "one" {
				t.Fatalf("client %d: %v", i, f)
			}
		}
		if f := read(t, ctx, ws); f["event"] != "ev" || f["data"] != `{"n":2}` {
			t.Fatalf("client %d: %v", i, f)
		}
	}

	_ = clients[0].Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:ping","data":{}}`))
	if f := read(t, ctx, clients[0]); f["event"] != "pusher:pong" {
		t.Fatalf("ping answer %v", f)
	}
	if got := post(t, srv.URL+"/anything", `{"x":1}`); got != "{}" {
		t.Fatalf("bare handler answered %q", got)
	}
}

func TestSlowConsumerClosed(t *testing.T) {
	b := newBroker(4096)
	srv := httptest.NewServer(b)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/app/key", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	read(t, ctx, ws)
	_ = ws.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:subscribe","data":{"channel":"c"}}`))
	read(t, ctx, ws)
	// Not reading: the socket buffers fill, then the queue.
	body := `{"name":"ev","channel":"c","data":"` + strings.Repeat("x", 8000) + `"}`
	for i := 0; i < 2000 && b.slow.Load() == 0; i++ {
		post(t, srv.URL+"/apps/1/events", body)
	}
	if b.slow.Load() != 1 {
		t.Fatalf("slow consumers closed: %d", b.slow.Load())
	}
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			if code := websocket.CloseStatus(err); code != 4100 {
				t.Fatalf("closed with %v (%v), want 4100", code, err)
			}
			return
		}
	}
}

// TestSameWebSocketVersion keeps the baseline on Herald's version of the
// WebSocket library, or the comparison is not like for like.
func TestSameWebSocketVersion(t *testing.T) {
	re := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/coder/websocket (\S+)`)
	version := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s does not require github.com/coder/websocket", path)
		}
		return string(bytes.TrimSpace(m[1]))
	}
	if ours, herald := version("go.mod"), version("../../go.mod"); ours != herald {
		t.Errorf("baseline on coder/websocket %s, Herald on %s: update tools/baseline/go.mod", ours, herald)
	}
}
