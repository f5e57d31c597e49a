// Package instancedir keeps the Push instances in memory for the Device,
// Reporting and Publish APIs, which look their instance up on every request,
// and in step with the database, which `herald instances` may change while
// the server runs. It mirrors appdir.
package instancedir

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/storage"
)

// Directory is an in-memory, read-mostly copy of the instances table.
// Lookups never touch SQLite; Run reloads the copy when the database changes.
type Directory struct {
	db   *storage.DB
	log  *zap.Logger
	byID atomic.Pointer[map[string]*storage.Instance]
	ver  int64 // storage.DataVersion at the last load; used only by Run
}

// New loads every instance from db.
func New(ctx context.Context, db *storage.DB, log *zap.Logger) (*Directory, error) {
	d := &Directory{db: db, log: log}
	if err := d.Reload(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// ByID returns the instance with the id, or nil. The instance is shared:
// callers must not modify it.
func (d *Directory) ByID(id string) *storage.Instance { return (*d.byID.Load())[id] }

// Reload replaces the in-memory copy with the database's instances.
func (d *Directory) Reload(ctx context.Context) error {
	ver, err := d.db.DataVersion(ctx)
	if err != nil {
		return err
	}
	list, err := d.db.ListInstances(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]*storage.Instance, len(list))
	for i := range list {
		m[list[i].ID] = &list[i]
	}
	d.byID.Store(&m)
	d.ver = ver
	return nil
}

// Run checks the database every interval and reloads when it changed, until
// ctx ends. Errors are logged and retried at the next tick.
func (d *Directory) Run(ctx context.Context, interval time.Duration) {
	d.db.PollChanges(ctx, interval, d.ver, func(ctx context.Context) error {
		if err := d.Reload(ctx); err != nil {
			return err
		}
		d.log.Info("instances reloaded after a database change")
		return nil
	}, func(err error) { d.log.Warn("reloading instances", zap.Error(err)) })
}
