package storage

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func TestDueWebhooksKeepsPerURLOrder(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	items := []OutboxWebhook{
		{AppID: "1", URL: "http://a", Body: []byte(`1`)},
		{AppID: "1", URL: "http://a", Body: []byte(`2`)},
		{AppID: "1", URL: "http://b", Body: []byte(`3`)},
	}
	if err := db.EnqueueWebhooks(ctx, items); err != nil {
		t.Fatal(err)
	}
	// The first request to a failed and waits; the second must wait behind it.
	if err := db.RetryWebhookAt(ctx, items[0].ID, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	due, err := db.DueWebhooks(ctx, time.Now(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 1 || string(due[0].Body) != "3" {
		t.Fatalf("due now: %+v, want only the request to b", due)
	}
	due, err = db.DueWebhooks(ctx, time.Now().Add(2*time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 3 || string(due[0].Body) != "1" || string(due[1].Body) != "2" || due[0].Attempts != 1 {
		t.Fatalf("due later: %+v, want all three in order", due)
	}
	if n, _ := db.CountWebhookOutbox(ctx); n != 3 {
		t.Fatalf("outbox holds %d", n)
	}
	for _, w := range due {
		if err := db.DeleteWebhook(ctx, w.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := db.NextWebhookDue(ctx); ok || err != nil {
		t.Fatalf("empty outbox still has a next due (%v)", err)
	}
}
