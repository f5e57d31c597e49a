package node

import (
	"reflect"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/ws"
	"github.com/heraldrt/herald/storage"
)

// Every field of the transport's view of an app is filled from the stored
// app, so a policy added to ws.App and forgotten here fails this test.
func TestSocketAppCopiesEveryPolicy(t *testing.T) {
	stored := &storage.App{
		ID: "1", Key: "key", Secret: "secret", Enabled: true, ClientEvents: true, SubscriptionCount: true,
		UserAuthTimeout: 3 * time.Second, MaxConnections: 4, MaxPresenceMembers: 5, MaxPresenceUserInfoBytes: 6,
	}
	got, ok := socketApp(stored)
	want := ws.App{
		ID: "1", Key: "key", Secret: "secret", Enabled: true, ClientEvents: true, SubscriptionCount: true,
		UserAuthTimeout: 3 * time.Second, MaxConnections: 4, MaxPresenceMembers: 5, MaxPresenceUserInfoBytes: 6,
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
