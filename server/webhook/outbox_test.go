package webhook

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// One socket's churn floods the outbox of one app whose endpoint accepts
// connections and never answers. The outbox stays within the app's cap, the
// oldest requests are dropped and counted, the drops are logged once (the
// next line is due a minute later), and every request is accounted for once
// the outbox has drained, which takes about MaxAge plus a timeout after the
// flood, not a timeout per request.
func TestOutboxFloodAgainstABlackHole(t *testing.T) {
	const events, maxQueued = 3000, 50
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: blackHole(t)}}}}
	db := testdb.New(t, storage.Open)
	opts := fast
	// MaxAge well above the flood's own duration (3,000 capped inserts take
	// the database writer a second or two on a loaded machine), so that
	// requests live long enough to be attempted and fail.
	opts.Timeout, opts.MaxAge, opts.MaxQueued = 100*time.Millisecond, 5*time.Second, maxQueued
	core, logs := observer.New(zapcore.InfoLevel)
	d := New(db, a, zap.New(core), opts)
	d.Start()
	t.Cleanup(d.Close)

	// The outbox's depth, watched from the side all along.
	var most atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if n, err := db.CountWebhookOutbox(context.Background()); err == nil && int64(n) > most.Load() {
				most.Store(int64(n))
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	for i := range events {
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c-" + itoa(i)})
	}
	flooded := time.Now()
	wait.Until(t, "every request dropped or given up", func() bool {
		s := d.Stats()
		return s.OverCap+s.Expired+s.Abandoned >= events
	})
	waitOutboxEmpty(t, db)
	took := time.Since(flooded)
	close(stop)
	<-watched

	if n := most.Load(); n > maxQueued {
		t.Errorf("the outbox held %d requests, over its cap of %d", n, maxQueued)
	}
	s := d.Stats()
	if s.Delivered != 0 || s.OverCap == 0 || s.Failed == 0 || s.OverCap+s.Expired+s.Abandoned != events {
		t.Errorf("stats %+v, want none delivered, some over the cap, failed attempts, and all %d accounted for", s, events)
	}
	lines := logs.FilterMessage("webhook requests dropped unsent").All()
	if len(lines) != 1 || lines[0].ContextMap()["app_id"] != "1" || lines[0].ContextMap()["over_cap"].(int64) == 0 {
		t.Errorf("drop log lines %v, want one for app 1 (the next is due in a minute)", lines)
	}
	// That the requests to the black hole go 8 at a time, not one by one
	// (each waiting out its timeout), TestEightRequestsInFlightPerEndpoint
	// shows by the requests in flight, not by the clock.
	t.Logf("the outbox drained %v after the flood", took)
}

// An event is written to the outbox and the sender woken at once: one event
// after another, each is delivered though the sender's idle poll and purge
// sweep are an hour, so nothing but the wake-up could have sent it. Nothing
// is logged as an error.
func TestDeliveredWithoutWaitingForThePoll(t *testing.T) {
	r := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	core, logs := observer.New(zapcore.InfoLevel)
	d := New(testdb.New(t, storage.Open), a, zap.New(core), fast)
	d.idlePoll, d.purgeEvery = time.Hour, time.Hour
	d.Start()
	t.Cleanup(d.Close)
	const rounds = 4
	for i := range rounds {
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c" + itoa(i)})
		r.waitFor(i + 1)
	}
	noErrors(t, logs)
}

// When the outbox cannot be read, or its expired requests cannot be
// dropped, the sender logs it: the one sign that webhooks have stopped.
func TestUnreadableOutboxLogged(t *testing.T) {
	db := testdb.New(t, storage.Open)
	core, logs := observer.New(zapcore.InfoLevel)
	d := New(db, apps{}, zap.New(core), fast)
	db.Close()
	d.Start()
	defer d.Close()
	wait.Until(t, "an error about the outbox", func() bool {
		return logs.FilterMessage("reading the webhook outbox").Len() > 0
	})
	// A round drops the expired requests before it reads the outbox.
	if logs.FilterMessage("dropping expired webhooks").Len() == 0 {
		t.Fatal("the failed sweep of expired requests was not logged")
	}
}

// The sender claims from the outbox only as many requests as it has free
// senders: while both of its two wait for a slow endpoint, the third request
// stays unclaimed and due, and goes once one of them is done.
func TestClaimsNoMoreThanItsFreeSenders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &fakeEndpoint{gate: make(chan struct{})}
		d, db, logs := fakeTimeDispatcher(t, Options{Senders: 2, Timeout: time.Hour}, e, "a", "b", "c")
		d.Start()
		t.Cleanup(d.Close)
		time.Sleep(time.Minute) // rounds go on meanwhile, at least one a second
		synctest.Wait()
		if n := len(e.came()); n != 2 {
			t.Fatalf("%d requests sent, want 2", n)
		}
		if !dueNow(t, db) {
			t.Fatal("the third request was claimed with no sender free for it")
		}
		close(e.gate)
		synctest.Wait()
		if n, err := db.CountWebhookOutbox(context.Background()); err != nil || n != 0 || len(e.came()) != 3 {
			t.Fatalf("outbox holds %d (%v) after %d requests, want all three delivered", n, err, len(e.came()))
		}
		noErrors(t, logs)
	})
}

