//go:build unix

package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// mode is the permission bits of the file at path.
func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

func TestFilesArePrivate(t *testing.T) {
	sqliteOnly(t)
	// The usual umask of a service: without the fix the files come out 0644.
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "herald.db")

	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A write, so the WAL and its index exist.
	if _, err := db.CreateApp(ctx, App{ID: "1", Key: "k", Secret: "s", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		if got := mode(t, name); got != 0o600 {
			t.Errorf("%s has mode %04o, want 0600", filepath.Base(name), got)
		}
	}
	backup := filepath.Join(dir, "backup.db")
	if err := db.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, backup); got != 0o600 {
		t.Errorf("the backup has mode %04o, want 0600", got)
	}
}

func TestOpenExistingFileModes(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	// create makes a database as an earlier version would have, then gives
	// the file mode m.
	create := func(t *testing.T, m os.FileMode) string {
		path := filepath.Join(t.TempDir(), "herald.db")
		db, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, m); err != nil {
			t.Fatal(err)
		}
		return path
	}

	t.Run("OKReadableByOthersIsMadePrivate", func(t *testing.T) {
		path := create(t, 0o644)
		db, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		if got := mode(t, path); got != 0o600 {
			t.Fatalf("mode %04o after Open, want 0600", got)
		}
	})
	for _, m := range []os.FileMode{0o666, 0o620, 0o602} {
		t.Run("ErrWritableByOthers"+m.String(), func(t *testing.T) {
			path := create(t, m)
			_, err := Open(ctx, path)
			if !errors.Is(err, ErrUnsafePermissions) {
				t.Fatalf("Open of a %04o file: got %v, want ErrUnsafePermissions", m, err)
			}
			if got := mode(t, path); got != m {
				t.Fatalf("Open changed the mode of a refused file to %04o", got)
			}
		})
	}
	t.Run("ErrWALWritableByOthers", func(t *testing.T) {
		path := create(t, 0o600)
		if err := os.WriteFile(path+"-wal", nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path+"-wal", 0o666); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, path); !errors.Is(err, ErrUnsafePermissions) {
			t.Fatalf("got %v, want ErrUnsafePermissions for the -wal file", err)
		}
	})
}
