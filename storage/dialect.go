package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// dialect is what differs between the two databases Herald keeps its state
// in. The SQL is written once, in SQLite's form with ? placeholders (or ?N
// for an argument used twice), booleans as 0/1 integers and JSON arrays as
// text; for PostgreSQL the placeholders are rewritten to $N, booleans are
// passed as integers, and the few JSON functions are spelled its way.
type dialect struct {
	postgres bool
	rebound  sync.Map // query → its PostgreSQL form
}

var sqliteDialect = &dialect{}

// rebind returns q with its placeholders in the database's form.
func (d *dialect) rebind(q string) string {
	if !d.postgres {
		return q
	}
	if r, ok := d.rebound.Load(q); ok {
		return r.(string)
	}
	r := rebindDollar(q)
	d.rebound.Store(q, r)
	return r
}

// rebindDollar turns ? into $1, $2, … in order, and ?N into $N, outside
// quoted strings and identifiers.
func rebindDollar(q string) string {
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch c {
		case '\'', '"':
			end := strings.IndexByte(q[i+1:], c)
			if end < 0 {
				b.WriteString(q[i:])
				return b.String()
			}
			b.WriteString(q[i : i+end+2])
			i += end + 1
		case '?':
			j := i + 1
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			b.WriteByte('$')
			if j > i+1 {
				b.WriteString(q[i+1 : j])
			} else {
				n++
				b.WriteString(strconv.Itoa(n))
			}
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// args returns the arguments as the database takes them: PostgreSQL keeps
// booleans in integer columns, and its driver will not turn a bool into one.
func (d *dialect) args(args []any) []any {
	if !d.postgres {
		return args
	}
	var out []any
	for i, a := range args {
		var v any
		switch a := a.(type) {
		case bool:
			v = boolInt(a)
		case *bool:
			if a == nil {
				v = nil
			} else {
				v = boolInt(*a)
			}
		case sql.NullBool:
			if a.Valid {
				v = boolInt(a.Bool)
			}
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = v
	}
	if out == nil {
		return args
	}
	return out
}

func boolInt(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// eachJSON is a FROM item giving the elements of the JSON array text expr,
// as text, in a column value of the alias.
func (d *dialect) eachJSON(expr, alias string) string {
	if d.postgres {
		return "jsonb_array_elements_text(" + expr + "::jsonb) " + alias + "(value)"
	}
	return "json_each(" + expr + ") " + alias
}

// jsonLength is the length of the JSON array text expr.
func (d *dialect) jsonLength(expr string) string {
	if d.postgres {
		return "jsonb_array_length(" + expr + "::jsonb)"
	}
	return "json_array_length(" + expr + ")"
}

// least is the smaller of the expressions a and b: SQLite's scalar min(),
// PostgreSQL's LEAST() (where min() is only the aggregate).
func (d *dialect) least(a, b string) string {
	if d.postgres {
		return "LEAST(" + a + ", " + b + ")"
	}
	return "min(" + a + ", " + b + ")"
}

// greatest is the larger of the expressions a and b: SQLite's scalar max(),
// PostgreSQL's GREATEST().
func (d *dialect) greatest(a, b string) string {
	if d.postgres {
		return "GREATEST(" + a + ", " + b + ")"
	}
	return "max(" + a + ", " + b + ")"
}

// readOptions are those of a read transaction: one snapshot for all its
// queries (SQLite's transactions always have one).
func (d *dialect) readOptions() *sql.TxOptions {
	if d.postgres {
		return &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}
	}
	return &sql.TxOptions{ReadOnly: true}
}

// conflict turns the database's rejection of a duplicate primary or unique
// key into ErrConflict, keeping its message, which names the key. Other
// errors are returned unchanged.
func conflict(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return fmt.Errorf("%w: %s", ErrConflict, se.Error())
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
		return fmt.Errorf("%w: %s", ErrConflict, pe.Error())
	}
	return err
}

// checkText is ErrInvalidText when a string argument of a query holds the
// NUL character, on either database (see ErrInvalidText): a write is
// refused, and so is a look-up, which could match nothing stored.
func checkText(args []any) error {
	for _, a := range args {
		// Strings only: []byte goes to binary columns, which hold any byte.
		if s, ok := a.(string); ok && strings.IndexByte(s, 0) >= 0 {
			return ErrInvalidText
		}
	}
	return nil
}

// invalidText turns PostgreSQL's refusal of a NUL character (22021: a raw
// one in text; 22P05: JSON's \u0000 escape cast to jsonb, as the CHECKs on
// JSON columns do) into ErrInvalidText. Other errors are returned unchanged.
func invalidText(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "22021" || pe.Code == "22P05") {
		return fmt.Errorf("%w: %s", ErrInvalidText, pe.Message)
	}
	return err
}

// row is a *sql.Row, or the error that refused its query's arguments
// before it ran.
type row struct {
	*sql.Row
	err error
}

// Scan is sql.Row's, with dbError's mapping.
func (r *row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return dbError(r.Row.Scan(dest...))
}

// Err is sql.Row's.
func (r *row) Err() error {
	if r.err != nil {
		return r.err
	}
	return dbError(r.Row.Err())
}

// handle is a connection pool that speaks the dialect.
type handle struct {
	*sql.DB
	d *dialect
}

func (h *handle) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if err := checkText(args); err != nil {
		return nil, err
	}
	res, err := h.DB.ExecContext(ctx, h.d.rebind(q), h.d.args(args)...)
	return res, dbError(err)
}

