package storage

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// seedMixed imports 300 devices spread over the three platforms: device i is
// subscribed to "even" or "odd", every third also to "three", and device i
// belongs to user "user-<i%10>" when i < 30.
func seedMixed(t *testing.T, db *DB) []Device {
	t.Helper()
	var batch []DeviceImport
	var all []Device
	for i := range 300 {
		p := []Platform{PlatformAPNs, PlatformFCM, PlatformWeb}[i%3]
		d := Device{ID: fmt.Sprintf("%s-%04d", p, i), InstanceID: instanceID, Platform: p, Token: fmt.Sprintf("tok-%d", i), BundleIdentifier: "com.example"}
		if i < 30 {
			d.UserID = fmt.Sprintf("user-%d", i%10)
		}
		interests := []string{"odd"}
		if i%2 == 0 {
			interests = []string{"even"}
		}
		if i%3 == 0 {
			interests = append(interests, "three")
		}
		batch = append(batch, DeviceImport{Device: d, Interests: interests})
		all = append(all, d)
	}
	checkErr(t, "ImportDevices", db.ImportDevices(t.Context(), batch), nil)
	return all
}

func TestImportDevicesNeedsPlatformPrefixedIDs(t *testing.T) {
	db := openDeviceDB(t)
	err := db.ImportDevices(t.Context(), []DeviceImport{{Device: Device{ID: "web-1", InstanceID: instanceID, Platform: PlatformFCM, Token: "t"}}})
	if err == nil {
		t.Fatal("an fcm device with id web-1 was imported")
	}
	if _, _, err := db.RegisterDevice(t.Context(), Device{ID: "x-1", InstanceID: instanceID, Platform: PlatformFCM, Token: "t"}); err == nil {
		t.Fatal("an fcm device with id x-1 was registered")
	}
}

