package directory

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

// pollInterval is how often the directories under test check the database.
const pollInterval = 10 * time.Millisecond

func createApp(t *testing.T, db *storage.DB, id, key string) storage.App {
	t.Helper()
	app, err := db.CreateApp(context.Background(), storage.App{ID: id, Key: key, Secret: "secret-" + id, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	return app
}

func newApps(t *testing.T, db *storage.DB, log *zap.Logger) *Apps {
	t.Helper()
	d, err := NewApps(context.Background(), db, log)
	if err != nil {
		t.Fatalf("NewApps: %v", err)
	}
	return d
}

// run starts d.Run until the test ends and waits for it to return.
func run(t *testing.T, d *Apps) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx, pollInterval)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// key returns the key of app id in d, or "" when d has no such app.
func key(d *Apps, id string) string {
	if app := d.ByID(id); app != nil {
		return app.Key
	}
	return ""
}

func TestNew(t *testing.T) {
	t.Run("OKLoadsEveryApp", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		one := createApp(t, db, "1", "key-1")
		createApp(t, db, "2", "key-2")
		d := newApps(t, db, zap.NewNop())

		if app := d.ByKey("key-1"); app == nil || app.ID != "1" || app.Secret != one.Secret || !app.Enabled {
			t.Fatalf("ByKey(key-1) = %+v, want app 1", app)
		}
		if app := d.ByID("2"); app == nil || app.Key != "key-2" {
			t.Fatalf("ByID(2) = %+v, want app 2", app)
		}
		if d.ByKey("1") != nil || d.ByID("key-1") != nil {
			t.Fatal("ids and keys are looked up in the same table")
		}
		if d.ByKey("nope") != nil || d.ByID("nope") != nil {
			t.Fatal("an unknown key or id found an app")
		}
	})

	t.Run("OKEmpty", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		d := newApps(t, db, zap.NewNop())
		if d.ByKey("") != nil || d.ByID("") != nil {
			t.Fatal("an empty directory found an app")
		}
	})

	t.Run("ErrClosedDatabase", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		db.Close()
		if _, err := NewApps(context.Background(), db, zap.NewNop()); err == nil {
			t.Fatal("New on a closed database: got no error")
		}
	})
}

func TestReload(t *testing.T) {
	db := testdb.New(t, storage.Open)
	createApp(t, db, "1", "key-1")
	d := newApps(t, db, zap.NewNop())
	createApp(t, db, "2", "key-2")
	if d.ByID("2") != nil {
		t.Fatal("the directory changed without a reload")
	}
	if err := d.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if key(d, "2") != "key-2" || key(d, "1") != "key-1" {
		t.Fatalf("after Reload got keys %q, %q, want key-1, key-2", key(d, "1"), key(d, "2"))
	}
}

func TestRun(t *testing.T) {
	t.Run("OKPicksUpChangesFromAnotherHandle", func(t *testing.T) {
		path := testdb.DSN(t)
		server := testdb.Open(t, storage.Open, path)
		createApp(t, server, "1", "key-1")
		core, logs := observer.New(zapcore.InfoLevel)
		d := newApps(t, server, zap.New(core))
		run(t, d)

		// The CLI opens the same file through its own handle.
		cli := testdb.Open(t, storage.Open, path)
		ctx := context.Background()

		createApp(t, cli, "2", "key-2")
		wait.Until(t, "app 2 is loaded", func() bool { return d.ByKey("key-2") != nil })
		if app := d.ByKey("key-2"); app.ID != "2" {
			t.Fatalf("ByKey(key-2) = %+v, want app 2", app)
		}

		app, err := cli.GetApp(ctx, "2")
		if err != nil {
			t.Fatal(err)
		}
		app.Key, app.Enabled = "key-2b", false
		if err := cli.UpdateApp(ctx, app); err != nil {
			t.Fatal(err)
		}
		wait.Until(t, "app 2 has its new key", func() bool { return key(d, "2") == "key-2b" })
		if d.ByKey("key-2") != nil {
			t.Fatal("the old key still finds app 2")
		}
		if got := d.ByKey("key-2b"); got == nil || got.Enabled {
			t.Fatalf("ByKey(key-2b) = %+v, want disabled app 2", got)
		}

		if err := cli.DeleteApp(ctx, "1"); err != nil {
			t.Fatal(err)
		}
		wait.Until(t, "app 1 is gone", func() bool { return d.ByID("1") == nil })
		if d.ByKey("key-1") != nil {
			t.Fatal("the deleted app's key still finds it")
		}
		// Each change is logged, just after the new snapshot is in place.
		wait.Until(t, "three reloads are logged", func() bool {
			return logs.FilterMessage("apps reloaded after a database change").Len() >= 3
		})
	})

	t.Run("OKKeepsServingWhenTheDatabaseFails", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		createApp(t, db, "1", "key-1")
		core, logs := observer.New(zapcore.WarnLevel)
		d := newApps(t, db, zap.New(core))
		run(t, d)

		db.Close()
		wait.Until(t, "the failure is logged", func() bool {
			return logs.FilterMessage("reloading apps").Len() > 0
		})
		if key(d, "1") != "key-1" {
			t.Fatal("lookups stopped working when the database failed")
		}
	})

	t.Run("OKStopsWhenCancelled", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		d := newApps(t, db, zap.NewNop())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			d.Run(ctx, pollInterval)
		}()
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after its context was cancelled")
		}
	})
}
