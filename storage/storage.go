// Package storage keeps a Herald node's state in one SQLite file, through the
// pure Go driver modernc.org/sqlite, or in PostgreSQL (github.com/jackc/pgx),
// which several nodes can share. It owns the SQL (see dialect.go for what
// differs), the schema migrations of both and its own domain types; callers
// use the methods on *DB and match the sentinel errors with errors.Is.
package storage

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver
)

var (
	// ErrNotFound means the requested record does not exist.
	ErrNotFound = errors.New("storage: not found")
	// ErrConflict means a record with the same unique key (id, app key, …) already exists.
	ErrConflict = errors.New("storage: conflict")
	// ErrNewerSchema means the database was migrated by a newer Herald:
	// this one would misread it.
	ErrNewerSchema = errors.New("storage: the database's schema is newer than this Herald")
	// ErrInvalidText means a string to be written holds the NUL character,
	// which PostgreSQL's text cannot store (raw, or as JSON's \u0000
	// escape): it is refused on SQLite too, so both give one answer.
	ErrInvalidText = errors.New("storage: text holds the NUL character")
	// ErrInvalidJSON means JSON to be written is not valid, or holds what
	// one of the databases would refuse (see CheckJSON, whose *JSONError
	// says what): it is refused on both, so both give one answer.
	ErrInvalidJSON = errors.New("storage: JSON the databases cannot store")
	// ErrUnknownInstance means an app was to be linked to a Push instance
	// that does not exist (App.PushInstance).
	ErrUnknownInstance = errors.New("storage: no such Push instance")
	// ErrUnavailable means the database could not be reached or cannot
	// write now — a PostgreSQL failover: the primary gone, a standby not
	// yet promoted, a connection lost — rather than anything wrong with
	// what was asked; the same request may succeed later. Each write is
	// one transaction, so nothing of it is half-written; one whose commit
	// was lost may or may not have been made.
	ErrUnavailable = errors.New("storage: the database is unavailable")
)

// DB is an open Herald database: one writer connection and a pool of reader
// connections on the same file. It is safe for concurrent use.
type DB struct {
	// writer has exactly one connection. SQLite allows one writer at a time,
	// so queueing writers in database/sql is cheaper and fairer than letting
	// several connections wait on SQLITE_BUSY. On PostgreSQL it is the one
	// pool, shared with reader.
	writer *handle
	// reader serves queries. In WAL mode readers never wait for the writer.
	reader *handle
	d      *dialect
	// observe, when set, is told how long each transaction run through
	// read and write took (see ObserveTransactions).
	observe atomic.Pointer[func(kind string, d time.Duration)]
	schema  Schema
}

// Schema is what Open found of the database's schema and did to it.
type Schema struct {
	Version int   // the schema version, after Open's migrations
	Applied []int // the migrations Open applied, oldest first (none when it was up to date)
}

// Schema reports the database's schema version and the migrations Open
// applied to reach it.
func (db *DB) Schema() Schema { return db.schema }

//go:embed migrations/*.sql migrations/postgres/*.sql
var migrations embed.FS

// IsPostgres reports whether dsn names a PostgreSQL database
// (postgres:// or postgresql://) rather than a SQLite file.
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Open opens the database dsn names and applies any pending migrations: a
// PostgreSQL URL (see IsPostgres), or the path of a SQLite file, created if
// needed. The parent directory must exist. The file is created readable by
// its owner only, and a file others may write is refused with
// ErrUnsafePermissions (see preparePrivateFiles).
func Open(ctx context.Context, dsn string) (*DB, error) {
	if IsPostgres(dsn) {
		return openPostgres(ctx, dsn)
	}
	return openSQLite(ctx, dsn)
}

