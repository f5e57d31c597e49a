package storage

import (
	"encoding/json"
	"fmt"
	"slices"
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

func TestPublishLeases(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	var ids []string
	for i := range 3 {
		p, err := db.CreatePublish(ctx, Publish{ID: fmt.Sprintf("pub-l%d", i), InstanceID: instanceID, TargetKind: TargetInterests,
			Targets: []string{"news"}, Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{})
		checkErr(t, "CreatePublish", err, nil)
		ids = append(ids, p.ID)
	}
	idsOf := func(ps []Publish) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.ID)
		}
		return out
	}
	t0 := time.Now()
	a, err := db.ClaimPublishes(ctx, "node-a", t0, time.Minute, 2)
	checkErr(t, "ClaimPublishes a", err, nil)
	check(t, "node a's, oldest first", idsOf(a), ids[:2])
	b, err := db.ClaimPublishes(ctx, "node-b", t0, time.Minute, 10)
	checkErr(t, "ClaimPublishes b", err, nil)
	check(t, "node b gets what a does not hold", idsOf(b), ids[2:])
	// a renews its own; b's stays b's.
	a, err = db.ClaimPublishes(ctx, "node-a", t0.Add(30*time.Second), time.Minute, 10)
	checkErr(t, "ClaimPublishes a again", err, nil)
	check(t, "node a renews", idsOf(a), ids[:2])

	// a stops renewing (it died): after its lease, b takes its publishes
	// over, from the recorded cursor.
	page := PageResult{PublishID: ids[0], Owner: "node-a", LeaseEpoch: a[0].LeaseEpoch, Stream: PlatformFCM, Cursor: "fcm-0001", Targeted: 3, Sent: 3}
	_, dup, err := db.CompletePages(ctx, []PageResult{page})
	checkErr(t, "CompletePages by the owner", err, nil)
	check(t, "duplicated by the owner", dup, 0)
	b, err = db.ClaimPublishes(ctx, "node-b", t0.Add(91*time.Second), time.Minute, 10)
	checkErr(t, "ClaimPublishes b after a's lease", err, nil)
	check(t, "node b took over", idsOf(b), ids)
	check(t, "from the cursor a recorded", b[0].StreamCursor(PlatformFCM), "fcm-0001")

	// A page a was still sending is not recorded: b sends it again.
	late := PageResult{PublishID: ids[0], Owner: "node-a", LeaseEpoch: a[0].LeaseEpoch, Stream: PlatformFCM, Cursor: "fcm-0002", Targeted: 4, Sent: 4}
	_, dup, err = db.CompletePages(ctx, []PageResult{late})
	checkErr(t, "CompletePages after losing the lease", err, nil)
	check(t, "duplicated deliveries", dup, 4)
	got, err := db.GetPublish(ctx, instanceID, ids[0])
	checkErr(t, "GetPublish", err, nil)
	check(t, "cursor and counts untouched by the lost page", []any{got.StreamCursor(PlatformFCM), got.Targeted, got.Sent}, []any{"fcm-0001", 3, 3})

	// A node's own lease comes first: older publishes of a node that died
	// do not crowd it out of a short listing.
	_, err = db.CreatePublish(ctx, Publish{ID: "pub-l3", InstanceID: instanceID, TargetKind: TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	c, err := db.ClaimPublishes(ctx, "node-c", t0.Add(95*time.Second), time.Minute, 10)
	checkErr(t, "ClaimPublishes c", err, nil)
	check(t, "node c gets the one b does not hold", idsOf(c), []string{"pub-l3"})
	c, err = db.ClaimPublishes(ctx, "node-c", t0.Add(200*time.Second), time.Minute, 1) // b's ran out
	checkErr(t, "ClaimPublishes c after b's leases", err, nil)
	check(t, "node c renews its own first", idsOf(c), []string{"pub-l3"})
}

// A lease that changes hands gets a new epoch, and a page is recorded only
// under the owner and epoch it was read with: node a reads a page, stalls,
// node b takes the publish over and records pages past a's, stalls in turn,
// and a takes the publish back. The page a read before b held the publish
// carries a's name but not its epoch: it is refused (its deliveries counted
// twice, the cursor left where b recorded it, not moved back), while a page
// a reads in its second tenure is recorded. A holder's renewal keeps the
// epoch, even of a lease that ran out meanwhile without another taking it.
func TestPublishLeaseEpochs(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	p, err := db.CreatePublish(ctx, Publish{ID: "pub-e", InstanceID: instanceID, TargetKind: TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	check(t, "epoch of a publish never leased", p.LeaseEpoch, int64(0))
	t0 := time.Now()
	claim := func(owner string, at time.Duration) int64 {
		t.Helper()
		got, err := db.ClaimPublishes(ctx, owner, t0.Add(at), time.Minute, 10)
		checkErr(t, "ClaimPublishes "+owner, err, nil)
		if len(got) != 1 || got[0].ID != p.ID {
			t.Fatalf("%s at %v claimed %+v, want %s", owner, at, got, p.ID)
		}
		return got[0].LeaseEpoch
	}
	stored := func() Publish {
		t.Helper()
		got, err := db.GetPublish(ctx, instanceID, p.ID)
		checkErr(t, "GetPublish", err, nil)
		return got
	}
	complete := func(what string, pg PageResult, wantDup int) {
		t.Helper()
		_, dup, err := db.CompletePages(ctx, []PageResult{pg})
		checkErr(t, "CompletePages "+what, err, nil)
		check(t, "deliveries counted twice: "+what, dup, wantDup)
	}

	first := claim("node-a", 0)
	check(t, "epoch of the first claim", first, int64(1))
	check(t, "renewed by its holder", claim("node-a", 30*time.Second), first)
	// a's lease ran out (at 90 s) but nobody took the publish: a's claim at
	// 2 min is still its tenure.
	check(t, "claimed again by its holder after its lease ran out", claim("node-a", 2*time.Minute), first)
	check(t, "stored epoch", stored().LeaseEpoch, first)
	stale := PageResult{PublishID: p.ID, Owner: "node-a", LeaseEpoch: first, Stream: PlatformFCM, Cursor: "fcm-0010", Targeted: 2, Sent: 2}

	// a stalls past its lease (until 3 min): b takes over and records a page.
	second := claim("node-b", 3*time.Minute)
	check(t, "epoch after b took over", second, first+1)
	complete("b's page", PageResult{PublishID: p.ID, Owner: "node-b", LeaseEpoch: second, Stream: PlatformFCM, Cursor: "fcm-0020",
		Targeted: 5, Sent: 5}, 0)

	// b stalls past its lease (until 4 min): a takes the publish back.
	third := claim("node-a", 4*time.Minute)
	check(t, "epoch after a took it back", third, second+1)
	check(t, "stored epoch after a took it back", stored().LeaseEpoch, third)

	complete("a's page of its first tenure", stale, 2)
	got := stored()
	check(t, "cursor and counts after a's stale page", []any{got.StreamCursor(PlatformFCM), got.Targeted, got.Sent}, []any{"fcm-0020", 5, 5})
	complete("b's page after it lost the lease", PageResult{PublishID: p.ID, Owner: "node-b", LeaseEpoch: second, Stream: PlatformFCM,
		Cursor: "fcm-0025", Targeted: 3, Sent: 3}, 3)

	complete("a's page of its second tenure", PageResult{PublishID: p.ID, Owner: "node-a", LeaseEpoch: third, Stream: PlatformFCM,
		Cursor: "fcm-0030", Targeted: 1, Sent: 1}, 0)
	got = stored()
	check(t, "cursor and counts after a's page", []any{got.StreamCursor(PlatformFCM), got.Targeted, got.Sent}, []any{"fcm-0030", 6, 6})
	check(t, "renewed by a in its second tenure", claim("node-a", 4*time.Minute+30*time.Second), third)
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
