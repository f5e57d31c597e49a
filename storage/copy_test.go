package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/heraldrt/herald/storage/testdb"
	"github.com/heraldrt/herald/storage/testpg"
)

// dump is every row of every copied table, as text, in key order.
func dump(t *testing.T, db *DB) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, tb := range copyTables {
		rows, err := db.reader.QueryContext(t.Context(), "SELECT * FROM "+tb.name+" ORDER BY 1, 2, 3")
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals, err := scanValues(rows, len(cols))
			if err != nil {
				t.Fatal(err)
			}
			line := ""
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				line += fmt.Sprintf("%s=%v ", cols[i], v)
			}
			out[tb.name] = append(out[tb.name], line)
		}
		rows.Close()
	}
	return out
}

// fillEveryTable writes a row or two into every copied table of src, ids
// numbered by the database included (app_webhooks 1 and 2, publish_pages
// 18, report_events 7, deliveries 9, publish_webhook_outbox 11,
// webhook_outbox 15).
func fillEveryTable(t *testing.T, src *DB) {
	t.Helper()
	ctx := t.Context()
	_, err := src.CreateApp(ctx, App{ID: "1", Key: "k1", Secret: "s1", Enabled: true, ClientEvents: true,
		Webhooks: []Webhook{{URL: "https://example.com/a", EventTypes: []string{"channel_occupied"}}, {URL: "https://example.com/b", Batch: true}}})
	checkErr(t, "CreateApp", err, nil)
	_, err = src.CreateInstance(ctx, testInstance(instanceID))
	checkErr(t, "CreateInstance", err, nil)
	for _, stmt := range []string{
		`INSERT INTO devices VALUES ('web-1', '` + instanceID + `', 'web', 'tok1', '', '{"a":"b"}', 'alice', 1, 2)`,
		`INSERT INTO devices VALUES ('apns-1', '` + instanceID + `', 'apns', 'tok2', 'com.x', '{}', NULL, 3, 4)`,
		`INSERT INTO device_interests VALUES ('` + instanceID + `', 'news', 'web-1'), ('` + instanceID + `', 'news', 'apns-1')`,
		`INSERT INTO publishes VALUES ('pub-1', '` + instanceID + `', 'interests', '["news"]', '{"web":{}}', '', 'delivering', '', 1, 2, 1, 0, 5, NULL, 'node-a', 99, 3, 0)`,
		`INSERT INTO publish_pages VALUES (18, 'pub-1', 'web', '', 'web-1', 'node-a', 1, 0, 1, 1, 1, 0)`,
		`INSERT INTO report_events VALUES (7, '` + instanceID + `', 'pub-1', 'web-1', 'delivery', 'alice', 6, 1, NULL, 0, 8)`,
		`INSERT INTO publish_report_counts VALUES ('` + instanceID + `', 'pub-1', 1, 0)`,
		`INSERT INTO deliveries VALUES (9, 'pub-1', '` + instanceID + `', 'apns-1', 'apns', 'tok2', 'com.x', '', 2, 0, 10, 0)`,
		`INSERT INTO publish_webhook_outbox VALUES (11, '` + instanceID + `', 'https://example.com/p', 'pub-1', 'publish_started', 'delivering', 2, 1, 0, 12, 0, 13, 14, 0)`,
		`INSERT INTO idempotency_keys VALUES ('` + instanceID + `', 'key-1', 'ab12', 'tok', 200, X'7b7d', 18, 19)`,
		`INSERT INTO webhook_outbox (id, app_id, url, body, attempts, next_attempt_at_ms, created_at_ms, claimed_until_ms, order_key)
			VALUES (15, '1', 'https://example.com/a', X'00ff7b7d', 1, 16, 17, NULL, 'news')`,
	} {
		_, err := src.writer.ExecContext(ctx, stmt)
		checkErr(t, stmt, err, nil)
	}
}

