// Package appdir keeps the Channels apps in memory for the hot paths (every
// signed request and every socket looks its app up) and in step with the
// database, which the `herald apps` command may change while the server runs.
package appdir

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/storage"
)

// Directory is an in-memory, read-mostly copy of the apps table. Lookups never
// touch SQLite; Run reloads the copy when the database changes.
type Directory struct {
	db   *storage.DB
	log  *zap.Logger
	snap atomic.Pointer[snapshot]
	ver  int64 // storage.DataVersion at the last load; used only by Run
}

type snapshot struct {
	byKey map[string]*storage.App
	byID  map[string]*storage.App
}

// New loads every app from db.
func New(ctx context.Context, db *storage.DB, log *zap.Logger) (*Directory, error) {
	d := &Directory{db: db, log: log}
	if err := d.Reload(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// ByKey returns the app with the public key, or nil.
func (d *Directory) ByKey(key string) *storage.App { return d.snap.Load().byKey[key] }

// ByID returns the app with the id, or nil.
func (d *Directory) ByID(id string) *storage.App { return d.snap.Load().byID[id] }

// Reload replaces the in-memory copy with the database's apps.
func (d *Directory) Reload(ctx context.Context) error {
	ver, err := d.db.DataVersion(ctx)
	if err != nil {
		return err
	}
	apps, err := d.db.ListApps(ctx)
	if err != nil {
		return err
	}
	s := &snapshot{byKey: make(map[string]*storage.App, len(apps)), byID: make(map[string]*storage.App, len(apps))}
	for i := range apps {
		a := &apps[i]
		s.byKey[a.Key] = a
		s.byID[a.ID] = a
	}
	d.snap.Store(s)
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
		d.log.Info("apps reloaded after a database change")
		return nil
	}, func(err error) { d.log.Warn("reloading apps", zap.Error(err)) })
}
