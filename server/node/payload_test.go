package node

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldrt/herald/gen/channelsclient"
	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage/testpg"
)

// JSON that Go reads but one of the databases does not store — a lone
// surrogate escape and a number beyond PostgreSQL's numeric (PostgreSQL),
// arrays nested more than 1,000 levels (SQLite) — is refused with 400 and
// the error body on both, before it is stored, wherever a client's JSON is
// stored: a publish to interests, a publish to users, a trigger's
// push_if_offline for a user who is offline, and a Device API body.
// Nothing is stored, and nothing answers 500.
func TestUnstorablePayloadsAreRefused(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { testUnstorablePayloads(t, filepath.Join(t.TempDir(), "herald.db")) })
	t.Run("PostgreSQL", func(t *testing.T) { testUnstorablePayloads(t, testpg.Start(t)) })
}

func testUnstorablePayloads(t *testing.T, db string) {
	gw := startGateways(t)
	n, base := serveNodeWith(t, pushIfOfflineConfig(t, gw, db), Options{Push: gw.pushOptions()})
	channels, err := channelsclient.NewClientWithResponses(base, channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner("go-sdk-key", "go-sdk-secret")))
	if err != nil {
		t.Fatal(err)
	}
	publishes := base + "/publish_api/v1/instances/" + beamsInstance + "/publishes/"
	for _, tt := range []struct{ name, value, says string }{
		{"LoneSurrogate", `"\ud800"`, `lone surrogate escape (\\ud800)`},
		{"NumberOutOfRange", `1e999999`, "number out of range"},
		{"NestedPastSQLite", strings.Repeat("[", 1001) + strings.Repeat("]", 1001), "more than 100 levels deep"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fcm := json.RawMessage(`{"notification":{"title":"t"},"data":{"k":` + tt.value + `}}`)
			refused := func(what string, status int, body []byte) {
				t.Helper()
				var e struct{ Error, Description string }
				if status != 400 || json.Unmarshal(body, &e) != nil || e.Error != "invalid_request" || !strings.Contains(string(body), tt.says) {
					t.Fatalf("%s: %d %s, want 400 invalid_request saying %s", what, status, body, tt.says)
				}
			}
			status, out := call(t, "POST", publishes+"interests", map[string]any{"interests": []string{"news"}, "fcm": fcm}, "Authorization", "Bearer "+beamsSecret)
			refused("publish to interests", status, out)
			status, out = call(t, "POST", publishes+"users", map[string]any{"users": []string{"alice"}, "fcm": fcm}, "Authorization", "Bearer "+beamsSecret)
			refused("publish to users", status, out)
			res, err := channels.TriggerEventWithResponse(context.Background(), "77", nil, channelsclient.TriggerEventRequest{
				Name: ptr("message"), Data: ptr("{}"), Channel: ptr("#server-to-user-alice"),
				PushIfOffline: &channelsclient.PushIfOffline{Fcm: &fcm},
			})
			if err != nil {
				t.Fatal(err)
			}
			refused("push_if_offline", res.StatusCode(), res.Body)
			status, out = call(t, "POST", base+"/device_api/v1/instances/"+beamsInstance+"/devices/fcm",
				map[string]any{"token": "fcm-token", "metadata": map[string]any{"sdkVersion": "1"}, "extra": json.RawMessage(tt.value)})
			refused("device registration", status, out)
		})
	}
	if c := publishCount(t, n); c != 0 {
		t.Fatalf("%d publishes stored", c)
	}
}

// A push_if_offline's webhook URL may lead only where a Web Push endpoint
// may: a loopback one is refused by default, and with the loopback address
// in HERALD_WEBPUSH_ALLOWED_HOSTS it is taken and its webhooks arrive.
func TestPushIfOfflineWebhookGuarded(t *testing.T) {
	sink := &webhookSink{}
	hooks := httptest.NewServer(sink)
	t.Cleanup(hooks.Close)
	gw := startGateways(t)
	trigger := func(base string) *channelsclient.TriggerEventResponse {
		t.Helper()
		c, err := channelsclient.NewClientWithResponses(base, channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner("go-sdk-key", "go-sdk-secret")))
		if err != nil {
			t.Fatal(err)
		}
		fcm := json.RawMessage(`{"notification":{"title":"t"}}`)
		res, err := c.TriggerEventWithResponse(context.Background(), "77", nil, channelsclient.TriggerEventRequest{
			Name: ptr("message"), Data: ptr("{}"), Channel: ptr("#server-to-user-alice"),
			PushIfOffline: &channelsclient.PushIfOffline{Fcm: &fcm, WebhookURL: ptr(hooks.URL + "/hook")}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	cfg := pushIfOfflineConfig(t, gw, filepath.Join(t.TempDir(), "herald.db"))
	cfg.WebPushAllowedHosts = nil
	_, base := serveNodeWith(t, cfg, Options{Push: gw.pushOptions()})
	if res := trigger(base); res.StatusCode() != 400 || !strings.Contains(string(res.Body), "invalid_webhook_url") {
		t.Fatalf("a loopback webhook by default: %d %s, want 400 invalid_webhook_url", res.StatusCode(), res.Body)
	}

	_, base = serveNodeWith(t, pushIfOfflineConfig(t, gw, filepath.Join(t.TempDir(), "herald.db")), Options{Push: gw.pushOptions()})
	res := trigger(base)
	if res.JSON200 == nil || res.JSON200.PublishID == nil {
		t.Fatalf("a loopback webhook of an allowed host: %d %s, want 200 with a publish_id", res.StatusCode(), res.Body)
	}
	wait.Until(t, "publish_finished at the allowed host", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, ev := range sink.events {
			if ev["event"] == "publish_finished" && ev["publishId"] == *res.JSON200.PublishID {
				return true
			}
		}
		return false
	})
}
