package storage

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Backup writes a consistent copy of the whole database to path with
// VACUUM INTO, while the database stays in use: it reads one snapshot, so
// writes made meanwhile are either all in the copy or not at all. The copy
// is compacted and needs no WAL file, and is created readable by its owner only.
// path must not exist yet.
func (db *DB) Backup(ctx context.Context, path string) error {
	if db.d.postgres {
		return errors.New("backup: herald backup copies a SQLite file; back up PostgreSQL with its own tools (pg_dump)")
	}
	// Created here, empty and private (VACUUM INTO accepts an empty file),
	// because SQLite would create it readable by everyone: it holds every
	// secret of the database.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, privateMode)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("backup: %s already exists", path)
	} else if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := db.vacuumInto(ctx, path); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

func (db *DB) vacuumInto(ctx context.Context, path string) error {
	// A reader connection, so the writer is not held up: VACUUM INTO only
	// reads this database. query_only forbids it all the same, so it is
	// lifted on this one connection for the statement and put back after.
	conn, err := db.reader.Conn(ctx)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA query_only = 0"); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	_, err = conn.ExecContext(ctx, "VACUUM INTO ?", path)
	if _, rerr := conn.ExecContext(context.Background(), "PRAGMA query_only = 1"); rerr != nil {
		// Never hand a writable connection back to the reader pool.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	if err != nil {
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	return nil
}
