package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/heraldrt/herald/storage/testdb"
	"github.com/heraldrt/herald/storage/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// A deployment that started on a SQLite file moves to PostgreSQL, where the
// apps commands find its state.
func TestCopyFromSQLiteToPostgreSQL(t *testing.T) {
	file := testdb.SQLite(t)
	mustRun(t, Apps, file, "create", "--id", "42", "--key", "k", "--secret", "s")
	// With a password (the test server trusts any): it must not be printed.
	pg := strings.Replace(testpg.Start(t), "herald@", "herald:hunter2@", 1)
	out := mustRun(t, Copy, "", "--from", file, "--to", pg)
	if !strings.Contains(out, "apps 1") {
		t.Fatalf("printed %q", out)
	}
	if app := getApp(t, pg, "42"); app.Key != "k" || app.Secret != "s" {
		t.Fatalf("PostgreSQL holds %+v", app)
	}
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "postgres://herald@") {
		t.Fatalf("the URL's password is printed, or the URL is not: %q", out)
	}

	t.Run("ErrTargetNotEmpty", func(t *testing.T) {
		_, _, err := runCmd(t, Copy, "", "--from", file, "--to", pg)
		checkErr(t, err, "not empty")
	})
	t.Run("ErrMissingFlag", func(t *testing.T) {
		_, stderr, err := runCmd(t, Copy, "", "--from", file)
		if !errors.Is(err, ErrUsage) || !strings.Contains(stderr, "usage: herald copy") {
			t.Fatalf("got %v, stderr %q", err, stderr)
		}
	})
}