func TestCopyMovesEveryTable(t *testing.T) {
	ctx := t.Context()
	src := testdb.Open(t, Open, filepath.Join(t.TempDir(), "source.db")) // SQLite, as a deployment starts
	fillEveryTable(t, src)
	want := dump(t, src)
	for _, tb := range copyTables {
		if len(want[tb.name]) == 0 {
			t.Fatalf("the source has no %s: the test would not show they are copied", tb.name)
		}
	}

	// Into PostgreSQL under HERALD_TEST_DB=postgres (another SQLite file
	// otherwise), and back into SQLite.
	mid := testdb.New(t, Open)
	counts, err := Copy(ctx, src, mid)
	checkErr(t, "Copy", err, nil)
	check(t, "rows copied into apps", counts["apps"], 1)
	check(t, "rows copied into app_webhooks", counts["app_webhooks"], 2)
	back := testdb.Open(t, Open, filepath.Join(t.TempDir(), "back.db"))
	_, err = Copy(ctx, mid, back)
	checkErr(t, "Copy back", err, nil)
	check(t, "the tables after a round trip", dump(t, back), want)
	check(t, "the tables in the middle", dump(t, mid), want)

	// The copy is the state: apps read back whole, and new rows get ids
	// after the copied ones.
	app, err := mid.GetApp(ctx, "1")
	checkErr(t, "GetApp", err, nil)
	check(t, "webhooks of the copied app", len(app.Webhooks), 2)
	items := []OutboxWebhook{{AppID: "1", URL: "https://example.com/a", Body: []byte("{}")}}
	_, err = mid.EnqueueWebhooks(ctx, items, 0)
	checkErr(t, "EnqueueWebhooks", err, nil)
	if items[0].ID <= 15 {
		t.Fatalf("a new webhook request got id %d, not after the copied 15", items[0].ID)
	}

	// A target with state is refused, and keeps its state.
	_, err = Copy(ctx, src, mid)
	checkErr(t, "Copy into a database with state", err, ErrNotEmpty)
}

// After a copy into PostgreSQL every table whose ids the database numbers
// numbers new rows after the copied ones: its sequence was moved past them
// (a copy that left one behind made the next page, report or webhook
// collide with a copied row). New publish pages, whose ids the dispatcher's
// leases and records name, are claimed with fresh ids.
func TestCopyIntoPostgreSQLNumbersNewRowsAfterTheCopied(t *testing.T) {
	ctx := t.Context()
	src := testdb.Open(t, Open, filepath.Join(t.TempDir(), "source.db"))
	fillEveryTable(t, src)
	dst := testdb.Open(t, Open, testpg.Start(t))
	_, err := Copy(ctx, src, dst)
	checkErr(t, "Copy", err, nil)
	for _, tb := range copyTables {
		if !tb.identity {
			continue
		}
		var copied, next int64
		err := dst.writer.QueryRowContext(ctx, `SELECT (SELECT MAX(id) FROM `+tb.name+`), nextval(pg_get_serial_sequence('`+tb.name+`', 'id'))`).Scan(&copied, &next)
		checkErr(t, tb.name, err, nil)
		if next <= copied {
			t.Errorf("%s: the next id is %d, not after the copied %d", tb.name, next, copied)
		}
	}
	p, err := dst.CreatePublish(ctx, Publish{ID: "pub-2", InstanceID: instanceID, TargetKind: TargetInterests, Targets: []string{"news"},
		Payload: []byte(`{"web":{}}`)}, 0, time.Time{})
	checkErr(t, "CreatePublish", err, nil)
	page, err := dst.ClaimPage(ctx, p, PlatformWeb, map[Platform]bool{PlatformWeb: true}, "node-b", time.Now(), time.Minute, 10)
	checkErr(t, "ClaimPage", err, nil)
	if page == nil || page.ID <= 18 || len(page.Targets) != 1 {
		t.Fatalf("claimed page %+v, want one of web-1 numbered after the copied page 18", page)
	}
}