func openSQLite(ctx context.Context, path string) (*DB, error) {
	// A file: URI, escaped, so a path containing '?', '#' or '%' still names
	// the file instead of being read as URI syntax. The path is made absolute
	// first: a relative one ("./herald.db", the default) would otherwise
	// become file://./herald.db, with "." read as the URI authority.
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := preparePrivateFiles(abs); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	file := (&url.URL{Scheme: "file", Path: abs}).String()

	// _txlock=immediate makes every transaction take the write lock at BEGIN,
	// so a read-then-write transaction can never fail halfway with
	// SQLITE_BUSY when another process (the herald CLI) writes the same file;
	// it waits under busy_timeout instead.
	writer, err := sql.Open("sqlite", file+"?_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)"+
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	// The writer must connect first: it switches the file to WAL, which the
	// readers rely on, and creates the schema they query.
	schema, err := migrate(ctx, &handle{writer, sqliteDialect})
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}

	// Readers use query_only rather than mode=ro: a read-only connection
	// cannot create the WAL index (-shm) file or recover after a crash, so it
	// fails in exactly the situations where a query_only one just works.
	reader, err := sql.Open("sqlite", file+"?_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	n := max(4, runtime.NumCPU())
	reader.SetMaxOpenConns(n)
	// Keep them all: opening a SQLite connection parses the schema again.
	reader.SetMaxIdleConns(n)
	if err := reader.PingContext(ctx); err != nil {
		reader.Close()
		writer.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &DB{writer: &handle{writer, sqliteDialect}, reader: &handle{reader, sqliteDialect}, d: sqliteDialect, schema: schema}, nil
}

// openPostgres connects to the PostgreSQL database at dsn (a postgres://
// URL; its connection parameters — sslmode, connect_timeout, … — apply) and applies any
// pending migrations.
func openPostgres(ctx context.Context, dsn string) (*DB, error) {
	pool, err := sql.Open("pgx", withConnectTimeout(dsn))
	if err != nil {
		return nil, fmt.Errorf("open PostgreSQL: %w", err)
	}
	n := max(8, 4*runtime.NumCPU())
	pool.SetMaxOpenConns(n)
	pool.SetMaxIdleConns(n)
	pool.SetConnMaxIdleTime(5 * time.Minute)
	d := &dialect{postgres: true}
	h := &handle{pool, d}
	if err := pool.PingContext(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open PostgreSQL: %w", err)
	}
	schema, err := migrate(ctx, h)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open PostgreSQL: %w", err)
	}
	return &DB{writer: h, reader: h, d: d, schema: schema}, nil
}

// DefaultConnectTimeout bounds each attempt to connect to a PostgreSQL
// server, unless the URL sets connect_timeout: without it, a server whose
// machine died (its packets dropped, no refusal) holds every request that
// needs a new connection for as long as the system's TCP retries (minutes),
// and a multi-host URL does not move on to the next host meanwhile.
const DefaultConnectTimeout = 5 * time.Second

// withConnectTimeout is dsn with connect_timeout=DefaultConnectTimeout
// added when it sets none.
func withConnectTimeout(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn // pgx says what is wrong with it
	}
	q := u.Query()
	if q.Get("connect_timeout") != "" {
		return dsn
	}
	q.Set("connect_timeout", strconv.Itoa(int(DefaultConnectTimeout/time.Second)))
	u.RawQuery = q.Encode()
	return u.String()
}

// Name is how dsn is shown in messages: a PostgreSQL URL without its
// user's password, a file's path as it is.
func Name(dsn string) string {
	if !IsPostgres(dsn) {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable PostgreSQL URL)" // the parser's error would quote it whole
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	u.RawQuery = ""
	return u.String()
}

// Shared reports whether other nodes may be using the database at the same
// time (PostgreSQL): claims found at start may then be theirs, not a
// crashed previous run's, and are left to expire.
func (db *DB) Shared() bool { return db.d.postgres }

// Close closes every connection. The writer closes last so that its close,
// as the last connection of this process, checkpoints the WAL.
func (db *DB) Close() error {
	if db.reader == db.writer {
		return db.writer.Close()
	}
	return errors.Join(db.reader.Close(), db.writer.Close())
}

// DataVersion returns a number that changes whenever apps, their webhooks or
// instances change, whether this process or another one (the herald CLI run
// against the same file) made the change. A server polls it to know when to
// reload its in-memory configuration.
//
// It reads a counter bumped by triggers (see migrations/0001_init.sql) rather
// than PRAGMA data_version: the pragma changes on every commit by any other
// connection, including this process's own writer and its busy tables
// (devices, deliveries, …), so a busy server would reload all the time; it
// would also need a pinned connection, because its value is per connection.
func (db *DB) DataVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := db.reader.QueryRowContext(ctx, "SELECT version FROM config_version WHERE id = 1").Scan(&v); err != nil {
		return 0, fmt.Errorf("data version: %w", err)
	}
	return v, nil
}

