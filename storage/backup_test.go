package storage

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestBackup(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(ctx, filepath.Join(dir, "herald.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.CreateApp(ctx, App{ID: "1", Key: "k1", Secret: "s1", Enabled: true, Webhooks: []Webhook{{URL: "https://example.com/h"}}}); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "backup.db")

	t.Run("OK", func(t *testing.T) {
		if err := db.Backup(ctx, target); err != nil {
			t.Fatal(err)
		}
		// A write after the backup is not in it.
		if _, err := db.CreateApp(ctx, App{ID: "2", Key: "k2", Secret: "s2"}); err != nil {
			t.Fatal(err)
		}
		copy, err := Open(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		defer copy.Close()
		apps, err := copy.ListApps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(apps) != 1 || apps[0].ID != "1" || apps[0].Secret != "s1" || len(apps[0].Webhooks) != 1 {
			t.Fatalf("backup holds %+v, want app 1 with its webhook only", apps)
		}
	})
	t.Run("ErrExists", func(t *testing.T) {
		err := db.Backup(ctx, target)
		if err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("got %v, want an already exists error", err)
		}
	})
}