// A copy into SQLite inserts a table of more rows than one statement may
// carry arguments (32,766) in several statements, every row once.
func TestCopyOfManyRowsIntoSQLite(t *testing.T) {
	ctx := t.Context()
	const devices = 5000 // × 9 columns: 45,000 arguments, if in one statement
	src := testdb.New(t, Open)
	_, err := src.CreateInstance(ctx, testInstance(instanceID))
	checkErr(t, "CreateInstance", err, nil)
	batch := make([]DeviceImport, devices)
	for i := range batch {
		batch[i] = DeviceImport{Device: Device{ID: fmt.Sprintf("fcm-%05d", i), InstanceID: instanceID, Platform: PlatformFCM,
			Token: fmt.Sprintf("token-%d", i)}}
	}
	checkErr(t, "ImportDevices", src.ImportDevices(ctx, batch), nil)
	dst := testdb.Open(t, Open, filepath.Join(t.TempDir(), "target.db"))
	counts, err := Copy(ctx, src, dst)
	checkErr(t, "Copy", err, nil)
	check(t, "devices copied", counts["devices"], devices)
	var n, distinct int
	err = dst.reader.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT id) FROM devices").Scan(&n, &distinct)
	checkErr(t, "count", err, nil)
	check(t, "devices stored, distinct", []int{n, distinct}, []int{devices, devices})
}

// Every table of the schema is either copied or named as left out, so that
// a new table cannot be forgotten by Copy unnoticed.
func TestCopyKnowsEveryTable(t *testing.T) {
	db := testdb.New(t, Open)
	q := "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
	if db.d.postgres {
		q = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
	}
	rows, err := db.reader.QueryContext(t.Context(), q)
	checkErr(t, "list tables", err, nil)
	defer rows.Close()
	var tables []string
	for rows.Next() {
		var name string
		checkErr(t, "scan", rows.Scan(&name), nil)
		tables = append(tables, name)
	}
	checkErr(t, "rows", rows.Err(), nil)
	var known []string
	for _, tb := range copyTables {
		known = append(known, tb.name)
	}
	known = append(known, notCopied...)
	slices.Sort(known)
	check(t, "the tables copied or left out", known, tables)
}

// BenchmarkCopyDevices copies a SQLite file of COPY_DEVICES devices
// (default 1,000,000, each on one interest) into a new SQLite file and into
// a new PostgreSQL database, as `herald copy` does, and reports the seconds
// each copy took.
func BenchmarkCopyDevices(b *testing.B) {
	devices := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("COPY_DEVICES")); err == nil && v > 0 {
		devices = v
	}
	ctx := context.Background()
	src := testdb.Open(b, Open, testdb.SQLite(b))
	if _, err := src.CreateInstance(ctx, testInstance(instanceID)); err != nil {
		b.Fatal(err)
	}
	batch := make([]DeviceImport, 0, 10_000)
	for i := range devices {
		p := []Platform{PlatformAPNs, PlatformFCM, PlatformWeb}[i%3]
		batch = append(batch, DeviceImport{Device: Device{ID: NewDeviceID(p), InstanceID: instanceID, Platform: p,
			Token: fmt.Sprintf("token-%d", i), BundleIdentifier: "com.example"}, Interests: []string{"everyone"}})
		if len(batch) == cap(batch) || i == devices-1 {
			if err := src.ImportDevices(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	for _, target := range []string{"SQLite", "PostgreSQL"} {
		b.Run(target, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				dsn := filepath.Join(b.TempDir(), "target.db")
				if target == "PostgreSQL" {
					dsn = testpg.Start(b)
				}
				dst, err := Open(ctx, dsn)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				counts, err := Copy(ctx, src, dst)
				took := time.Since(start)
				b.StopTimer()
				dst.Close()
				if err != nil || counts["devices"] != devices {
					b.Fatalf("copied %v: %v", counts, err)
				}
				b.ReportMetric(took.Seconds(), "s/copy")
				b.StartTimer()
			}
		})
	}
}
