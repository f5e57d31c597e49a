package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldrt/herald/storage/testdb"
)

// TestDisableEnable covers `apps disable|enable` and `instances disable|enable`.
func TestDisableEnable(t *testing.T) {
	t.Parallel()
	path := testdb.SQLite(t)
	mustRun(t, Apps, path, "create", "--id", "42", "--key", "k", "--secret", "s")
	const instID = "6f2b8a8e-3c1d-4a55-9a0e-1c2d3e4f5a6b"
	mustRun(t, Instances, path, "create", "--id", instID)

	t.Run("OKApp", func(t *testing.T) {
		if out := mustRun(t, Apps, path, "disable", "42"); out != "app 42 disabled\n" {
			t.Fatalf("disable printed %q", out)
		}
		if app := getApp(t, path, "42"); app.Enabled || app.Key != "k" || app.Secret != "s" {
			t.Fatalf("after disable: %+v, want disabled with its credentials", app)
		}
		if out := mustRun(t, Apps, path, "enable", "42"); out != "app 42 enabled\n" {
			t.Fatalf("enable printed %q", out)
		}
		if !getApp(t, path, "42").Enabled {
			t.Fatal("app still disabled after enable")
		}
	})
	t.Run("OKInstance", func(t *testing.T) {
		mustRun(t, Instances, path, "disable", instID)
		if getInstance(t, path, instID).Enabled {
			t.Fatal("instance still enabled after disable")
		}
		mustRun(t, Instances, path, "enable", instID)
		if !getInstance(t, path, instID).Enabled {
			t.Fatal("instance still disabled after enable")
		}
	})
	t.Run("ErrUnknownApp", func(t *testing.T) {
		_, _, err := runCmd(t, Apps, path, "disable", "nope")
		checkErr(t, err, `no app with id "nope"`)
	})
	t.Run("ErrUnknownInstance", func(t *testing.T) {
		_, _, err := runCmd(t, Instances, path, "enable", "00000000-0000-0000-0000-000000000000")
		checkErr(t, err, "no instance with id")
	})
	t.Run("ErrNoID", func(t *testing.T) {
		_, stderr, err := runCmd(t, Apps, path, "disable")
		if !errors.Is(err, ErrUsage) || !strings.Contains(stderr, "expected 1 argument(s): <id>") {
			t.Fatalf("got %v, stderr %q", err, stderr)
		}
	})
}

// TestCreateValidation: the rules shared with the admin API apply to the CLI.
func TestCreateValidation(t *testing.T) {
	t.Parallel()
	path := testdb.SQLite(t)
	for _, tt := range []struct {
		name    string
		group   func(Env, []string) error
		args    []string
		wantErr string
	}{
		{"ErrAppIDSlash", Apps, []string{"create", "--id", "a/b"}, "the app id must be 1 to 64 characters"},
		{"ErrKeyColon", Apps, []string{"create", "--key", "a:b"}, "key and secret must be"},
		{"ErrInstanceIDNotUUID", Instances, []string{"create", "--id", "not-a-uuid"}, "the instance id must be a UUID"},
		{"ErrNegativeQuota", Instances, []string{"create", "--publish-quota", "-1"}, "the publish quota may not be negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCmd(t, tt.group, path, tt.args...)
			checkErr(t, err, tt.wantErr)
		})
	}
}

func TestBackup(t *testing.T) {
	t.Parallel()
	path := testdb.SQLite(t)
	mustRun(t, Apps, path, "create", "--id", "42", "--key", "k", "--secret", "s")
	target := filepath.Join(t.TempDir(), "copy.db")

	t.Run("OK", func(t *testing.T) {
		out := mustRun(t, Backup, path, target)
		if !strings.Contains(out, "backed up "+path+" to "+target) {
			t.Fatalf("printed %q", out)
		}
		if app := getApp(t, target, "42"); app.Key != "k" || app.Secret != "s" {
			t.Fatalf("the copy holds %+v", app)
		}
	})
	t.Run("ErrTargetExists", func(t *testing.T) {
		_, _, err := runCmd(t, Backup, path, target)
		checkErr(t, err, "already exists")
	})
	t.Run("ErrNoTarget", func(t *testing.T) {
		_, stderr, err := runCmd(t, Backup, path)
		if !errors.Is(err, ErrUsage) || !strings.Contains(stderr, "<target file>") {
			t.Fatalf("got %v, stderr %q", err, stderr)
		}
		if _, err := os.Stat(target + "-wal"); err == nil {
			t.Fatal("the backup left a WAL file")
		}
	})
}
