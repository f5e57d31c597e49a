package testpg

import (
	"database/sql"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func TestStartGivesAnEmptyDatabaseOfItsOwn(t *testing.T) {
	a, b := Start(t), Start(t)
	if a == b {
		t.Fatalf("two tests share %s", a)
	}
	db, err := sql.Open("pgx", a)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(t.Context(), "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("public tables: %d %v", n, err)
	}
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE x (id int)"); err != nil {
		t.Fatal(err)
	}
	// The other test's database does not see it.
	other, err := sql.Open("pgx", b)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.QueryRowContext(t.Context(), "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("public tables of the other database: %d %v", n, err)
	}
}

// A row committed on the primary is on the replica once the primary dies
// (the replica is synchronous), and the multi-host URL reaches the
// replica, taking writes, once it is promoted; until then there is no
// server to write to.
func TestPairFailsOver(t *testing.T) {
	p := StartPair(t)
	db, err := sql.Open("pgx", p.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE TABLE x (id int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO x VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	p.KillPrimary()
	db.SetMaxIdleConns(0) // the connections to the dead primary go
	if _, err := db.ExecContext(ctx, "INSERT INTO x VALUES (2)"); err == nil {
		t.Fatal("a write succeeded with the primary dead and the replica not promoted")
	}
	p.Promote()
	if _, err := db.ExecContext(ctx, "INSERT INTO x VALUES (2)"); err != nil {
		t.Fatalf("a write to the promoted replica: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM x").Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows (%v), want the primary's and the new one", n, err)
	}
}