// A request in flight when the dispatcher closes is not a failed attempt: it
// is given back to the outbox, due at once for the next start, and nothing is
// logged as an error.
func TestRequestInFlightAtCloseGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &fakeEndpoint{gate: make(chan struct{})}
		d, db, logs := fakeTimeDispatcher(t, Options{}, e, "a")
		d.Start()
		synctest.Wait()
		if n := len(e.came()); n != 1 {
			t.Fatalf("%d requests sent, want 1", n)
		}
		d.Close()
		n, err := db.CountWebhookOutbox(context.Background())
		if due := dueNow(t, db); err != nil || n != 1 || !due {
			t.Fatalf("outbox holds %d (%v), due now: %v; want the request, given back", n, err, due)
		}
		if s := d.Stats(); s != (Stats{}) {
			t.Fatalf("stats %+v, want none counted", s)
		}
		noErrors(t, logs)
	})
}

func TestOutboxSurvivesRestart(t *testing.T) {
	down := newReceiver(t, "k", "s")
	down.failFirst.Store(1 << 30)
	path := testdb.DSN(t)
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: down.srv.URL}}}}
	db := testdb.Open(t, storage.Open, path)
	d := New(db, a, zap.NewNop(), inOrder)
	d.Start()
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "kept"})
	d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelVacated, Channel: "held-at-close"})
	d.Close() // held events are written, not lost
	if n, _ := db.CountWebhookOutbox(context.Background()); n != 2 {
		t.Fatalf("outbox holds %d, want 2", n)
	}
	db.Close()

	// The receiver recovers and the node restarts on the same file.
	down.failFirst.Store(0)
	db2 := testdb.Open(t, storage.Open, path)
	start(t, db2, a, inOrder)
	got := strings.Join(down.waitFor(2), " ")
	if got != "channel_occupied:kept channel_vacated:held-at-close" {
		t.Fatalf("after restart got %s", got)
	}
	waitOutboxEmpty(t, db2)
}

// Requests a crashed run had claimed are sent at once by the next run, not
// once the claim runs out: alone on SQLite, where the claims can only be its
// own (on a shared database they may be another node's: shareddb_test.go).
func TestClaimsOfACrashedRunAreSentAtOnce(t *testing.T) {
	r := newReceiver(t, "k", "s")
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: []storage.Webhook{{URL: r.srv.URL}}}}
	db := testdb.Open(t, storage.Open, testdb.SQLite(t))
	body := []byte(`{"time_ms":1,"events":[{"name":"channel_occupied","channel":"claimed"}]}`)
	if _, err := db.EnqueueWebhooks(context.Background(), []storage.OutboxWebhook{{AppID: "1", URL: r.srv.URL, Body: body}}, 0); err != nil {
		t.Fatal(err)
	}
	// The crashed run's claim would hold for an hour.
	if got, err := db.ClaimWebhooks(context.Background(), time.Now(), time.Hour, 10, 8); err != nil || len(got) != 1 {
		t.Fatalf("claim: %+v (%v)", got, err)
	}
	start(t, db, a, fast)
	if got := strings.Join(r.waitFor(1), " "); got != "channel_occupied:claimed" {
		t.Fatalf("got %s", got)
	}
	waitOutboxEmpty(t, db)
}

// TestEachRequestSentOnce keeps several endpoints busy with a stream of
// single-event requests and checks that none is POSTed twice: a request read
// as due while its endpoint was still busy, and delivered and deleted by that
// endpoint's sender before being looked at again, must not be sent again.
func TestEachRequestSentOnce(t *testing.T) {
	const endpoints, events = 4, 400
	var hooks []storage.Webhook
	var receivers []*receiver
	for range endpoints {
		r := newReceiver(t, "k", "s")
		receivers = append(receivers, r)
		hooks = append(hooks, storage.Webhook{URL: r.srv.URL})
	}
	a := apps{"1": {ID: "1", Key: "k", Secret: "s", Webhooks: hooks}}
	db := testdb.New(t, storage.Open)
	d := start(t, db, a, fast)
	for i := range events {
		d.Observe(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c-" + itoa(i)})
		if i%10 == 9 {
			// Keep a short backlog, so the outbox is read again and again
			// while the endpoints' senders are busy with what came before.
			receivers[i%endpoints].waitFor(i - 30)
		}
	}
	for _, r := range receivers {
		got := r.waitFor(events)
		seen := map[string]bool{}
		for _, e := range got {
			if seen[e] {
				t.Fatalf("%s was delivered twice", e)
			}
			seen[e] = true
		}
	}
	// Once the outbox is empty every delivery has been counted, duplicates
	// included.
	waitOutboxEmpty(t, db)
	for _, r := range receivers {
		if n := len(r.events()); n != events {
			t.Fatalf("endpoint received %d events, want %d", n, events)
		}
	}
}
