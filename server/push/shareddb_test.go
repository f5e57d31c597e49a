package push

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
	"github.com/heraldrt/herald/storage/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// A dispatcher's owner (the name in its publish leases) is the one given;
// without one it is "local" alone on SQLite, where a restarted process takes
// its own leases back, and a random one per process on a shared database,
// where two nodes must never share one.
func TestDispatcherOwner(t *testing.T) {
	db, in := openTestDB(t, storage.Instance{})
	instances := instanceMap{in.ID: &in}
	if o := New(db, instances, zap.NewNop(), Options{Owner: "herald-1"}).opts.Owner; o != "herald-1" {
		t.Fatalf("the given owner became %q", o)
	}
	if o := New(db, instances, zap.NewNop(), Options{}).opts.Owner; o != "local" {
		t.Fatalf("alone on SQLite the owner is %q, want local", o)
	}
	shared := testdb.Open(t, storage.Open, testpg.Start(t))
	a, b := New(shared, instances, zap.NewNop(), Options{}).opts.Owner, New(shared, instances, zap.NewNop(), Options{}).opts.Owner
	if !strings.HasPrefix(a, "node-") || len(a) != len("node-")+12 || a == b {
		t.Fatalf("on a shared database two dispatchers are %q and %q: want two distinct node-<12 characters>", a, b)
	}
}

// A claimed retry stays this node's for at least 5 minutes, and for four
// send timeouts when those are longer: it must wait in a queue and be sent
// before another node may take it.
func TestRetryLease(t *testing.T) {
	db, in := openTestDB(t, storage.Instance{})
	instances := instanceMap{in.ID: &in}
	for _, c := range []struct {
		send, want time.Duration
	}{{0, 5 * time.Minute}, {time.Minute, 5 * time.Minute}, {2 * time.Minute, 8 * time.Minute}} {
		if got := New(db, instances, zap.NewNop(), Options{SendTimeout: c.send}).retryLease(); got != c.want {
			t.Errorf("send timeout %v: retry lease %v, want %v", c.send, got, c.want)
		}
	}
}

// A publish webhook being sent stays claimed for webhookLease, 2 minutes:
// meanwhile no other node sends it (after a crash, another does once the
// claim has run out).
func TestPublishWebhookClaimedWhileSent(t *testing.T) {
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case held <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	send := func(context.Context, storage.Delivery, *Prepared) Result { return sent() }
	db, d := dispatchTo(t, Options{}, zap.NewNop(), send, "apns-1")
	t.Cleanup(func() { close(release) }) // before the dispatcher's Close
	if _, err := db.CreatePublish(t.Context(), storage.Publish{ID: "pub-held-hook", InstanceID: testInstance, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"apns":{"aps":{"alert":"hi"}}}`), WebhookURL: srv.URL}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	d.Notify()
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("no publish webhook request within a minute")
	}
	// Another node looking almost 2 minutes later may not take it.
	other, err := db.ClaimPublishWebhooks(t.Context(), time.Now().Add(110*time.Second), time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range other {
		if w.Event == storage.PublishStarted {
			t.Fatalf("another node could take the publish_started webhook in flight: %+v", w)
		}
	}
}
