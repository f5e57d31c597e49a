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
