package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

// runCmd runs group (Apps or Instances) with args and --db db, in an empty
// environment, and returns what it printed.
func runCmd(t *testing.T, group func(Env, []string) error, db string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := Env{Ctx: context.Background(), Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	if db != "" {
		args = append(args, "--db", db)
	}
	err = group(env, args)
	return out.String(), errOut.String(), err
}

// mustRun is runCmd that fails the test on an error.
func mustRun(t *testing.T, group func(Env, []string) error, db string, args ...string) string {
	t.Helper()
	stdout, stderr, err := runCmd(t, group, db, args...)
	if err != nil {
		t.Fatalf("%v: %v\nstderr: %s", args, err, stderr)
	}
	return stdout
}

// checkErr fails unless err's message contains want.
func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got error %v, want one containing %q", err, want)
	}
}

// withDB opens the database file at path for the duration of fn.
func withDB(t *testing.T, path string, fn func(db *storage.DB)) {
	t.Helper()
	db, err := storage.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fn(db)
}

// row returns the whitespace-separated fields of the line of a table that
// starts with first, or nil.
func row(table, first string) []string {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

func TestUsage(t *testing.T) {
	t.Parallel()
	groups := []struct {
		name  string
		group func(Env, []string) error
	}{{"apps", Apps}, {"instances", Instances}}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			commands := []string{"list", "show", "create", "update", "rotate-secret", "delete"}

			t.Run("ErrNoArguments", func(t *testing.T) {
				stdout, stderr, err := runCmd(t, g.group, "")
				if !errors.Is(err, ErrUsage) {
					t.Fatalf("got %v, want ErrUsage", err)
				}
				if stdout != "" || !strings.HasPrefix(stderr, "usage: herald "+g.name+" <command>") {
					t.Fatalf("got stdout %q, stderr %q, want the usage on stderr", stdout, stderr)
				}
				for _, c := range commands {
					if !strings.Contains(stderr, "\n  "+c+" ") {
						t.Fatalf("usage %q does not list %s", stderr, c)
					}
				}
			})

			t.Run("OKHelp", func(t *testing.T) {
				for _, help := range []string{"help", "-h", "--help"} {
					_, stderr, err := runCmd(t, g.group, "", help)
					if err != nil || !strings.Contains(stderr, "usage: herald "+g.name) {
						t.Fatalf("%s: got %v and %q, want the usage and no error", help, err, stderr)
					}
				}
			})

			t.Run("ErrUnknownCommand", func(t *testing.T) {
				path := testdb.SQLite(t)
				_, stderr, err := runCmd(t, g.group, path, "frobnicate")
				if !errors.Is(err, ErrUsage) {
					t.Fatalf("got %v, want ErrUsage", err)
				}
				if !strings.Contains(stderr, `unknown command "frobnicate"`) || !strings.Contains(stderr, "usage:") {
					t.Fatalf("stderr %q: want the unknown command and the usage", stderr)
				}
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("an unknown command created the database file: %v", err)
				}
			})

			t.Run("ErrCannotOpenDatabase", func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "missing-dir", "herald.db")
				_, _, err := runCmd(t, g.group, path, "list")
				checkErr(t, err, "opening "+path)
			})
		})
	}
}

func TestDatabasePath(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, getenv func(string) string, args ...string) {
		t.Helper()
		var out, errOut bytes.Buffer
		env := Env{Ctx: context.Background(), Stdout: &out, Stderr: &errOut, Getenv: getenv}
		if err := Apps(env, args); err != nil {
			t.Fatalf("%v: %v (%s)", args, err, errOut.String())
		}
	}
	exists := func(t *testing.T, path string) {
		t.Helper()
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("database %s was not created: %v", path, err)
		}
	}

	t.Run("OKFromHERALD_DB", func(t *testing.T) {
		path := testdb.SQLite(t)
		run(t, func(name string) string {
			if name == "HERALD_DB" {
				return path
			}
			return ""
		}, "list")
		exists(t, path)
	})

	t.Run("OKFlagOverridesHERALD_DB", func(t *testing.T) {
		envPath, flagPath := testdb.SQLite(t), testdb.SQLite(t)
		run(t, func(string) string { return envPath }, "list", "--db="+flagPath)
		exists(t, flagPath)
		if _, err := os.Stat(envPath); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("HERALD_DB %s was opened despite --db", envPath)
		}
	})

	t.Run("OKFlagBeforeCommandArguments", func(t *testing.T) {
		path := testdb.SQLite(t)
		run(t, func(string) string { return "" }, "create", "-db", path, "--id", "5")
		withDB(t, path, func(db *storage.DB) {
			if _, err := db.GetApp(context.Background(), "5"); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// hasLine reports whether output has a line equal to want up to the width of
// the whitespace between words (tabwriter pads the columns).
func hasLine(output, want string) bool {
	want = strings.Join(strings.Fields(want), " ")
	for _, line := range strings.Split(output, "\n") {
		if strings.Join(strings.Fields(line), " ") == want {
			return true
		}
	}
	return false
}