func TestPublishTargetStreams(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	all := seedMixed(t, db)
	p, err := db.CreatePublish(ctx, Publish{ID: "pub-i", InstanceID: instanceID, TargetKind: TargetInterests,
		Targets: []string{"three", "even", "missing"}, Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	every := map[Platform]bool{PlatformAPNs: true, PlatformFCM: true, PlatformWeb: true}

	for _, platform := range []Platform{PlatformAPNs, PlatformFCM, PlatformWeb} {
		var want, got []string
		for i, d := range all {
			if d.Platform == platform && (i%2 == 0 || i%3 == 0) {
				want = append(want, d.ID)
			}
		}
		cursor := ""
		for pages := 0; ; pages++ {
			page, next, last, err := db.PublishTargets(ctx, p, platform, every, cursor, 16)
			checkErr(t, "PublishTargets", err, nil)
			for _, d := range page {
				if d.Platform != platform || d.PublishID != "pub-i" || d.Token == "" || d.BundleIdentifier != "com.example" {
					t.Fatalf("delivery %+v", d)
				}
				got = append(got, d.DeviceID)
			}
			cursor = next
			if last {
				break
			}
			if pages > 100 {
				t.Fatal("the stream does not end")
			}
		}
		check(t, string(platform)+" stream", got, want)
	}
	// An interest nobody has: an empty last page, the cursor left as it was.
	none, err := db.CreatePublish(ctx, Publish{ID: "pub-none", InstanceID: instanceID, TargetKind: TargetInterests,
		Targets: []string{"missing"}, Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	empty, at, end, err := db.PublishTargets(ctx, none, PlatformFCM, every, "fcm-0005", 16)
	checkErr(t, "PublishTargets of an interest nobody has", err, nil)
	check(t, "page of an interest nobody has", []any{len(empty), at, end}, []any{0, "fcm-0005", true})

	u, err := db.CreatePublish(ctx, Publish{ID: "pub-u", InstanceID: instanceID, TargetKind: TargetUsers,
		Targets: []string{"user-3", "user-1", "nobody"}, Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	page, next, last, err := db.PublishTargets(ctx, u, "", map[Platform]bool{PlatformFCM: true}, "", 10_000)
	checkErr(t, "PublishTargets users", err, nil)
	var users []string
	for _, d := range page {
		users = append(users, d.UserID+"/"+d.DeviceID)
	}
	slices.Sort(users)
	// user-1: devices 1, 11, 21 (fcm: 1); user-3: 3, 13, 23 (fcm: 13).
	check(t, "user page", users, []string{"user-1/fcm-0001", "user-3/fcm-0013"})
	check(t, "user cursor", []any{next, last}, []any{"3", true})
}

func TestCompletePages(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	all := seedMixed(t, db)
	p, err := db.CreatePublish(ctx, Publish{ID: "pub-c", InstanceID: instanceID, TargetKind: TargetInterests,
		Targets: []string{"odd"}, Payload: json.RawMessage(`{"fcm":{}}`), WebhookURL: "http://hooks.test/x"}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	p, err = db.StartPublish(ctx, p)
	checkErr(t, "StartPublish", err, nil)
	check(t, "state", p.State, PublishDelivering)
	p, err = db.StartPublish(ctx, p) // started already: nothing stored twice
	checkErr(t, "StartPublish again", err, nil)

	dead := Delivery{PublishID: p.ID, InstanceID: instanceID, DeviceID: all[1].ID, Platform: all[1].Platform, Token: all[1].Token}
	later := Delivery{PublishID: p.ID, InstanceID: instanceID, DeviceID: all[3].ID, Platform: all[3].Platform, Token: all[3].Token, Attempts: 1}
	finished, _, err := db.CompletePages(ctx, []PageResult{
		{PublishID: p.ID, Stream: PlatformAPNs, Cursor: "apns-0099", Targeted: 10, Sent: 9, Failed: 1, Dead: []Delivery{dead}},
		{PublishID: p.ID, Stream: PlatformFCM, Cursor: "fcm-0100", Targeted: 5, Sent: 4, Later: []LaterDelivery{{Delivery: later, At: time.Now()}}},
		{PublishID: "deleted-meanwhile", Stream: PlatformFCM, Cursor: "fcm-0001", Targeted: 1, Sent: 1},
	})
	checkErr(t, "CompletePages", err, nil)
	check(t, "finished", len(finished), 0)
	got, err := db.GetPublish(ctx, instanceID, p.ID)
	checkErr(t, "GetPublish", err, nil)
	check(t, "counts", []int{got.Targeted, got.Sent, got.Failed}, []int{15, 13, 1})
	check(t, "stream cursors", []string{got.StreamCursor(PlatformAPNs), got.StreamCursor(PlatformFCM), got.StreamCursor(PlatformWeb)},
		[]string{"apns-0099", "fcm-0100", ""})
	if _, err := db.GetDevice(ctx, instanceID, dead.Platform, dead.DeviceID); err == nil {
		t.Fatal("the device with a dead token is still there")
	}
	pending, err := db.PendingDeliveries(ctx)
	checkErr(t, "PendingDeliveries", err, nil)
	check(t, "stored for later", pending, 1)

	// The last page resolves the publish, but a delivery is still stored.
	finished, _, err = db.CompletePages(ctx, []PageResult{{PublishID: p.ID, Stream: PlatformWeb, Cursor: "web-0299", Resolved: true, Targeted: 1, Sent: 1}})
	checkErr(t, "CompletePages last", err, nil)
	check(t, "finished with a stored delivery", len(finished), 0)
	claimed, err := db.ClaimDeliveries(ctx, later.Platform, time.Now().Add(time.Second), time.Minute, 10)
	checkErr(t, "ClaimDeliveries", err, nil)
	check(t, "claimed", len(claimed), 1)
	check(t, "attempts kept", claimed[0].Attempts, 1)
	finished, err = db.CompleteDeliveries(ctx, []DeliveryResult{{Delivery: claimed[0], Outcome: DeliverySent}})
	checkErr(t, "CompleteDeliveries", err, nil)
	check(t, "finished", len(finished), 1)
	check(t, "final", []any{finished[0].State, finished[0].Targeted, finished[0].Sent, finished[0].Failed}, []any{PublishDone, 16, 15, 1})
	stored, err := db.ClaimPublishWebhooks(ctx, time.Now().Add(time.Hour), time.Minute, 10)
	checkErr(t, "ClaimPublishWebhooks", err, nil)
	var hooks []PublishEvent
	for _, w := range stored {
		hooks = append(hooks, w.Event)
	}
	check(t, "webhooks", hooks, []PublishEvent{PublishStarted, PublishFinished})
	// Each holds the publish as the event left it.
	started, done := stored[0], stored[1]
	check(t, "started", []any{started.InstanceID, started.URL, started.PublishID, started.State, started.Targeted, started.Sent, started.Failed},
		[]any{instanceID, "http://hooks.test/x", p.ID, PublishDelivering, 0, 0, 0})
	check(t, "finished", []any{done.PublishID, done.State, done.Targeted, done.Sent, done.Failed, done.At},
		[]any{p.ID, PublishDone, 16, 15, 1, finished[0].FinishedAt})
}

func TestLegacySingleCursor(t *testing.T) {
	p := Publish{TargetKind: TargetInterests, Cursor: "fcm-0100"}
	check(t, "each stream from the single cursor", p.StreamCursor(PlatformWeb), "fcm-0100")
	c, err := advanceCursor(TargetInterests, p.Cursor, PlatformAPNs, "apns-0200")
	checkErr(t, "advanceCursor", err, nil)
	p.Cursor = c
	check(t, "advanced", []string{p.StreamCursor(PlatformAPNs), p.StreamCursor(PlatformFCM), p.StreamCursor(PlatformWeb)},
		[]string{"apns-0200", "fcm-0100", "fcm-0100"})
	c, err = advanceCursor(TargetUsers, "4", "", "8")
	checkErr(t, "advanceCursor users", err, nil)
	check(t, "users cursor", c, "8")
}

// Two nodes claiming pages of one publish at once get each target in
// exactly one page, every stream's pages in turn; the publish is resolved
// only once the last page of every stream was claimed and every page
// recorded. A page whose owner stopped renewing its lease is taken over by
// the other node under the next epoch, with the same targets; the first
// owner's late record of it is refused and counted as duplicated, and the
// publish's split between the nodes counts each page once, for the node
// that recorded it.
func TestClaimPages(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	all := seedMixed(t, db)
	p, err := db.CreatePublish(ctx, Publish{ID: "pub-pages", InstanceID: instanceID, TargetKind: TargetInterests,
		Targets: []string{"even"}, Payload: json.RawMessage(`{"apns":{},"fcm":{},"web":{}}`)}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	streams := []Platform{PlatformAPNs, PlatformFCM, PlatformWeb}
	every := map[Platform]bool{PlatformAPNs: true, PlatformFCM: true, PlatformWeb: true}
	t0 := time.Now()
	claim := func(owner string, s Platform, at time.Duration) *Page {
		t.Helper()
		pg, err := db.ClaimPage(ctx, p, s, every, owner, t0.Add(at), time.Minute, 16)
		checkErr(t, "ClaimPage "+owner, err, nil)
		return pg
	}
	record := func(pg *Page, owner string) (finished []Publish, dup int) {
		t.Helper()
		finished, dup, err := db.CompletePages(ctx, []PageResult{{PublishID: p.ID, Page: pg.ID, Owner: owner, Epoch: pg.Epoch,
			Streams: streams, Targeted: len(pg.Targets), Sent: len(pg.Targets)}})
		checkErr(t, "CompletePages "+owner, err, nil)
		return finished, dup
	}
	resolved := func() bool {
		t.Helper()
		got, err := db.GetPublish(ctx, instanceID, p.ID)
		checkErr(t, "GetPublish", err, nil)
		return got.Resolved
	}

	seen, pages := map[string]int{}, 0
	var held *Page // a's first page, never recorded by a
	for _, s := range streams {
		last := false
		for turn := 0; ; turn++ {
			owner := []string{"node-a", "node-b"}[turn%2]
			pg := claim(owner, s, 0)
			if pg == nil {
				if turn == 0 || !last {
					t.Fatalf("stream %s ended after %d pages, the last not marked so", s, turn)
				}
				break
			}
			if last {
				t.Fatalf("stream %s has a page after the one marked last", s)
			}
			last = pg.Last
			check(t, "stream", pg.Stream, s)
			pages++
			for _, d := range pg.Targets {
				seen[d.DeviceID]++
			}
			if held == nil && owner == "node-a" {
				held = pg
				continue
			}
			if finished, dup := record(pg, owner); len(finished) != 0 || dup != 0 {
				t.Fatalf("page %d of %s: finished %d, %d duplicated", pg.ID, owner, len(finished), dup)
			}
		}
	}
	want := 0
	for i, d := range all {
		if i%2 == 0 {
			want++
			if seen[d.ID] != 1 {
				t.Fatalf("%s is in %d pages, want one", d.ID, seen[d.ID])
			}
		}
	}
	check(t, "devices in pages", len(seen), want)
	if resolved() {
		t.Fatal("resolved with a's first page open")
	}

	// a renews its page; b finds nothing to take over until a stops.
	n, err := db.RenewPages(ctx, "node-a", []int64{held.ID}, t0.Add(5*time.Minute))
	checkErr(t, "RenewPages", err, nil)
	check(t, "renewed", n, 1)
	check(t, "taken over while renewed", claim("node-b", PlatformAPNs, 2*time.Minute) == nil, true)
	// Only TakeOverPage takes a page over: ClaimPages claims next pages,
	// and every one is claimed.
	next, err := db.ClaimPages(ctx, &p, streams, every, "node-b", t0.Add(6*time.Minute), time.Minute, 16)
	checkErr(t, "ClaimPages", err, nil)
	check(t, "next pages after the last", next, []*Page{nil, nil, nil})
	taken := claim("node-b", PlatformAPNs, 6*time.Minute)
	if taken == nil || taken.ID != held.ID || !taken.TakenOver || taken.Epoch != 2 || taken.Owner != "node-b" {
		t.Fatalf("after a's lease ran out b claimed %+v, want a's page %d under epoch 2", taken, held.ID)
	}
	check(t, "targets of the page taken over", deviceIDs(taken.Targets), deviceIDs(held.Targets))
	if n, err := db.RenewPages(ctx, "node-a", []int64{held.ID}, t0.Add(10*time.Minute)); err != nil || n != 0 {
		t.Fatalf("a renewed %d pages it lost (%v)", n, err)
	}
	if finished, dup := record(held, "node-a"); len(finished) != 0 || dup != len(held.Targets) {
		t.Fatalf("a's late record: finished %d, %d duplicated; want none and %d", len(finished), dup, len(held.Targets))
	}
	if resolved() {
		t.Fatal("resolved by a page that was taken over")
	}
	finished, dup := record(taken, "node-b")
	if len(finished) != 1 || dup != 0 || finished[0].Targeted != want || finished[0].Sent != want {
		t.Fatalf("b's record of the last page: finished %+v, %d duplicated; want the publish done with %d sent", finished, dup, want)
	}

	shares, err := db.PublishShares(ctx, p.ID)
	checkErr(t, "PublishShares", err, nil)
	if len(shares) != 2 || shares[0].Node != "node-a" || shares[1].Node != "node-b" || shares[0].Targeted+shares[1].Targeted != want ||
		shares[0].Pages+shares[1].Pages != pages || shares[0].Targeted == 0 {
		t.Fatalf("shares %+v, want a's and b's, %d deliveries in all", shares, want)
	}
	t.Logf("shares %+v", shares)
}

// A claim made with a publish read before other claims (its cursor behind
// the stored one) claims the page after the stored cursor, not one claimed
// already, and leaves the publish as stored after it; the first claim
// starts the publish (publish_started once), the later ones do not.
func TestClaimPagesFromAStaleCursor(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	seedMixed(t, db)
	p, err := db.CreatePublish(ctx, Publish{ID: "pub-stale", InstanceID: instanceID, TargetKind: TargetInterests,
		Targets: []string{"even"}, Payload: json.RawMessage(`{"apns":{}}`), WebhookURL: "https://example.com/hook"}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	apns := map[Platform]bool{PlatformAPNs: true}
	claim := func(p *Publish) *Page {
		t.Helper()
		pages, err := db.ClaimPages(ctx, p, []Platform{PlatformAPNs}, apns, "node-a", time.Now(), time.Minute, 4)
		checkErr(t, "ClaimPages", err, nil)
		return pages[0]
	}
	first := claim(&p)
	check(t, "state after the first claim", p.State, PublishDelivering)
	stale := p // read after the first claim, before the second
	second := claim(&p)
	third := claim(&stale)
	if first == nil || second == nil || third == nil {
		t.Fatalf("pages %v, %v, %v; want three", first, second, third)
	}
	check(t, "second page after the first", second.After, first.End)
	check(t, "page claimed from a stale cursor", third.After, second.End)
	check(t, "stale publish's cursor after its claim", stale.Cursor, storedCursor(t, db, p.ID))
	hooks, err := db.ClaimPublishWebhooks(ctx, time.Now(), time.Minute, 10)
	checkErr(t, "ClaimPublishWebhooks", err, nil)
	if len(hooks) != 1 || hooks[0].Event != PublishStarted {
		t.Fatalf("webhooks %+v, want publish_started once", hooks)
	}
}

// A publish to users none of whom has a device is started by its first
// claim all the same, which ends its stream with an empty page.
func TestClaimStartsAPublishWithoutTargets(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	p, err := db.CreatePublish(ctx, Publish{ID: "pub-nobody", InstanceID: instanceID, TargetKind: TargetUsers,
		Targets: []string{"nobody"}, Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	pages, err := db.ClaimPages(ctx, &p, []Platform{""}, map[Platform]bool{PlatformFCM: true}, "node-a", time.Now(), time.Minute, 16)
	checkErr(t, "ClaimPages", err, nil)
	if len(pages) != 1 || pages[0] == nil || len(pages[0].Targets) != 0 || !pages[0].Last {
		t.Fatalf("pages %+v, want one empty last page", pages)
	}
	stored, err := db.GetPublish(ctx, instanceID, p.ID)
	checkErr(t, "GetPublish", err, nil)
	check(t, "states after the claim", []PublishState{p.State, stored.State}, []PublishState{PublishDelivering, PublishDelivering})
}

// One claim takes the next pages of several publishes in one write
// transaction, in the claims' order while the gateways have room: a stream
// without room for a full page is left out (no page, not ended, its
// publish not started), and a publish deleted or resolved meanwhile ends
// its streams without holding up the others.
func TestClaimPagesOfSeveralPublishes(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	seedMixed(t, db)
	publish := func(id, payload string) *Publish {
		t.Helper()
		p, err := db.CreatePublish(ctx, Publish{ID: id, InstanceID: instanceID, TargetKind: TargetInterests,
			Targets: []string{"even"}, Payload: json.RawMessage(payload)}, 0, time.Time{})
		checkErr(t, "CreatePublish", err, nil)
		return &p
	}
	both := map[Platform]bool{PlatformAPNs: true, PlatformFCM: true}
	first, second := publish("pub-first", `{"apns":{},"fcm":{}}`), publish("pub-second", `{"apns":{},"fcm":{}}`)
	gone, third := publish("pub-gone", `{"apns":{}}`), publish("pub-third", `{"fcm":{}}`)
	_, err := db.writer.ExecContext(ctx, `DELETE FROM publishes WHERE id = 'pub-gone'`)
	checkErr(t, "delete a publish", err, nil)
	resolved := publish("pub-resolved", `{"apns":{}}`)
	_, err = db.writer.ExecContext(ctx, `UPDATE publishes SET resolved = ? WHERE id = 'pub-resolved'`, true)
	checkErr(t, "resolve a publish", err, nil)
	claims := []*PageClaim{
		{Publish: first, Streams: []Platform{PlatformAPNs, PlatformFCM}, Platforms: both},
		{Publish: second, Streams: []Platform{PlatformAPNs, PlatformFCM}, Platforms: both},
		{Publish: gone, Streams: []Platform{PlatformAPNs}, Platforms: both},
		{Publish: resolved, Streams: []Platform{PlatformAPNs}, Platforms: both},
		{Publish: third, Streams: []Platform{PlatformFCM}, Platforms: both},
	}
	var writes atomic.Int64
	db.ObserveTransactions(func(kind string, _ time.Duration) {
		if kind == "write" {
			writes.Add(1)
		}
	})
	room := map[Platform]int{PlatformAPNs: 20, PlatformFCM: 7}
	checkErr(t, "ClaimPagesOf", db.ClaimPagesOf(ctx, claims, room, "node-a", time.Now(), time.Minute, 4), nil)
	check(t, "write transactions", writes.Load(), int64(1))
	check(t, "room after the claim", room, map[Platform]int{PlatformAPNs: 20, PlatformFCM: 7})
	sizes := func(c *PageClaim) []int {
		var out []int
		for _, pg := range c.Pages {
			if pg == nil {
				out = append(out, -1)
			} else {
				out = append(out, len(pg.Targets))
			}
		}
		return out
	}
	// APNs has room for five pages of 4 (on SQLite, where claims are read
	// ahead, the publishes gone and resolved meanwhile take room in this
	// round too), FCM for one (3 < 4 after it).
	check(t, "first's pages", sizes(claims[0]), []int{4, 4})
	check(t, "first ended", claims[0].Ended, []bool{false, false})
	check(t, "second's pages", sizes(claims[1]), []int{4, -1})
	check(t, "second ended", claims[1].Ended, []bool{false, false})
	check(t, "gone's pages", sizes(claims[2]), []int{-1})
	check(t, "gone ended", claims[2].Ended, []bool{true})
	check(t, "resolved's pages", sizes(claims[3]), []int{-1})
	check(t, "resolved ended", claims[3].Ended, []bool{true})
	check(t, "third's pages", sizes(claims[4]), []int{-1})
	check(t, "third ended", claims[4].Ended, []bool{false})
	check(t, "states", []PublishState{first.State, second.State, third.State},
		[]PublishState{PublishDelivering, PublishDelivering, PublishAccepted})
	check(t, "first's cursor", first.Cursor, storedCursor(t, db, first.ID))
	check(t, "second's cursor", second.Cursor, storedCursor(t, db, second.ID))
	check(t, "third's cursor", storedCursor(t, db, third.ID), "")
}

// A node restarted under its name releases the pages its earlier run held
// open, and only those: they are taken over at once, lease or not, and
// pages recorded or of another owner are left alone.
func TestReleasePages(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	seedMixed(t, db)
	p, err := db.CreatePublish(ctx, Publish{ID: "pub-release", InstanceID: instanceID, TargetKind: TargetInterests,
		Targets: []string{"even"}, Payload: json.RawMessage(`{"apns":{}}`)}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	apns := map[Platform]bool{PlatformAPNs: true}
	t0 := time.Now()
	claim := func(owner string) *Page {
		t.Helper()
		pages, err := db.ClaimPages(ctx, &p, []Platform{PlatformAPNs}, apns, owner, t0, time.Hour, 4)
		checkErr(t, "ClaimPages", err, nil)
		return pages[0]
	}
	recorded, held, others := claim("node-a"), claim("node-a"), claim("node-b")
	_, _, err = db.CompletePages(ctx, []PageResult{{PublishID: p.ID, Page: recorded.ID, Owner: "node-a", Epoch: 1,
		Streams: []Platform{PlatformAPNs}, Targeted: len(recorded.Targets)}})
	checkErr(t, "CompletePages", err, nil)
	n, err := db.ReleasePages(ctx, "node-a")
	checkErr(t, "ReleasePages", err, nil)
	check(t, "pages released", n, 1)
	taken, err := db.TakeOverPage(ctx, p, apns, "node-a", t0, time.Hour, 4)
	checkErr(t, "TakeOverPage", err, nil)
	if taken == nil || taken.ID != held.ID || taken.Epoch != 2 {
		t.Fatalf("took over %+v, want the released page %d under epoch 2", taken, held.ID)
	}
	if again, err := db.TakeOverPage(ctx, p, apns, "node-a", t0, time.Hour, 4); err != nil || again != nil {
		t.Fatalf("took over %+v (%v) too; node-b's page %d is still held", again, err, others.ID)
	}
}

// storedCursor is the stored cursor of the publish.
func storedCursor(t *testing.T, db *DB, id string) string {
	t.Helper()
	got, err := db.GetPublish(t.Context(), instanceID, id)
	checkErr(t, "GetPublish", err, nil)
	return got.Cursor
}

// A publish to users is split into pages of users, each claimed once, and
// one to no device at all is resolved by its one empty page.
func TestClaimPagesOfUsers(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	seedMixed(t, db)
	fcm := map[Platform]bool{PlatformFCM: true}
	for _, c := range []struct {
		users []string
		pages int
		want  []string
	}{
		{[]string{"user-1", "user-3", "nobody"}, 3, []string{"fcm-0001", "fcm-0013"}},
		{[]string{"nobody"}, 1, nil},
	} {
		p, err := db.CreatePublish(ctx, Publish{ID: "pub-" + c.users[0], InstanceID: instanceID, TargetKind: TargetUsers,
			Targets: c.users, Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{})
		checkErr(t, "CreatePublish", err, nil)
		var got []string
		pages := 0
		var finished []Publish
		for {
			pg, err := db.ClaimPage(ctx, p, "", fcm, "node-a", time.Now(), time.Minute, MaxUserDevices)
			checkErr(t, "ClaimPage", err, nil)
			if pg == nil {
				break
			}
			pages++
			got = append(got, deviceIDs(pg.Targets)...)
			finished, _, err = db.CompletePages(ctx, []PageResult{{PublishID: p.ID, Page: pg.ID, Owner: "node-a", Epoch: pg.Epoch,
				Streams: []Platform{""}, Targeted: len(pg.Targets)}})
			checkErr(t, "CompletePages", err, nil)
		}
		check(t, "pages of "+c.users[0], pages, c.pages)
		check(t, "devices of "+c.users[0], got, c.want)
		if len(finished) != 1 {
			t.Fatalf("publish to %v not done after its last page", c.users)
		}
	}
}

func deviceIDs(ds []Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.DeviceID)
	}
	return out
}

func TestDeliveryClaimsRunOut(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	_, err := db.writer.ExecContext(ctx, `INSERT INTO deliveries (publish_id, instance_id, device_id, platform, token,
		bundle_identifier, user_id, attempts, claimed, next_attempt_at_ms) VALUES ('pub-x', ?, 'fcm-1', 'fcm', 'tok', '', '', 1, 0, 0)`, instanceID)
	checkErr(t, "insert", err, nil)
	t0 := time.Now()
	got, err := db.ClaimDeliveries(ctx, PlatformFCM, t0, time.Minute, 10)
	checkErr(t, "ClaimDeliveries", err, nil)
	check(t, "claimed by the first node", len(got), 1)
	due, ok, err := db.NextDeliveryDue(ctx)
	checkErr(t, "NextDeliveryDue", err, nil)
	check(t, "next due: the claim's end", []any{due, ok}, []any{fromMillis(t0.Add(time.Minute).UnixMilli()), true})
	got, err = db.ClaimDeliveries(ctx, PlatformFCM, t0.Add(30*time.Second), time.Minute, 10)
	checkErr(t, "ClaimDeliveries during the claim", err, nil)
	check(t, "claimed again during the claim", len(got), 0)
	// The first node died: its claim runs out and the delivery is claimed
	// again, with its attempts.
	got, err = db.ClaimDeliveries(ctx, PlatformFCM, t0.Add(61*time.Second), time.Minute, 10)
	checkErr(t, "ClaimDeliveries after the claim", err, nil)
	if len(got) != 1 || got[0].Attempts != 1 {
		t.Fatalf("after the claim ran out: %+v", got)
	}
}

// A retried delivery that ends in a dead token deletes its device; one
// sent or failed keeps it.
func TestCompleteDeliveriesPrunesOnlyDeadTokens(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	outcomes := []DeliveryOutcome{DeliverySent, DeliveryFailed, DeliveryDeadToken}
	for i := range outcomes {
		d := registerTestDevice(t, db, PlatformFCM, fmt.Sprint("retried-", i))
		_, err := db.writer.ExecContext(ctx, `INSERT INTO deliveries (publish_id, instance_id, device_id, platform, token,
			bundle_identifier, user_id, attempts, claimed, next_attempt_at_ms) VALUES ('pub-x', ?, ?, 'fcm', ?, '', '', 1, 0, 0)`,
			instanceID, d.ID, d.Token)
		checkErr(t, "insert", err, nil)
	}
	claimed, err := db.ClaimDeliveries(ctx, PlatformFCM, time.Now(), time.Minute, 10)
	checkErr(t, "ClaimDeliveries", err, nil)
	slices.SortFunc(claimed, func(a, b Delivery) int { return strings.Compare(a.Token, b.Token) })
	var results []DeliveryResult
	for i, d := range claimed {
		results = append(results, DeliveryResult{Delivery: d, Outcome: outcomes[i]})
	}
	_, err = db.CompleteDeliveries(ctx, results)
	checkErr(t, "CompleteDeliveries", err, nil)
	var kept []string
	for _, d := range claimed {
		if _, err := db.GetDevice(ctx, instanceID, PlatformFCM, d.DeviceID); err == nil {
			kept = append(kept, d.Token)
		}
	}
	check(t, "devices kept", kept, []string{"retried-0", "retried-1"})
}

func TestPublishWebhookClaims(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	p, err := db.CreatePublish(ctx, Publish{ID: "pub-w", InstanceID: instanceID, TargetKind: TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"fcm":{}}`), WebhookURL: "http://hooks.test/x"}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	_, err = db.StartPublish(ctx, p) // stores publish_started
	checkErr(t, "StartPublish", err, nil)
	t0 := time.Now().Add(time.Second)
	first, err := db.ClaimPublishWebhooks(ctx, t0, time.Minute, 10)
	checkErr(t, "ClaimPublishWebhooks", err, nil)
	check(t, "claimed by the first node", len(first), 1)
	second, err := db.ClaimPublishWebhooks(ctx, t0, time.Minute, 10)
	checkErr(t, "ClaimPublishWebhooks again", err, nil)
	check(t, "claimed by another node meanwhile", len(second), 0)
	// The first node died before sending it: once the claim ran out,
	// another node sends it.
	later, err := db.ClaimPublishWebhooks(ctx, t0.Add(61*time.Second), time.Minute, 10)
	checkErr(t, "ClaimPublishWebhooks after the claim", err, nil)
	if len(later) != 1 || later[0].ID != first[0].ID {
		t.Fatalf("after the claim ran out: %+v", later)
	}
}
