package storage

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// unavailableError is an error of the database's availability, not of the
// request: see ErrUnavailable.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return "storage: database unavailable: " + e.err.Error() }

// Unwrap returns the driver's error.
func (e *unavailableError) Unwrap() error { return e.err }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// unavailable wraps err so that it matches ErrUnavailable when it says the
// database cannot be reached or cannot write now (isUnavailable); other
// errors are returned unchanged. It is the one place that decides: every
// statement, transaction and connection of the package goes through it.
func unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !isUnavailable(err) {
		return err
	}
	return &unavailableError{err}
}

// isUnavailable reports whether err means the database cannot serve now,
// whatever was asked of it: what a PostgreSQL failover gives, from the
// primary going away to a replica taking its place.
//   - a connection that cannot be made (pgconn.ConnectError, dial errors:
//     with target_session_attrs=read-write, also while no server of a
//     multi-host URL is a primary) or is lost mid-statement (EOF, a reset,
//     database/sql's bad or done connections);
//   - SQLSTATE class 08 (connection exception), 25006 (a write in a
//     read-only transaction: a standby, or a primary demoted behind its
//     address), 57P01–57P03 (the server shuts down, crashed or cannot take
//     connections yet: starting, in recovery), 53300 (too many
//     connections).
//
// The request's own context ending (its client gone) is not unavailability.
func isUnavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "25006", "57P01", "57P02", "57P03", "53300":
			return true
		}
		return strings.HasPrefix(pe.Code, "08")
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// dbError is what the package makes of a driver's error: the NUL
// character's refusal as ErrInvalidText, unavailability as ErrUnavailable.
func dbError(err error) error { return unavailable(invalidText(err)) }

// readOnly is the error of a PostgreSQL server that answers but takes no
// writes.
var readOnly = &unavailableError{errors.New("the PostgreSQL server is read-only (a standby, or in recovery)")}

// Ready returns nil when the database answers and takes writes. On
// PostgreSQL a server that answers read-only (a standby, or a primary
// demoted behind the same address) is not ready: every write there would
// fail. A failure matches ErrUnavailable when it is one (see
// isUnavailable).
func (db *DB) Ready(ctx context.Context) error {
	if !db.d.postgres {
		_, err := db.DataVersion(ctx) // one row from a reader: the file answers
		return err
	}
	var ro string
	if err := db.writer.QueryRowContext(ctx, "SHOW transaction_read_only").Scan(&ro); err != nil {
		return err
	}
	if ro == "on" {
		return readOnly
	}
	return nil
}
