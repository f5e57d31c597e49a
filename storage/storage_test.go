package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/heraldrt/herald/storage/testdb"
)

// The suite runs on SQLite, or with HERALD_TEST_DB=postgres on PostgreSQL
// (a real server, see testpg): make test runs it both ways (testdb chooses).
// Tests about SQLite files (paths, permissions, backups, old files'
// migrations) call sqliteOnly.
func TestMain(m *testing.M) { testdb.Main(m) }

// sqliteOnly skips a test about SQLite files when the suite runs on
// PostgreSQL.
func sqliteOnly(t testing.TB) {
	if testdb.OnPostgres() {
		t.Skip("about SQLite files")
	}
}

// check fails the test when got differs from want (compared deeply).
func check[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

// checkErr fails the test unless errors.Is(err, want); want nil means no error.
func checkErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func TestOpen(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		sqliteOnly(t)
		db := testdb.New(t, Open)
		var journalMode string
		var foreignKeys, synchronous int
		row := db.writer.QueryRowContext(t.Context(), "SELECT * FROM pragma_journal_mode, pragma_foreign_keys, pragma_synchronous")
		if err := row.Scan(&journalMode, &foreignKeys, &synchronous); err != nil {
			t.Fatal(err)
		}
		check(t, "journal_mode", journalMode, "wal")
		check(t, "foreign_keys", foreignKeys, 1)
		check(t, "synchronous", synchronous, 1) // NORMAL
	})

	t.Run("OnTheChosenDatabase", func(t *testing.T) {
		db := testdb.New(t, Open)
		check(t, "on PostgreSQL", db.d.postgres, testdb.OnPostgres())
		// Keys order byte by byte on both, whatever PostgreSQL's locale
		// (testpg's sorts 'a' before 'Z'): keyset paging relies on it.
		for _, id := range []string{"a-lower", "Z-upper"} {
			_, err := db.CreateApp(t.Context(), testApp(id, "key-"+id))
			checkErr(t, "CreateApp", err, nil)
		}
		var first string
		if err := db.reader.QueryRowContext(t.Context(), "SELECT id FROM apps ORDER BY id LIMIT 1").Scan(&first); err != nil {
			t.Fatal(err)
		}
		check(t, "first app id", first, "Z-upper")
	})

	t.Run("ReadersAreReadOnly", func(t *testing.T) {
		sqliteOnly(t) // PostgreSQL's reader is the one pool
		db := testdb.New(t, Open)
		_, err := db.reader.ExecContext(t.Context(), "DELETE FROM apps")
		if err == nil {
			t.Fatal("DELETE on a reader connection: got no error")
		}
	})

	t.Run("MigrationsIdempotent", func(t *testing.T) {
		path := testdb.DSN(t)
		first, err := Open(t.Context(), path)
		if err != nil {
			t.Fatalf("first Open: %v", err)
		}
		fresh := first.Schema()
		if len(fresh.Applied) == 0 || fresh.Version != fresh.Applied[len(fresh.Applied)-1] {
			t.Fatalf("a new database's schema %+v: want every migration applied, the last one its version", fresh)
		}
		want, err := first.CreateApp(t.Context(), testApp("1", "key1"))
		checkErr(t, "CreateApp", err, nil)
		checkErr(t, "first Close", first.Close(), nil)

		db := testdb.Open(t, Open, path)
		got, err := db.GetApp(t.Context(), "1")
		checkErr(t, "GetApp after reopen", err, nil)
		check(t, "app after reopen", got, want)

		pattern := "migrations/*.sql"
		if testdb.OnPostgres() {
			pattern = "migrations/postgres/*.sql"
		}
		files, err := fs.Glob(migrations, pattern)
		checkErr(t, "Glob", err, nil)
		var applied int
		if err := db.reader.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM schema_migrations").Scan(&applied); err != nil {
			t.Fatal(err)
		}
		check(t, "applied migrations", applied, len(files))
		check(t, "migrations applied by Open", len(fresh.Applied), len(files))
		check(t, "schema after reopening", db.Schema(), Schema{Version: fresh.Version})
	})

	t.Run("RefusesANewerSchema", func(t *testing.T) {
		dsn := testdb.DSN(t)
		db, err := Open(t.Context(), dsn)
		checkErr(t, "Open", err, nil)
		_, err = db.writer.ExecContext(t.Context(), "INSERT INTO schema_migrations (version, applied_at_ms) VALUES (9999, 0)")
		checkErr(t, "a newer migration", err, nil)
		checkErr(t, "Close", db.Close(), nil)
		_, err = Open(t.Context(), dsn)
		checkErr(t, "Open after a newer Herald", err, ErrNewerSchema)
	})

	t.Run("PathWithURISyntax", func(t *testing.T) {
		sqliteOnly(t)
		dir := t.TempDir()
		db := testdb.Open(t, Open, filepath.Join(dir, "a b?c#d%20.db"))
		_, err := db.CreateApp(t.Context(), testApp("1", "key1"))
		checkErr(t, "CreateApp", err, nil)
		matches, err := filepath.Glob(filepath.Join(dir, "*.db"))
		checkErr(t, "Glob", err, nil)
		check(t, "files", matches, []string{filepath.Join(dir, "a b?c#d%20.db")})
	})
}

