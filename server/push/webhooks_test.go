package push

import (
	"testing"
	"time"

	"github.com/heraldrt/herald/storage"
)

// TestWebhookBodyOfMigratedRow: the facts of a webhook queued with an encoded
// body by a version before storage migration 0005 (storage's
// TestPublishWebhookOutboxMigration converts that row into these facts) are
// sent as exactly that body, so its signature is the same too.
func TestWebhookBodyOfMigratedRow(t *testing.T) {
	const old = `{"event":"publish_finished","failed":1,"instanceId":"inst-1","publishId":"pubid-a","sent":15,"state":"done","targeted":16,"timeMs":1767225660456}`
	w := storage.PublishWebhook{InstanceID: "inst-1", URL: "https://hooks.example/publish", PublishID: "pubid-a",
		Event: storage.PublishFinished, State: storage.PublishDone, Targeted: 16, Sent: 15, Failed: 1,
		At: time.UnixMilli(1767225660456).UTC()}
	if got := string(encodeWebhook(w)); got != old {
		t.Fatalf("body %s\nwant %s", got, old)
	}
}