// migrate applies, in order, every embedded migration of the database's
// dialect not yet recorded in schema_migrations, each in its own
// transaction, and refuses a database migrated by a newer Herald.
func migrate(ctx context.Context, db *handle) (Schema, error) {
	var schema Schema
	table := `CREATE TABLE IF NOT EXISTS schema_migrations (
		version       INTEGER PRIMARY KEY,
		applied_at_ms INTEGER NOT NULL
	) STRICT`
	dir := "migrations"
	if db.d.postgres {
		table = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version       BIGINT PRIMARY KEY,
		applied_at_ms BIGINT NOT NULL
	)`
		dir = "migrations/postgres"
	}
	// Under the write lock: nodes starting together on a new PostgreSQL
	// database would otherwise race to create it.
	if err := inTx(ctx, db, func(tx *tx) error {
		_, err := tx.ExecContext(ctx, table)
		return err
	}); err != nil {
		return schema, fmt.Errorf("create schema_migrations: %w", err)
	}
	entries, err := fs.ReadDir(migrations, dir) // sorted by name
	if err != nil {
		return schema, err
	}
	prev := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		version, err := migrationVersion(name)
		if err != nil {
			return schema, err
		}
		if version <= prev {
			return schema, fmt.Errorf("migration %s: version %d does not follow %d", name, version, prev)
		}
		prev = version
		applied, err := applyMigration(ctx, db, version, dir+"/"+name)
		if err != nil {
			return schema, fmt.Errorf("migration %s: %w", name, err)
		}
		if applied {
			schema.Applied = append(schema.Applied, version)
		}
	}
	var newest sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&newest); err != nil {
		return schema, err
	}
	if newest.Int64 > int64(prev) {
		return schema, fmt.Errorf("%w: the database is at schema version %d, this Herald knows up to %d", ErrNewerSchema, newest.Int64, prev)
	}
	schema.Version = int(newest.Int64)
	return schema, nil
}

// migrationVersion parses the number in front of a name like "0001_init.sql".
func migrationVersion(name string) (int, error) {
	prefix, _, ok := strings.Cut(name, "_")
	version, err := strconv.Atoi(prefix)
	if !ok || err != nil || version <= 0 {
		return 0, fmt.Errorf("migration %s: name must start with a positive number and '_'", name)
	}
	return version, nil
}

// applyMigration applies one migration unless it is recorded as applied; it
// reports whether it applied it.
func applyMigration(ctx context.Context, db *handle, version int, path string) (bool, error) {
	script, err := migrations.ReadFile(path)
	if err != nil {
		return false, err
	}
	var applied bool
	err = inTx(ctx, db, func(tx *tx) error {
		// Checked inside the transaction, which holds the write lock, so two
		// processes opening a new database at once cannot both apply it.
		var done bool
		if err := tx.QueryRowContext(ctx,
			"SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?)", version).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil
		}
		applied = true
		// Run as written: a script holds no placeholders.
		if _, err := tx.Tx.ExecContext(ctx, string(script)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx,
			"INSERT INTO schema_migrations (version, applied_at_ms) VALUES (?, ?)", version, now().UnixMilli())
		return err
	})
	return applied && err == nil, err
}

// write runs fn in a transaction on the writer connection.
func (db *DB) write(ctx context.Context, fn func(*tx) error) error {
	defer db.timed("write", time.Now())
	return unavailable(inTx(ctx, db.writer, fn))
}

// writeRows runs fn in a write transaction that, on PostgreSQL, does not
// take the write lock: fn's statements must hold run concurrently with any
// other transaction, through the database's row locks, unique keys and ON
// CONFLICT (see lockDeviceTx). Writes of the Device API and reports, made by
// every app start of every phone, then run side by side on every node
// rather than one at a time; on SQLite, with its one writer, it is write.
func (db *DB) writeRows(ctx context.Context, fn func(*tx) error) error {
	defer db.timed("write", time.Now())
	return unavailable(inTxLocking(ctx, db.writer, !db.d.postgres, fn))
}

// read runs fn in a read-only transaction on a reader connection, so that
// several queries see one snapshot (an app and its webhooks, say).
func (db *DB) read(ctx context.Context, fn func(*tx) error) error {
	defer db.timed("read", time.Now())
	t, err := db.reader.BeginTx(ctx, db.d.readOptions())
	if err != nil {
		return unavailable(err)
	}
	defer t.Rollback() // nothing to commit
	return unavailable(fn(&tx{t, db.d}))
}

// writeLock is the PostgreSQL advisory lock every write transaction takes
// first: writes go one at a time, over every node sharing the database, as
// they do on SQLite, so each read-then-write transaction (a count checked
// before an insert, say) holds as it does there.
const writeLock = 0x68657261 // "hera"

// inTx runs fn in a write transaction on db and commits it if fn succeeds.
// On PostgreSQL it takes the write lock first.
func inTx(ctx context.Context, db *handle, fn func(*tx) error) error {
	return inTxLocking(ctx, db, true, fn)
}

// inTxLocking is inTx, taking PostgreSQL's write lock only when lock is set.
func inTxLocking(ctx context.Context, db *handle, lock bool, fn func(*tx) error) error {
	t, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if db.d.postgres && lock {
		if _, err := t.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", writeLock); err != nil {
			t.Rollback()
			return err
		}
	}
	if err := fn(&tx{t, db.d}); err != nil {
		t.Rollback()
		return err
	}
	return t.Commit()
}

// rowsAffected returns ErrNotFound when an UPDATE or DELETE matched no row.
func rowsAffected(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// now returns the current time truncated to what the *_at_ms columns keep,
// so a value returned by a Create equals what a later read returns.
func now() time.Time {
	return fromMillis(time.Now().UnixMilli())
}

func fromMillis(ms int64) time.Time {
	return time.UnixMilli(ms).UTC()
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// PollChanges calls reload whenever DataVersion moves past seen (the version
// the caller's copy reflects), checking every interval until ctx ends.
// Errors, of the check or of reload, go to onError and are retried at the
// next tick. It serves the in-memory directories of apps and instances.
func (db *DB) PollChanges(ctx context.Context, interval time.Duration, seen int64, reload func(context.Context) error, onError func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ver, err := db.DataVersion(ctx)
		if err == nil && ver == seen {
			continue
		}
		if err == nil {
			err = reload(ctx)
		}
		if err != nil {
			if ctx.Err() == nil {
				onError(err)
			}
			continue
		}
		seen = ver
	}
}
