package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldrt/herald/server/config"
)

// socketConfig is a node with app 77 and the settings of mutate.
func socketConfig(t *testing.T, mutate func(*config.Config)) config.Config {
	cfg := config.Config{
		DB:        filepath.Join(t.TempDir(), "herald.db"),
		AppID:     "77",
		AppKey:    "go-sdk-key",
		AppSecret: "go-sdk-secret",
	}
	mutate(&cfg)
	return cfg
}

// dialSocket opens a WebSocket to the node as a client behind the given
// X-Forwarded-For (none when empty), and returns it with the HTTP status
// that answered (101 once upgraded).
func dialSocket(t *testing.T, base, forwardedFor string) (*websocket.Conn, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := http.Header{}
	if forwardedFor != "" {
		h.Set("X-Forwarded-For", forwardedFor)
	}
	url := "ws" + strings.TrimPrefix(base, "http") + "/app/go-sdk-key?protocol=7"
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		return nil, resp.StatusCode
	}
	t.Cleanup(func() { c.CloseNow() })
	c.SetReadLimit(1 << 20)
	return c, http.StatusSwitchingProtocols
}

// HERALD_WS_CONNECT_RATE_LIMIT reaches the WebSocket endpoint, which limits
// the client's address as gin names it: X-Forwarded-For only from a trusted
// proxy.
func TestSocketConnectRateLimit(t *testing.T) {
	t.Run("Untrusted", func(t *testing.T) {
		_, base := serveNode(t, socketConfig(t, func(c *config.Config) { c.ConnectRateLimit = 0.01 }))
		if _, code := dialSocket(t, base, ""); code != http.StatusSwitchingProtocols {
			t.Fatalf("first connection: %d", code)
		}
		// A forged X-Forwarded-For from an untrusted peer changes nothing.
		if _, code := dialSocket(t, base, "198.51.100.7"); code != http.StatusTooManyRequests {
			t.Fatalf("second connection: %d, want 429", code)
		}
	})
	t.Run("BehindTrustedProxy", func(t *testing.T) {
		_, base := serveNode(t, socketConfig(t, func(c *config.Config) {
			c.ConnectRateLimit = 0.01
			c.TrustedProxies = []string{"127.0.0.1"}
		}))
		for _, client := range []string{"198.51.100.7", "198.51.100.8"} {
			if _, code := dialSocket(t, base, client); code != http.StatusSwitchingProtocols {
				t.Fatalf("first connection of %s: %d", client, code)
			}
		}
		if _, code := dialSocket(t, base, "198.51.100.7"); code != http.StatusTooManyRequests {
			t.Fatalf("second connection of 198.51.100.7: %d, want 429", code)
		}
	})
}

// subscribeAll subscribes c to n public channels at once and counts the
// answers: subscriptions that succeeded, and the refusals' statuses by the
// words of their message.
func subscribeAll(t *testing.T, c *websocket.Conn, n int) (succeeded int, refused map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, err := c.Read(ctx); err != nil { // connection_established
		t.Fatal(err)
	}
	for i := range n {
		msg := fmt.Sprintf(`{"event":"pusher:subscribe","data":{"channel":"room-%d"}}`, i)
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	refused = map[string]int{}
	for answers := 0; answers < n; {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var f struct{ Event, Data string }
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		switch f.Event {
		case "pusher_internal:subscription_succeeded":
			succeeded++
			answers++
		case "pusher:subscription_error":
			var d struct {
				Type   string
				Error  string
				Status int
			}
			if err := json.Unmarshal([]byte(f.Data), &d); err != nil || d.Type != "LimitReached" || d.Status != 429 {
				t.Fatalf("subscription_error %s", f.Data)
			}
			switch {
			case strings.Contains(d.Error, "this connection"):
				refused["connection"]++
			case strings.Contains(d.Error, "The app"):
				refused["app"]++
			default:
				t.Fatalf("refusal naming no limit: %s", d.Error)
			}
			answers++
		}
	}
	return succeeded, refused
}

// One anonymous socket cannot subscribe its way through thousands of
// channels of an app with webhooks: after the burst it gets 10 a second.
func TestSocketSubscribeFloodWithWebhooks(t *testing.T) {
	sink := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(sink.Close)
	_, base := serveNode(t, socketConfig(t, func(c *config.Config) { c.AppWebhookURL = sink.URL }))
	c, _ := dialSocket(t, base, "")
	ok, refused := subscribeAll(t, c, 300)
	// 300 subscribes take far less than the 20 s the bucket would need to
	// let them all through, and the first 100 always pass.
	if ok < 100 || ok >= 300 || refused["connection"] != 300-ok {
		t.Fatalf("%d subscribed, refused %v; want the burst of 100 and the rest refused per connection", ok, refused)
	}
}

// HERALD_MAX_SUBSCRIPTIONS_PER_APP caps the app's subscriptions over all its
// connections.
func TestSocketAppSubscriptionCap(t *testing.T) {
	n, base := serveNode(t, socketConfig(t, func(c *config.Config) { c.MaxSubscriptions = 50 }))
	c, _ := dialSocket(t, base, "")
	ok, refused := subscribeAll(t, c, 60)
	if ok != 50 || refused["app"] != 10 {
		t.Fatalf("%d subscribed, refused %v; want 50 and 10 by the app's cap", ok, refused)
	}
	if got := n.Hub().Subscriptions("77"); got != 50 {
		t.Fatalf("hub counts %d subscriptions, want 50", got)
	}
}
