// Package testdb opens a test's database: a fresh, empty one in a SQLite
// file in the test's temporary folder or, with HERALD_TEST_DB=postgres, a
// PostgreSQL database (testpg), closed when the test ends. Every package's
// tests choose their database here, so one environment variable moves them
// all to PostgreSQL.
//
// It imports nothing of Herald's but testpg and is handed storage.Open
// rather than calling it, so that storage's own tests use it too.
package testdb

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/heraldrt/herald/storage/testpg"
)

// Main runs the tests of a package that uses DSN or New, then stops the
// PostgreSQL server they may have started: call it from the package's
// TestMain.
func Main(m *testing.M) { testpg.Main(m) }

// OnPostgres reports whether the tests run on PostgreSQL
// (HERALD_TEST_DB=postgres) rather than SQLite.
func OnPostgres() bool { return os.Getenv("HERALD_TEST_DB") == "postgres" }

// DSN is a fresh, empty database for t: a PostgreSQL database dropped when t
// ends when OnPostgres, else a SQLite file in t.TempDir().
func DSN(t testing.TB) string {
	t.Helper()
	if OnPostgres() {
		return testpg.Start(t)
	}
	return SQLite(t)
}

// SQLite is the path of a new SQLite database file in t.TempDir(), for the
// tests about SQLite itself (its files, a node alone on it), whatever
// HERALD_TEST_DB says.
func SQLite(t testing.TB) string { return filepath.Join(t.TempDir(), "herald.db") }

// New opens a fresh, empty database (DSN) with open, storage.Open, and
// closes it when t ends.
func New[DB io.Closer](t testing.TB, open func(context.Context, string) (DB, error)) DB {
	t.Helper()
	return Open(t, open, DSN(t))
}

// Open opens the database at dsn with open, storage.Open, and closes it
// when t ends; an error of either fails t.
func Open[DB io.Closer](t testing.TB, open func(context.Context, string) (DB, error), dsn string) DB {
	t.Helper()
	db, err := open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("opening the test database: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("closing the test database: %v", err)
		}
	})
	return db
}
