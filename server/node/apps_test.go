package node

import (
	"reflect"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/ws"
	"github.com/heraldrt/herald/storage"
)

// Every field of the transport's view of an app is filled from the stored
// app, so a policy added to ws.App and forgotten here fails this test.
func TestSocketAppCopiesEveryPolicy(t *testing.T) {
	stored := &storage.App{
		ID: "1", Key: "key", Secret: "secret", Enabled: true, ClientEvents: true, SubscriptionCount: true,
		UserAuthTimeout: 3 * time.Second, MaxConnections: 4, MaxPresenceMembers: 5, MaxPresenceUserInfoBytes: 6,
		HistoryEvents: 7, HistoryTTL: 8 * time.Second, RecoveryWindow: 9 * time.Second,
		Webhooks: []storage.Webhook{{URL: "https://example.test/hook"}},
	}
	got, ok := socketApp(stored)
	want := ws.App{
		ID: "1", Key: "key", Secret: "secret", Enabled: true, ClientEvents: true, SubscriptionCount: true,
		UserAuthTimeout: 3 * time.Second, MaxConnections: 4, MaxPresenceMembers: 5, MaxPresenceUserInfoBytes: 6,
		History: eventlog.Policy{Events: 7, TTL: 8 * time.Second}, RecoveryWindow: 9 * time.Second,
		Webhooks: webhookFilter{stored},
	}
	if !ok || got != want {
		t.Fatalf("socketApp = %+v, %v; want %+v", got, ok, want)
	}
	v := reflect.ValueOf(got)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("ws.App.%s is not filled from the stored app", v.Type().Field(i).Name)
		}
	}
	if _, ok := socketApp(nil); ok {
		t.Fatal("socketApp(nil) reported an app")
	}
}

// The transport sees an app's webhooks as the sender applies them: by
// channel prefix and event kind; an app without endpoints has none.
func TestSocketAppWebhooks(t *testing.T) {
	if app, _ := socketApp(&storage.App{ID: "1"}); app.Webhooks != nil {
		t.Fatalf("an app without endpoints has webhooks %v", app.Webhooks)
	}
	app, _ := socketApp(&storage.App{ID: "1", Webhooks: []storage.Webhook{
		{URL: "https://a.test", EventTypes: []string{"member_added"}, ChannelPrefix: "presence-"},
		{URL: "https://b.test", EventTypes: []string{"client_event", "cache_miss"}},
	}})
	for _, tt := range []struct {
		kind    hub.EventKind
		channel string
		want    bool
	}{
		{hub.MemberAdded, "presence-room", true},
		{hub.MemberAdded, "private-room", false},
		{hub.MemberRemoved, "presence-room", false},
		{hub.ChannelOccupied, "presence-room", false},
		{hub.CacheMiss, "cache-x", true},
		{hub.ClientEvent, "private-x", true},
	} {
		if got := app.Webhooks.Sends(tt.kind, tt.channel); got != tt.want {
			t.Errorf("Sends(%s, %s) = %v, want %v", tt.kind, tt.channel, got, tt.want)
		}
	}
	every, _ := socketApp(&storage.App{ID: "1", Webhooks: []storage.Webhook{{URL: "https://a.test"}}})
	if !every.Webhooks.Sends(hub.SubscriptionCount, "news") {
		t.Error("an endpoint without event types does not take subscription_count")
	}
}
