package node

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/wait"
)

// Webhook URLs are the operator's: a private one (here on loopback) is
// reached by default, and never with HERALD_WEBHOOK_ALLOW_PRIVATE=false,
// where the attempt fails at connect time instead.
func TestWebhookAllowPrivate(t *testing.T) {
	for _, tt := range []struct {
		name  string
		block bool
	}{{"OKAllowedByDefault", false}, {"OKRefusedWhenBlocked", true}} {
		t.Run(tt.name, func(t *testing.T) {
			var received atomic.Int32
			sink := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { received.Add(1) }))
			t.Cleanup(sink.Close)
			n, base := serveNode(t, socketConfig(t, func(c *config.Config) {
				c.AppWebhookURL = sink.URL
				c.WebhookBlockPrivate = tt.block
			}))
			c, _ := dialSocket(t, base, "")
			subscribeAll(t, c, 1) // channel_occupied
			if !tt.block {
				wait.Until(t, "the webhook at the private address", func() bool { return received.Load() > 0 })
				return
			}
			wait.Until(t, "a failed attempt", func() bool { return n.hook.Stats().Failed > 0 })
			if got := received.Load(); got != 0 {
				t.Fatalf("the private endpoint received %d requests, want none", got)
			}
		})
	}
}
