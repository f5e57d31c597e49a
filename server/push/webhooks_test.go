package push

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// The default publish-webhook client follows no redirect (the 3xx is the
// answer, a failure) and dials through WebhookDialContext when it is set.
func TestWebhookClientNoRedirectsAndDialSeam(t *testing.T) {
	var elsewhere atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(target.Close)
	redirect := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	t.Cleanup(redirect.Close)

	var dialed atomic.Int32
	o := Options{WebhookDialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
		dialed.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}}.withDefaults()
	res, err := o.WebhookClient.Post(redirect.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTemporaryRedirect || elsewhere.Load() != 0 {
		t.Fatalf("status %d, %d requests at the redirect's target; want 307 and none", res.StatusCode, elsewhere.Load())
	}
	if dialed.Load() != 1 {
		t.Fatalf("dialed %d times through WebhookDialContext, want 1", dialed.Load())
	}
}
