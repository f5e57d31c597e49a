package webhook

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
	"github.com/heraldrt/herald/storage/testpg"
)

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
		{"SQLite", func() string { return testdb.SQLite(t) }, true},
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
			other := testdb.Open(t, storage.Open, dsn) // the node that claimed the request
			if _, err := other.EnqueueWebhooks(ctx, []storage.OutboxWebhook{{AppID: "1", URL: hang.URL, Body: []byte("{}")}}, 0); err != nil {
				t.Fatal(err)
			}
			claimed, err := other.ClaimWebhooks(ctx, time.Now(), time.Hour, 10, 1)
			if err != nil || len(claimed) != 1 {
				t.Fatalf("claim: %v %v", claimed, err)
			}
			db := testdb.Open(t, storage.Open, dsn)
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

// Two dispatchers on one PostgreSQL database, as on two nodes, drain one
// outbox: each request goes out once, whichever node queued it, also when
// the endpoint fails some first. The share each sent is logged.
func TestTwoDispatchersOnOneDatabaseSendEachRequestOnce(t *testing.T) {
	dsn := testpg.Start(t)
	r := newReceiver(t, "k", "s")
	r.failFirst.Store(20)
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	nodes := []*Dispatcher{start(t, testdb.Open(t, storage.Open, dsn), a, fast), start(t, testdb.Open(t, storage.Open, dsn), a, fast)}
	const perNode = 150
	want := make([]string, 0, 2*perNode)
	for i := range perNode {
		for n, d := range nodes {
			ch := fmt.Sprintf("n%d-%d", n, i)
			d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: ch})
			want = append(want, "channel_occupied:"+ch)
		}
	}
	r.waitFor(len(want))
	// Anything sent twice would come after the last new one: wait until
	// both dispatchers have nothing left queued.
	ctx := context.Background()
	db := testdb.Open(t, storage.Open, dsn)
	wait.Until(t, "the outbox is empty", func() bool {
		_, ok, err := db.NextWebhookDue(ctx, time.Now(), 1)
		return err == nil && !ok
	})
	got := r.events()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("received %d events (%d distinct), want each of %d once", len(got), len(slices.Compact(slices.Clone(got))), len(want))
	}
	// Both claim from the start (each is woken by what it queues); which
	// sends more varies: an endpoint's 8 requests in flight are counted
	// over every node, and the node whose requests finish claims the next.
	s0, s1 := nodes[0].Stats(), nodes[1].Stats()
	t.Logf("requests delivered per node: %d and %d (failed attempts %d and %d)", s0.Delivered, s1.Delivered, s0.Failed, s1.Failed)
}
