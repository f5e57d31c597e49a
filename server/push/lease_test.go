package push

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
)

// A page whose owner stopped renewing its lease is taken over by another
// node and sent again, and the first owner's late record of it is refused
// and counted as duplicated: node a claims the first page of a publish and
// stalls past its lease, node b lists the publish, sees the page ran out,
// takes it over (the same devices), finds no other to take over, and claims
// the rest; a's record of the
// page comes back refused, and the publish's counts and split are b's
// pages once each. The dispatchers are driven by hand, not started, and the
// lease runs out by writing it in the database: nothing waits on a clock.
func TestPageTakenOverIsSentAgain(t *testing.T) {
	ctx := t.Context()
	db, in, raw := openTestDBRaw(t)
	var devices []storage.DeviceImport
	for i := range 10 {
		devices = append(devices, storage.DeviceImport{Device: storage.Device{ID: fmt.Sprintf("apns-%02d", i), InstanceID: in.ID,
			Platform: storage.PlatformAPNs, Token: fmt.Sprintf("tok-%d", i)}, Interests: []string{"news"}})
	}
	if err := db.ImportDevices(ctx, devices); err != nil {
		t.Fatal(err)
	}
	const id = "pub-taken"
	publishAPNs(t, db, id)
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	dispatcher := func(owner string) *Dispatcher {
		return New(db, instanceMap{in.ID: &in}, log, Options{Owner: owner, PageSize: 4})
	}
	a, b := dispatcher("node-a"), dispatcher("node-b")
	// sendAll answers every delivery queued for APNs as sent, as the
	// workers would, and returns their device ids.
	sendAll := func(d *Dispatcher) []string {
		var ids []string
		for {
			select {
			case j := <-d.queues[storage.PlatformAPNs]:
				d.apply(nil, outcome{job: j, res: sent()})
				ids = append(ids, j.d.DeviceID)
			default:
				return ids
			}
		}
	}
	listed := func(d *Dispatcher) *reading {
		t.Helper()
		active := d.listPublishes(ctx)
		if len(active) != 1 || active[0].publish.ID != id {
			t.Fatalf("listed %d publishes, want %s alone", len(active), id)
		}
		return active[0]
	}

	// claimAPNs claims the next page of the publish's APNs stream.
	claimAPNs := func(d *Dispatcher, r *reading) bool {
		return d.claimPages(ctx, []*reading{r}, []*storage.PageClaim{{Publish: &r.publish, Streams: []storage.Platform{storage.PlatformAPNs}, Platforms: r.wanted}})
	}

	ra := listed(a)
	if !claimAPNs(a, ra) {
		t.Fatal("a claimed no page")
	}
	// a stalls: its lease runs out.
	if _, err := raw.ExecContext(ctx, `UPDATE publish_pages SET lease_until_ms = 0`); err != nil {
		t.Fatal(err)
	}
	rb := listed(b)
	if !rb.expired {
		t.Fatal("b's listing did not see a's page run out")
	}
	if !b.takeOver(ctx, rb) || b.counters.pagesTaken.Load() != 1 || b.counters.takenTargeted.Load() != 4 {
		t.Fatalf("b took over %d pages (%d deliveries), want a's page of 4", b.counters.pagesTaken.Load(), b.counters.takenTargeted.Load())
	}
	if !rb.expired {
		t.Fatal("b stopped looking for pages to take over after one: a dead node may have left several")
	}
	if b.takeOver(ctx, rb) || rb.expired {
		t.Fatalf("b took over another page, or still looks for one (%v), with a's one page its own", rb.expired)
	}
	if got := sendAll(b); fmt.Sprint(got) != "[apns-00 apns-01 apns-02 apns-03]" {
		t.Fatalf("b sent %v, want a's page again", got)
	}
	for claimAPNs(b, rb) {
	}
	if got := sendAll(b); fmt.Sprint(got) != "[apns-04 apns-05 apns-06 apns-07 apns-08 apns-09]" {
		t.Fatalf("b's own pages sent %v, want the devices after a's page", got)
	}
	b.write(nil)

	if got := sendAll(a); len(got) != 4 {
		t.Fatalf("a's page sent %v", got)
	}
	a.write(nil)
	if dup := a.counters.duplicates.Load(); dup != 4 {
		t.Fatalf("a counted %d duplicates, want its page of 4", dup)
	}
	p, err := db.GetPublish(ctx, in.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != storage.PublishDone || p.Targeted != 10 || p.Sent != 10 {
		t.Fatalf("publish %s, targeted %d, sent %d; want done, 10 and 10 (b's pages once each)", p.State, p.Targeted, p.Sent)
	}
	shares, err := db.PublishShares(ctx, id)
	if err != nil || len(shares) != 1 || shares[0].Node != "node-b" || shares[0].Pages != 3 || shares[0].Sent != 10 {
		t.Fatalf("shares %+v (%v), want node-b's 3 pages alone", shares, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.claimed) != 0 || ra.open != 0 {
		t.Fatalf("a still holds %d pages (%d of the publish) after recording them", len(a.claimed), ra.open)
	}
}

// A page in flight has its lease renewed every quarter of the lease
// (HERALD_PUSH_LEASE, 30 s by default: every 7.5 s, as the config README
// says), each renewal writing the time then plus the whole lease: when a
// renewal comes, three quarters of the lease are left, so a renewal or two
// that the database delays lose nothing. The renewer's ticker and the
// clock are the test's; the leases are read as the database holds them.
func TestLeasesRenewedEveryQuarter(t *testing.T) {
	ctx := t.Context()
	db, in, raw := openTestDBRaw(t)
	var devices []storage.DeviceImport
	for i := range 4 {
		devices = append(devices, storage.DeviceImport{Device: storage.Device{ID: fmt.Sprintf("apns-%02d", i), InstanceID: in.ID,
			Platform: storage.PlatformAPNs, Token: fmt.Sprintf("tok-%d", i)}, Interests: []string{"news"}})
	}
	if err := db.ImportDevices(ctx, devices); err != nil {
		t.Fatal(err)
	}
	publishAPNs(t, db, "pub-lease")
	var mu sync.Mutex
	clock := time.UnixMilli(1_800_000_000_000)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	ticks, every := make(chan time.Time), make(chan time.Duration, 1)
	d := New(db, instanceMap{in.ID: &in}, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)), Options{Owner: "node-a", PageSize: 4, now: now,
		ticker: func(e time.Duration) (<-chan time.Time, func()) { every <- e; return ticks, func() {} }})
	active := d.listPublishes(ctx)
	if len(active) != 1 || !d.claimPages(ctx, active, []*storage.PageClaim{{Publish: &active[0].publish,
		Streams: []storage.Platform{storage.PlatformAPNs}, Platforms: active[0].wanted}}) {
		t.Fatal("no page claimed")
	}
	leaseUntil := func() time.Time {
		var ms int64
		if err := raw.QueryRowContext(ctx, `SELECT lease_until_ms FROM publish_pages WHERE owner = 'node-a'`).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return time.UnixMilli(ms)
	}
	if got, want := leaseUntil(), now().Add(DefaultLease); !got.Equal(want) {
		t.Fatalf("claimed until %v, want the claim's time plus the lease, %v", got, want)
	}

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.renew(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if e := <-every; e != 7500*time.Millisecond {
		t.Fatalf("the leases are renewed every %v, want a quarter of the %v lease, 7.5 s", e, DefaultLease)
	}
	for range 3 {
		before := leaseUntil()
		mu.Lock()
		clock = clock.Add(7500 * time.Millisecond)
		mu.Unlock()
		ticks <- now()
		wait.Until(t, "the lease renewed at the tick", func() bool { return leaseUntil().Equal(now().Add(DefaultLease)) })
		if left := before.Sub(now()); left != 22500*time.Millisecond {
			t.Fatalf("the renewal found %v of the lease left, want three quarters of it, 22.5 s", left)
		}
	}
}
