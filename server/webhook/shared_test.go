package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// On a database other nodes share, a starting dispatcher leaves the
// requests another node has claimed to it: only their claim's end makes
// them due again. Alone on SQLite it takes its previous run's back at once.
func TestStartLeavesOtherNodesClaimsOnASharedDatabase(t *testing.T) {
	for _, tt := range []struct {
		name    string
		dsn     func() string
		release bool
	}{
		{"PostgreSQL", func() string { return testpg.Start(t) }, false},
		{"SQLite", func() string { return t.TempDir() + "/h.db" }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := tt.dsn()
			// The app exists and its endpoint never answers, so a request
			// the dispatcher takes back is claimed again for its lease (a
			// minute), in flight: never dropped, never gone before the check.
			answer := make(chan struct{})
			hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-answer }))
			t.Cleanup(hang.Close)
			a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: hang.URL}}}}
			other := openDB(t, dsn) // the node that claimed the request
			if _, err := other.EnqueueWebhooks(ctx, []storage.OutboxWebhook{{AppID: "1", URL: hang.URL, Body: []byte("{}")}}, 0); err != nil {
				t.Fatal(err)
			}
			claimed, err := other.ClaimWebhooks(ctx, time.Now(), time.Hour, 10, 1)
			if err != nil || len(claimed) != 1 {
				t.Fatalf("claim: %v %v", claimed, err)
			}
			db := openDB(t, dsn)
			check := func() time.Time {
				due, ok, err := db.NextWebhookDue(ctx, time.Now(), 1)
				if err != nil || !ok {
					t.Fatalf("next due: %v %v", ok, err)
				}
				return due
			}
			if due := check(); due.Before(time.Now().Add(50 * time.Minute)) {
				t.Fatalf("before the start the request is due at %v, not at its claim's end", due)
			}
			start(t, db, a, Options{})
			t.Cleanup(func() { close(answer) }) // before the dispatcher's Close, which waits for its request
			due := check()
			if released := due.Before(time.Now().Add(50 * time.Minute)); released != tt.release {
				t.Fatalf("after the start the request is due at %v: released %v, want %v", due, released, tt.release)
			}
		})
	}
}