func (h *handle) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := checkText(args); err != nil {
		return nil, err
	}
	rows, err := h.DB.QueryContext(ctx, h.d.rebind(q), h.d.args(args)...)
	return rows, dbError(err)
}

func (h *handle) QueryRowContext(ctx context.Context, q string, args ...any) *row {
	if err := checkText(args); err != nil {
		return &row{err: err}
	}
	return &row{Row: h.DB.QueryRowContext(ctx, h.d.rebind(q), h.d.args(args)...)}
}

// tx is a transaction that speaks the dialect.
type tx struct {
	*sql.Tx
	d *dialect
}

func (t *tx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if err := checkText(args); err != nil {
		return nil, err
	}
	res, err := t.Tx.ExecContext(ctx, t.d.rebind(q), t.d.args(args)...)
	return res, dbError(err)
}

func (t *tx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := checkText(args); err != nil {
		return nil, err
	}
	rows, err := t.Tx.QueryContext(ctx, t.d.rebind(q), t.d.args(args)...)
	return rows, dbError(err)
}

func (t *tx) QueryRowContext(ctx context.Context, q string, args ...any) *row {
	if err := checkText(args); err != nil {
		return &row{err: err}
	}
	return &row{Row: t.Tx.QueryRowContext(ctx, t.d.rebind(q), t.d.args(args)...)}
}

// PrepareContext prepares q, to run many times in t. On PostgreSQL it only
// keeps q: pgx keeps every statement a connection ran prepared already (its
// statement cache), and a prepared statement of its own would cost two more
// round trips, to parse it and to close it.
func (t *tx) PrepareContext(ctx context.Context, q string) (*stmt, error) {
	if t.d.postgres {
		return &stmt{t: t, q: q}, nil
	}
	s, err := t.Tx.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &stmt{s: s, t: t, q: q}, nil
}

// stmt is a statement of a transaction, prepared on SQLite (see
// PrepareContext), that speaks the dialect.
type stmt struct {
	s *sql.Stmt // nil on PostgreSQL
	t *tx
	q string
}

func (s *stmt) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	if s.s == nil {
		return s.t.ExecContext(ctx, s.q, args...)
	}
	if err := checkText(args); err != nil {
		return nil, err
	}
	res, err := s.s.ExecContext(ctx, args...)
	return res, dbError(err)
}

func (s *stmt) QueryContext(ctx context.Context, args ...any) (*sql.Rows, error) {
	if s.s == nil {
		return s.t.QueryContext(ctx, s.q, args...)
	}
	if err := checkText(args); err != nil {
		return nil, err
	}
	rows, err := s.s.QueryContext(ctx, args...)
	return rows, dbError(err)
}

func (s *stmt) QueryRowContext(ctx context.Context, args ...any) *row {
	if s.s == nil {
		return s.t.QueryRowContext(ctx, s.q, args...)
	}
	if err := checkText(args); err != nil {
		return &row{err: err}
	}
	return &row{Row: s.s.QueryRowContext(ctx, args...)}
}

// Close releases the prepared statement.
func (s *stmt) Close() error {
	if s.s == nil {
		return nil
	}
	return s.s.Close()
}
