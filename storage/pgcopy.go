package storage

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgxWrite runs fn in a write transaction on one of the pool's PostgreSQL
// connections, spoken to through pgx itself rather than database/sql: bulk
// writes stream their rows with COPY (pgx.Tx.CopyFrom), which database/sql
// cannot. Like write, it takes the write lock first; statements fn runs
// through the pgx.Tx use $N placeholders.
func (db *DB) pgxWrite(ctx context.Context, fn func(pgx.Tx) error) error {
	conn, err := db.writer.Conn(ctx)
	if err != nil {
		return unavailable(err)
	}
	defer conn.Close()
	return unavailable(conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errors.New("not a pgx connection")
		}
		return pgx.BeginFunc(ctx, sc.Conn(), func(t pgx.Tx) error {
			if _, err := t.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", writeLock); err != nil {
				return err
			}
			return fn(t)
		})
	}))
}

// rowsSource streams the rows of a query into CopyFrom, each scanned as
// the driver gives it.
type rowsSource struct {
	rows *sql.Rows
	cols int
	vals []any
	err  error
	n    int // rows read
}

func (s *rowsSource) Next() bool {
	if s.err != nil || !s.rows.Next() {
		return false
	}
	s.vals, s.err = scanValues(s.rows, s.cols)
	s.n++
	return s.err == nil
}

func (s *rowsSource) Values() ([]any, error) { return s.vals, s.err }

func (s *rowsSource) Err() error {
	if s.err != nil {
		return s.err
	}
	return s.rows.Err()
}
