package storage

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func TestClaimWebhooksKeepsPerURLOrder(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	items := []OutboxWebhook{
		{AppID: "1", URL: "http://a", Body: []byte(`1`)},
		{AppID: "1", URL: "http://a", Body: []byte(`2`)},
		{AppID: "1", URL: "http://b", Body: []byte(`3`)},
	}
	if _, err := db.EnqueueWebhooks(ctx, items, 0); err != nil {
		t.Fatal(err)
	}
	// The first request to a failed and waits; the second must wait behind it.
	if err := db.RetryWebhookAt(ctx, items[0].ID, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	due, err := db.ClaimWebhooks(ctx, time.Now(), time.Hour, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 1 || string(due[0].Body) != "3" {
		t.Fatalf("claimed now: %+v, want only the request to b", due)
	}
	if err := db.DeleteWebhook(ctx, due[0].ID); err != nil {
		t.Fatal(err)
	}
	due, err = db.ClaimWebhooks(ctx, time.Now().Add(2*time.Minute), time.Hour, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 2 || string(due[0].Body) != "1" || string(due[1].Body) != "2" || due[0].Attempts != 1 {
		t.Fatalf("claimed later: %+v, want both requests to a in order", due)
	}
	if n, _ := db.CountWebhookOutbox(ctx); n != 2 {
		t.Fatalf("outbox holds %d", n)
	}
	for _, w := range due {
		if err := db.DeleteWebhook(ctx, w.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := db.NextWebhookDue(ctx, time.Now(), 1); ok || err != nil {
		t.Fatalf("empty outbox still has a next due (%v)", err)
	}
}

func TestClaimedWebhooksAreNotClaimedTwice(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	items := []OutboxWebhook{
		{AppID: "1", URL: "http://a", Body: []byte(`1`)},
		{AppID: "1", URL: "http://a", Body: []byte(`2`)},
	}
	if _, err := db.EnqueueWebhooks(ctx, items, 0); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	first, err := db.ClaimWebhooks(ctx, now, time.Minute, 1, 1)
	if err != nil || len(first) != 1 || first[0].ID != items[0].ID {
		t.Fatalf("first claim: %+v (%v), want the first request", first, err)
	}
	// With one request per URL at a time, the claimed request holds back the
	// second: the URL is being served.
	if again, err := db.ClaimWebhooks(ctx, now, time.Minute, 10, 1); err != nil || len(again) != 0 {
		t.Fatalf("claim while the first is held: %+v (%v), want none", again, err)
	}
	// Given back unsent, both are due again, in order.
	if err := db.ReleaseWebhooks(ctx, []int64{first[0].ID}); err != nil {
		t.Fatal(err)
	}
	both, err := db.ClaimWebhooks(ctx, now, time.Minute, 10, 2)
	if err != nil || len(both) != 2 || both[0].ID != items[0].ID || both[1].ID != items[1].ID {
		t.Fatalf("claim after release: %+v (%v), want both in order", both, err)
	}
	// A claim that runs out (its holder died) makes them due again.
	later, err := db.ClaimWebhooks(ctx, now.Add(time.Minute), time.Minute, 10, 2)
	if err != nil || len(later) != 2 {
		t.Fatalf("claim after the lease: %+v (%v), want both", later, err)
	}
	// A node starting alone takes its previous run's claims back at once,
	// and a failed request keeps its retry time.
	if err := db.RetryWebhookAt(ctx, later[0].ID, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ClaimWebhooks(ctx, now.Add(time.Minute), time.Minute, 10, 2); err != nil {
		t.Fatal(err)
	}
	if err := db.ReleaseAllWebhookClaims(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := db.ClaimWebhooks(ctx, now.Add(2*time.Hour), time.Minute, 10, 2); err != nil || len(got) != 2 || got[0].Attempts != 1 {
		t.Fatalf("after the retry time: %+v (%v), want both, the first retried once", got, err)
	}
	if next, ok, err := db.NextWebhookDue(ctx, time.Now(), 2); err != nil || !ok || !next.Equal(fromMillis(now.Add(2*time.Hour+time.Minute).UnixMilli())) {
		t.Fatalf("next due %v %v (%v), want the end of the last claim", next, ok, err)
	}
}

func TestReleaseAllWebhookClaimsMakesThemDueAtOnce(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	items := []OutboxWebhook{{AppID: "1", URL: "http://a", Body: []byte(`1`)}, {AppID: "1", URL: "http://b", Body: []byte(`2`)}}
	if _, err := db.EnqueueWebhooks(ctx, items, 0); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if got, err := db.ClaimWebhooks(ctx, now, time.Hour, 10, 1); err != nil || len(got) != 2 {
		t.Fatalf("claim: %+v (%v)", got, err)
	}
	// The claimant crashed: nothing is due until the claims run out ...
	if got, err := db.ClaimWebhooks(ctx, now, time.Hour, 10, 1); err != nil || len(got) != 0 {
		t.Fatalf("claimed again: %+v (%v), want none", got, err)
	}
	// ... unless the restarted node takes them back.
	if err := db.ReleaseAllWebhookClaims(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := db.ClaimWebhooks(ctx, now, time.Hour, 10, 1); err != nil || len(got) != 2 {
		t.Fatalf("after taking the claims back: %+v (%v), want both", got, err)
	}
}

// openOutboxDB opens a fresh database, closed when the test ends.
func openOutboxDB(t *testing.T) *DB {
	t.Helper()
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// BenchmarkEnqueueWebhooks writes batches of ten requests into an outbox that
// already holds 10,000 of the same app (the default cap).
func BenchmarkEnqueueWebhooks(b *testing.B) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "h.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	body := []byte(`{"time_ms":1,"events":[{"name":"channel_occupied","channel":"a-channel-name"}]}`)
	batch := func(n int) []OutboxWebhook {
		items := make([]OutboxWebhook, n)
		for i := range items {
			items[i] = OutboxWebhook{AppID: "1", URL: "http://a.test/hook", Body: body}
		}
		return items
	}
	for range 10 {
		if _, err := db.EnqueueWebhooks(ctx, batch(1000), 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		if _, err := db.EnqueueWebhooks(ctx, batch(10), 0); err != nil {
			b.Fatal(err)
		}
	}
}
