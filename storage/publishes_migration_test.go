package storage

import (
	"database/sql"
	"io/fs"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldrt/herald/storage/testdb"
)

// TestPublishWebhookOutboxMigration opens a database at migration 0004, when
// the publish webhook outbox held encoded bodies, queues webhooks the way
// that version did, and opens it with this version: each queued webhook is
// still due, as the facts its body held (push encodes them back to the same
// body, see push's TestWebhookBodyOfMigratedRow); a body that is not JSON,
// which no version wrote, is dropped.
func TestPublishWebhookOutboxMigration(t *testing.T) {
	sqliteOnly(t)
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "herald.db")
	old := openAtVersion(t, path, 4)
	const (
		started  = `{"event":"publish_started","failed":0,"instanceId":"inst-1","publishId":"pubid-a","sent":0,"state":"delivering","targeted":0,"timeMs":1767225600123}`
		finished = `{"event":"publish_finished","failed":1,"instanceId":"inst-1","publishId":"pubid-a","sent":15,"state":"done","targeted":16,"timeMs":1767225660456}`
	)
	for _, row := range []struct {
		body          string
		attempts      int
		next, created int64
	}{
		{started, 3, 1767225700000, 1767225600123},
		{finished, 0, 1767225660456, 1767225660456},
		{"not json", 0, 1767225600000, 1767225600000},
	} {
		_, err := old.ExecContext(ctx, `INSERT INTO publish_webhook_outbox (instance_id, url, body, attempts, next_attempt_at_ms, created_at_ms)
			VALUES ('inst-1', 'https://hooks.example/publish', ?, ?, ?, ?)`, []byte(row.body), row.attempts, row.next, row.created)
		checkErr(t, "insert old row", err, nil)
	}
	checkErr(t, "close", old.Close(), nil)

	db := testdb.Open(t, Open, path)
	got, err := db.ClaimPublishWebhooks(ctx, time.UnixMilli(1767225700000), time.Minute, 10)
	checkErr(t, "ClaimPublishWebhooks", err, nil)
	check(t, "converted", len(got), 2)
	for i := range got {
		got[i].ID = 0
	}
	check(t, "publish_finished", got[0], PublishWebhook{InstanceID: "inst-1", URL: "https://hooks.example/publish",
		PublishID: "pubid-a", Event: PublishFinished, State: PublishDone, Targeted: 16, Sent: 15, Failed: 1,
		At: fromMillis(1767225660456), NextAttemptAt: fromMillis(1767225660456), CreatedAt: fromMillis(1767225660456)})
	check(t, "publish_started", got[1], PublishWebhook{InstanceID: "inst-1", URL: "https://hooks.example/publish",
		PublishID: "pubid-a", Event: PublishStarted, State: PublishDelivering,
		At: fromMillis(1767225600123), Attempts: 3, NextAttemptAt: fromMillis(1767225700000), CreatedAt: fromMillis(1767225600123)})
	next, ok, err := db.NextPublishWebhookDue(ctx)
	checkErr(t, "NextPublishWebhookDue", err, nil)
	// Both claimed: due again when the claim runs out.
	check(t, "next due", []any{next, ok}, []any{fromMillis(1767225700000 + 60000), true})
}

// openAtVersion creates a database at path as a binary that knew migrations
// up to version would have left it, and returns its one connection; the
// test writes old rows through it, closes it and opens the file with Open.
func openAtVersion(t *testing.T, path string, version int) *sql.DB {
	t.Helper()
	ctx := t.Context()
	old, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String()+"?_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)")
	checkErr(t, "open", err, nil)
	old.SetMaxOpenConns(1)
	_, err = old.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version       INTEGER PRIMARY KEY,
		applied_at_ms INTEGER NOT NULL
	) STRICT`)
	checkErr(t, "schema_migrations", err, nil)
	files, err := fs.ReadDir(migrations, "migrations")
	checkErr(t, "ReadDir", err, nil)
	for _, f := range files {
		if f.IsDir() {
			continue // postgres/
		}
		v, err := migrationVersion(f.Name())
		checkErr(t, "migrationVersion", err, nil)
		if v <= version {
			_, err := applyMigration(ctx, &handle{old, sqliteDialect}, v, "migrations/"+f.Name())
			checkErr(t, "apply "+f.Name(), err, nil)
		}
	}
	return old
}
