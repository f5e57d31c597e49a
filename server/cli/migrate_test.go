package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/heraldrt/herald/storage/testdb"
	"github.com/heraldrt/herald/storage/testpg"
)

// herald migrate applies what a database lacks, on either database, and
// says so; run again, it has nothing to do.
func TestMigrate(t *testing.T) {
	for name, db := range map[string]func() string{
		"SQLite":     func() string { return testdb.SQLite(t) },
		"PostgreSQL": func() string { return strings.Replace(testpg.Start(t), "herald@", "herald:hunter2@", 1) },
	} {
		t.Run(name, func(t *testing.T) {
			dsn := db()
			first := mustRun(t, Migrate, dsn)
			if !strings.Contains(first, ": applied ") || strings.Contains(first, "hunter2") {
				t.Fatalf("first run printed %q: want the migrations it applied, and no password", first)
			}
			again := mustRun(t, Migrate, dsn)
			if !strings.Contains(again, "nothing to apply") {
				t.Fatalf("second run printed %q", again)
			}
			// The version both name is the same.
			i := strings.Index(first, "schema version ")
			v := first[i : i+strings.Index(first[i:], ":")]
			if !strings.Contains(again, v+":") {
				t.Fatalf("first run %q and second %q name different versions", first, again)
			}
		})
	}
	t.Run("ErrArguments", func(t *testing.T) {
		_, stderr, err := runCmd(t, Migrate, testdb.SQLite(t), "extra")
		if !errors.Is(err, ErrUsage) || !strings.Contains(stderr, "usage: herald migrate") {
			t.Fatalf("got %v, stderr %q", err, stderr)
		}
	})
}
