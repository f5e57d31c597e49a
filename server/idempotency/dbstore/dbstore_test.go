package dbstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/idempotency/dbstore"
	"github.com/heraldrt/herald/server/idempotency/idempotencytest"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
	"github.com/heraldrt/herald/storage/testpg"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// openDB opens a database at dsn with the instances of the shared tests.
func openDB(t *testing.T, dsn string) *storage.DB {
	t.Helper()
	db := testdb.Open(t, storage.Open, dsn)
	for _, id := range idempotencytest.Scopes {
		if _, err := db.CreateInstance(t.Context(), storage.Instance{ID: id, SecretKey: "secret-" + id, Enabled: true}); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func TestDBSQLite(t *testing.T) {
	idempotencytest.Run(t, func(t *testing.T, opts idempotency.Options) idempotency.Store {
		return dbstore.New(openDB(t, testdb.SQLite(t)), opts)
	})
}

func TestDBPostgres(t *testing.T) {
	idempotencytest.Run(t, func(t *testing.T, opts idempotency.Options) idempotency.Store {
		return dbstore.New(openDB(t, testpg.Start(t)), opts)
	})
}

// A key outlives the process that kept it: a new store over the same database
// (a restart) replays it, and the sweep forgets it once expired.
func TestDBAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dsn := testdb.DSN(t)
	db := openDB(t, dsn)
	now := time.Now()
	c := idempotency.Claim{Scope: "s1", Key: "k", Token: "a", Expires: now.Add(time.Hour)}
	fp := idempotency.Sum([]byte("body"))
	s := dbstore.New(db, idempotency.Options{})
	if e, err := s.Begin(ctx, c, fp, now); err != nil || e != nil {
		t.Fatalf("Begin: %v %v", e, err)
	}
	if err := s.Complete(ctx, c, idempotency.Response{Status: 200, Body: []byte(`{"publishId":"p"}`)}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db2 := testdb.Open(t, storage.Open, dsn)
	s2 := dbstore.New(db2, idempotency.Options{})
	e, err := s2.Begin(ctx, idempotency.Claim{Scope: "s1", Key: "k", Token: "b", Expires: now.Add(time.Hour)}, fp, now.Add(time.Minute))
	if err != nil || e == nil || !e.Done || e.Fingerprint != fp || string(e.Response.Body) != `{"publishId":"p"}` {
		t.Fatalf("after a restart: %+v %v, want the kept answer", e, err)
	}
	if err := s2.Sweep(ctx, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, err := db2.PurgeIdempotencyKeys(ctx, now.Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("a second purge deleted %d (%v): the sweep left expired keys", n, err)
	}
	if e, err := s2.Begin(ctx, idempotency.Claim{Scope: "s1", Key: "k", Token: "c", Expires: now.Add(2 * time.Hour)}, fp, now.Add(time.Hour)); err != nil || e != nil {
		t.Fatalf("after expiry: %+v %v, want a new claim", e, err)
	}
}
