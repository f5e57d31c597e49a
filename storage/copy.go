package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// copyTables are the tables Copy moves, parents before children. The
// schema's bookkeeping (schema_migrations, config_version) is the target's
// own, and the Publish API's rate limit buckets (publish_rate_buckets) are
// left behind: a missing bucket is a full one, which is what each of them
// is again a second after its last request, and Herald is stopped for the
// copy. notCopied names them, so that a test finds any table in neither.
var copyTables = []struct {
	name     string
	identity bool // an id column the database numbers (a PostgreSQL sequence to move on)
}{
	{"instances", false},
	{"apps", false}, // after instances: an app may name its Push instance
	{"app_webhooks", true},
	{"idempotency_keys", false},
	{"devices", false},
	{"device_interests", false},
	{"publishes", false},
	{"publish_pages", true},
	{"report_events", true},
	{"publish_report_counts", false},
	{"deliveries", true},
	{"publish_webhook_outbox", true},
	{"webhook_outbox", true},
}

// notCopied are the tables Copy leaves alone, as said above.
var notCopied = []string{"schema_migrations", "config_version", "publish_rate_buckets"}

// ErrNotEmpty means Copy's target already holds state.
var ErrNotEmpty = errors.New("storage: the target database is not empty")

// Copy moves every row of from into to, which must be empty (freshly
// migrated): a SQLite file into PostgreSQL when a deployment grows, or
// back. It runs in one write transaction on to, so a failed copy leaves it
// empty, and reads from one snapshot of from; no server should write to
// from meanwhile. It returns the rows copied per table.
func Copy(ctx context.Context, from, to *DB) (map[string]int, error) {
	counts := make(map[string]int, len(copyTables))
	err := from.read(ctx, func(src *tx) error {
		if to.d.postgres {
			// Rows streamed with COPY: a million devices take several
			// times longer as INSERTs.
			return to.pgxWrite(ctx, func(dst pgx.Tx) error {
				return copyInto(true, counts, func(q string, dest ...any) error { return dst.QueryRow(ctx, q).Scan(dest...) },
					func(table string) (int, error) { return copyTableFrom(ctx, src, dst, table) })
			})
		}
		return to.write(ctx, func(dst *tx) error {
			return copyInto(false, counts, func(q string, dest ...any) error { return dst.QueryRowContext(ctx, q).Scan(dest...) },
				func(table string) (int, error) { return copyTable(ctx, src, dst, table) })
		})
	})
	if err != nil {
		return nil, fmt.Errorf("copy: %w", err)
	}
	return counts, nil
}

// copyInto checks that the target's tables are empty, through query (a
// statement without arguments, its one row scanned into dest), and copies
// each table with table, counting its rows into counts. On PostgreSQL
// (postgres) it moves the sequence of each numbered id past the copied ids.
func copyInto(postgres bool, counts map[string]int, query func(q string, dest ...any) error, table func(name string) (int, error)) error {
	for _, t := range copyTables {
		var n int
		if err := query("SELECT COUNT(*) FROM "+t.name, &n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: %s has %d rows", ErrNotEmpty, t.name, n)
		}
	}
	for _, t := range copyTables {
		n, err := table(t.name)
		if err != nil {
			return fmt.Errorf("copying %s: %w", t.name, err)
		}
		counts[t.name] = n
		if t.identity && postgres {
			// Rows came with their ids: the next one the database
			// numbers must follow them.
			var next int64
			if err := query(`SELECT setval(pg_get_serial_sequence('`+t.name+`', 'id'),
				COALESCE((SELECT MAX(id) FROM `+t.name+`), 0) + 1, false)`, &next); err != nil {
				return err
			}
		}
	}
	return nil
}

// selectAll reads every row of the table in src, and its columns' names.
func selectAll(ctx context.Context, src *tx, table string) (*sql.Rows, []string, error) {
	rows, err := src.QueryContext(ctx, "SELECT * FROM "+table)
	if err != nil {
		return nil, nil, err
	}
	cols, err := rows.Columns()
	if err != nil {
		rows.Close()
		return nil, nil, err
	}
	return rows, cols, nil
}

// copyTableFrom streams every row of the table in src into dst with COPY,
// columns by name.
func copyTableFrom(ctx context.Context, src *tx, dst pgx.Tx, table string) (int, error) {
	rows, cols, err := selectAll(ctx, src, table)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	s := &rowsSource{rows: rows, cols: len(cols)}
	_, err = dst.CopyFrom(ctx, pgx.Identifier{table}, cols, s)
	return s.n, err
}

// copyTable inserts every row of the table in src into dst, columns by name
// (the two schemas may order them differently), in batches.
func copyTable(ctx context.Context, src, dst *tx, table string) (int, error) {
	rows, cols, err := selectAll(ctx, src, table)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	// Enough rows per statement to save round trips, few enough arguments
	// for either database's limit (SQLite: 32,766).
	per := max(1, 1000/len(cols))
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")"
	insert := func(args []any) error {
		if len(args) == 0 {
			return nil
		}
		n := len(args) / len(cols)
		q := "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES " +
			strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
		_, err := dst.ExecContext(ctx, q, args...)
		return err
	}
	var batch []any
	total := 0
	for rows.Next() {
		vals, err := scanValues(rows, len(cols))
		if err != nil {
			return total, err
		}
		batch = append(batch, vals...)
		total++
		if len(batch)/len(cols) == per {
			if err := insert(batch); err != nil {
				return total, err
			}
			batch = batch[:0]
		}
	}
	if err := rows.Err(); err != nil {
		return total, err
	}
	return total, insert(batch)
}

// scanValues reads the current row's n columns as the driver gives them.
func scanValues(rows *sql.Rows, n int) ([]any, error) {
	vals := make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return vals, rows.Scan(ptrs...)
}
