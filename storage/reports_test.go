package storage

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldrt/herald/storage/testdb"
)

// createTestPublish stores a publish of the kind and targets on the instance.
func createTestPublish(t *testing.T, db *DB, instance, id string, kind PublishTargetKind, targets ...string) Publish {
	t.Helper()
	p, err := db.CreatePublish(t.Context(), Publish{ID: id, InstanceID: instance, TargetKind: kind, Targets: targets,
		Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	return p
}

// A report counts once per (publish, device, kind), and only for a publish
// of the instance that targeted the device: by one of its interests, or by
// its user, and not registered after the publish finished.
func TestReportEvents(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	other := "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	_, err := db.CreateInstance(ctx, testInstance(other))
	checkErr(t, "CreateInstance", err, nil)

	news := registerTestDevice(t, db, PlatformFCM, "news")
	checkErr(t, "AddDeviceInterest", db.AddDeviceInterest(ctx, instanceID, PlatformFCM, news.ID, "news"), nil)
	sports := registerTestDevice(t, db, PlatformAPNs, "sports")
	checkErr(t, "AddDeviceInterest", db.AddDeviceInterest(ctx, instanceID, PlatformAPNs, sports.ID, "sports"), nil)
	alice := registerTestDevice(t, db, PlatformWeb, "alice")
	checkErr(t, "SetDeviceUser", db.SetDeviceUser(ctx, instanceID, PlatformWeb, alice.ID, "alice"), nil)
	elsewhere, _, err := db.RegisterDevice(ctx, Device{InstanceID: other, Platform: PlatformFCM, Token: "elsewhere"})
	checkErr(t, "RegisterDevice", err, nil)
	checkErr(t, "AddDeviceInterest", db.AddDeviceInterest(ctx, other, PlatformFCM, elsewhere.ID, "news"), nil)

	createTestPublish(t, db, instanceID, "pub-news", TargetInterests, "news", "weather")
	createTestPublish(t, db, instanceID, "pub-users", TargetUsers, "alice", "bob")
	createTestPublish(t, db, other, "pub-other", TargetInterests, "news")
	// A publish that finished before a device joined its interest.
	done := createTestPublish(t, db, instanceID, "pub-done", TargetInterests, "late")
	done, err = db.StartPublish(ctx, done)
	checkErr(t, "StartPublish", err, nil)
	finished, _, err := db.CompletePages(ctx, []PageResult{{PublishID: done.ID, Resolved: true}})
	checkErr(t, "CompletePages", err, nil)
	check(t, "finished", len(finished), 1)
	for time.Now().UnixMilli() <= finished[0].FinishedAt.UnixMilli() {
		time.Sleep(time.Millisecond) // the device must be registered in a later millisecond
	}
	late := registerTestDevice(t, db, PlatformFCM, "late")
	checkErr(t, "AddDeviceInterest", db.AddDeviceInterest(ctx, instanceID, PlatformFCM, late.ID, "late"), nil)

	yes := true
	for _, tt := range []struct {
		name     string
		instance string
		publish  string
		device   string
		kind     ReportKind
		counted  bool
	}{
		{"OKInterest", instanceID, "pub-news", news.ID, ReportDelivery, true},
		{"OKRepeatedNotCounted", instanceID, "pub-news", news.ID, ReportDelivery, false},
		{"OKOpen", instanceID, "pub-news", news.ID, ReportOpen, true},
		{"OKUser", instanceID, "pub-users", alice.ID, ReportDelivery, true},
		{"RefusedUnknownPublish", instanceID, "pub-unknown", news.ID, ReportDelivery, false},
		{"RefusedUnknownDevice", instanceID, "pub-news", "fcm-unknown", ReportDelivery, false},
		{"RefusedNotOfTheInterests", instanceID, "pub-news", sports.ID, ReportDelivery, false},
		{"RefusedNotOfTheUsers", instanceID, "pub-users", news.ID, ReportOpen, false},
		{"RefusedPublishOfAnotherInstance", instanceID, "pub-other", news.ID, ReportDelivery, false},
		{"RefusedDeviceOfAnotherInstance", instanceID, "pub-news", elsewhere.ID, ReportDelivery, false},
		{"RefusedRegisteredAfterTheFinish", instanceID, "pub-done", late.ID, ReportDelivery, false},
		{"OKOtherInstance", other, "pub-other", elsewhere.ID, ReportDelivery, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ok, err := db.RecordReportEvent(ctx, ReportEvent{InstanceID: tt.instance, PublishID: tt.publish, DeviceID: tt.device,
				Kind: tt.kind, TimestampSecs: 1_700_000_000, HasData: &yes})
			checkErr(t, "RecordReportEvent", err, nil)
			check(t, "counted", ok, tt.counted)
		})
	}
	for _, c := range []struct {
		instance, publish string
		want              [2]int
	}{
		{instanceID, "pub-news", [2]int{1, 1}},
		{instanceID, "pub-users", [2]int{1, 0}},
		{instanceID, "pub-done", [2]int{0, 0}},
		{instanceID, "pub-unknown", [2]int{0, 0}},
		{other, "pub-other", [2]int{1, 0}},
	} {
		delivered, opened, err := db.PublishReportCounts(ctx, c.instance, c.publish)
		checkErr(t, "PublishReportCounts", err, nil)
		check(t, "counts of "+c.publish, [2]int{delivered, opened}, c.want)
	}
	delivered, opened, err := db.DeviceReportCounts(ctx, instanceID, news.ID)
	checkErr(t, "DeviceReportCounts", err, nil)
	check(t, "device counts", [2]int{delivered, opened}, [2]int{1, 1})

	// A publish's reports and counts go with it.
	_, err = db.writer.ExecContext(ctx, `DELETE FROM publishes WHERE id = 'pub-news'`)
	checkErr(t, "delete publish", err, nil)
	var rows int
	checkErr(t, "count rows", db.reader.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM report_events WHERE publish_id = 'pub-news') +
		(SELECT COUNT(*) FROM publish_report_counts WHERE publish_id = 'pub-news')`).Scan(&rows), nil)
	check(t, "rows of the deleted publish", rows, 0)
	delivered, _, err = db.PublishReportCounts(ctx, instanceID, "pub-users")
	checkErr(t, "PublishReportCounts", err, nil)
	check(t, "another publish's count kept", delivered, 1)
}

// TestReportPublishesMigration opens a database at migration 0006, when any
// publish id was counted, with reports of a real publish and of made-up ones:
// migration 0008 drops the made-up ones and keeps the real one's.
func TestReportPublishesMigration(t *testing.T) {
	sqliteOnly(t)
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "herald.db")
	old := openAtVersion(t, path, 6)
	for _, stmt := range []string{
		`INSERT INTO instances VALUES ('` + instanceID + `', 's', '', 1, '', '', '', '', '', '', '', '', '', '', '', 0, 1, 1)`,
		`INSERT INTO publishes (id, instance_id, target_kind, targets, payload, webhook_url, state, cursor, resolved,
			targeted, sent, failed, created_at_ms) VALUES ('pub-real', '` + instanceID + `', 'interests', '["a"]', '{}', '', 'done', '', 1, 1, 1, 0, 1)`,
	} {
		_, err := old.ExecContext(ctx, stmt)
		checkErr(t, "seed", err, nil)
	}
	for _, pub := range []string{"pub-real", "pub-made-up", "pub-made-up-2"} {
		_, err := old.ExecContext(ctx, `INSERT INTO report_events (instance_id, publish_id, device_id, event, user_id, timestamp_secs, received_at_ms)
			VALUES (?, ?, 'fcm-1', 'delivery', '', 1, 1)`, instanceID, pub)
		checkErr(t, "insert report", err, nil)
		_, err = old.ExecContext(ctx, `INSERT INTO publish_report_counts (instance_id, publish_id, delivered, opened) VALUES (?, ?, 1, 0)`, instanceID, pub)
		checkErr(t, "insert counts", err, nil)
	}
	checkErr(t, "close", old.Close(), nil)

	db := testdb.Open(t, Open, path)
	var reports, counts int
	checkErr(t, "count", db.reader.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM report_events), (SELECT COUNT(*) FROM publish_report_counts)`).Scan(&reports, &counts), nil)
	check(t, "rows left", [2]int{reports, counts}, [2]int{1, 1})
	delivered, _, err := db.PublishReportCounts(ctx, instanceID, "pub-real")
	checkErr(t, "PublishReportCounts", err, nil)
	check(t, "the real publish's count", delivered, 1)
}