// A migration's file name starts with its version, a positive number, and
// an underscore.
func TestMigrationVersion(t *testing.T) {
	for name, want := range map[string]int{"0001_init.sql": 1, "0016_apps_push_instance.sql": 16, "0000_zero.sql": 0,
		"-001_neg.sql": 0, "init.sql": 0, "x_init.sql": 0} {
		v, err := migrationVersion(name)
		if v != want || (err == nil) != (want > 0) {
			t.Errorf("migrationVersion(%q) = %d, %v; want %d", name, v, err, want)
		}
	}
}

// Close closes the reader's connections as well as the writer's: none is
// left to use the database.
func TestCloseClosesEveryConnection(t *testing.T) {
	db, err := Open(t.Context(), testdb.DSN(t))
	checkErr(t, "Open", err, nil)
	checkErr(t, "Close", db.Close(), nil)
	if err := db.reader.PingContext(t.Context()); err == nil {
		t.Fatal("the reader answers after Close")
	}
	if err := db.writer.PingContext(t.Context()); err == nil {
		t.Fatal("the writer answers after Close")
	}
}

func TestDataVersion(t *testing.T) {
	t.Run("ChangesAfterWriteFromOtherDB", func(t *testing.T) {
		path := testdb.DSN(t)
		server := testdb.Open(t, Open, path)
		cli := testdb.Open(t, Open, path)

		v0, err := server.DataVersion(t.Context())
		checkErr(t, "DataVersion", err, nil)
		_, err = cli.CreateApp(t.Context(), testApp("1", "key1"))
		checkErr(t, "CreateApp", err, nil)
		v1, err := server.DataVersion(t.Context())
		checkErr(t, "DataVersion", err, nil)
		if v1 == v0 {
			t.Fatalf("DataVersion after app created by another DB: still %d", v1)
		}

		_, err = cli.CreateInstance(t.Context(), testInstance(instanceID))
		checkErr(t, "CreateInstance", err, nil)
		v2, err := server.DataVersion(t.Context())
		checkErr(t, "DataVersion", err, nil)
		if v2 == v1 {
			t.Fatalf("DataVersion after instance created by another DB: still %d", v2)
		}
	})

	t.Run("UnchangedByReads", func(t *testing.T) {
		db := testdb.New(t, Open)
		_, err := db.CreateApp(t.Context(), testApp("1", "key1"))
		checkErr(t, "CreateApp", err, nil)
		v0, err := db.DataVersion(t.Context())
		checkErr(t, "DataVersion", err, nil)
		_, err = db.ListApps(t.Context())
		checkErr(t, "ListApps", err, nil)
		v1, err := db.DataVersion(t.Context())
		checkErr(t, "DataVersion", err, nil)
		check(t, "DataVersion after a read", v1, v0)
	})
}

// TestConcurrentReadsWhileWriting reads apps while another goroutine rewrites them; every
// read must see an app and its webhooks from the same commit. Run with -race.
func TestConcurrentReadsWhileWriting(t *testing.T) {
	db := testdb.New(t, Open)
	ctx := t.Context()
	// MaxConnections always equals the number of webhooks, which the readers
	// check.
	app := testApp("1", "key1")
	app.MaxConnections = len(app.Webhooks)
	_, err := db.CreateApp(ctx, app)
	checkErr(t, "CreateApp", err, nil)

	const writes = 50
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for i := range writes {
			app := testApp("1", "key1")
			app.MaxConnections = i % 4
			app.Webhooks = nil
			for j := range app.MaxConnections {
				app.Webhooks = append(app.Webhooks, Webhook{URL: fmt.Sprintf("https://example.com/%d/%d", i, j)})
			}
			if err := db.UpdateApp(ctx, app); err != nil {
				t.Errorf("UpdateApp: %v", err)
				return
			}
			if _, err := db.CreateInstance(ctx, testInstance(fmt.Sprintf("instance-%d", i))); err != nil {
				t.Errorf("CreateInstance: %v", err)
				return
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				apps, err := db.ListApps(ctx)
				if err != nil {
					t.Errorf("ListApps: %v", err)
					return
				}
				app, err := db.GetAppByKey(ctx, "key1")
				if err != nil {
					t.Errorf("GetAppByKey: %v", err)
					return
				}
				for _, a := range append(apps, app) {
					if len(a.Webhooks) != a.MaxConnections {
						t.Errorf("app read mid-update: %d webhooks, MaxConnections %d", len(a.Webhooks), a.MaxConnections)
						return
					}
				}
				if _, err := db.ListInstances(ctx); err != nil {
					t.Errorf("ListInstances: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()

	n, err := db.CountInstances(ctx)
	checkErr(t, "CountInstances", err, nil)
	check(t, "instances", n, writes)
}

// The default database path is relative (./herald.db); it must open the file
// in the working directory.
func TestOpenRelativePath(t *testing.T) {
	sqliteOnly(t)
	t.Chdir(t.TempDir())
	db, err := Open(context.Background(), "./herald.db")
	if err != nil {
		t.Fatalf("open ./herald.db: %v", err)
	}
	db.Close()
	if _, err := os.Stat("herald.db"); err != nil {
		t.Fatalf("no herald.db in the working directory: %v", err)
	}
	db, err = Open(context.Background(), "relative.db")
	if err != nil {
		t.Fatalf("open relative.db: %v", err)
	}
	db.Close()
}
