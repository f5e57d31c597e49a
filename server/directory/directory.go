// Package directory keeps the Channels apps and the Push instances in memory
// for the hot paths (every signed request and every socket looks its app up;
// every Beams request its instance), in step with the database, which the
// `herald apps` and `herald instances` commands may change while the server
// runs. One generic Directory does the keeping; Apps and Instances name its
// lookups.
package directory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/storage"
)

// Directory is an in-memory, read-mostly copy of one table, indexed by one or
// more keys. Lookups never touch the database; Run reloads the copy when the
// database changes. Values are shared: callers must not modify them.
type Directory[T any] struct {
	db    *storage.DB
	log   *zap.Logger
	what  string                             // "apps", for the log
	list  func(context.Context) ([]T, error) // reads the whole table
	keys  []func(*T) string                  // one per index
	index atomic.Pointer[[]map[string]*T]    // index[i] maps keys[i]

	mu  sync.Mutex // one Reload at a time: the last to store has read the newest rows
	ver int64      // storage.DataVersion at the last load, under mu
}

func newDirectory[T any](ctx context.Context, db *storage.DB, log *zap.Logger, what string,
	list func(context.Context) ([]T, error), keys ...func(*T) string) (*Directory[T], error) {
	d := &Directory[T]{db: db, log: log, what: what, list: list, keys: keys}
	if err := d.Reload(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// lookup returns the value whose i-th key is key, or nil.
func (d *Directory[T]) lookup(i int, key string) *T { return (*d.index.Load())[i][key] }

// Reload replaces the in-memory copy with the database's rows. Run calls
// it on a change; a caller that has just changed the table may too, to see
// the change at once. Reloads run one at a time.
func (d *Directory[T]) Reload(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ver, err := d.db.DataVersion(ctx)
	if err != nil {
		return err
	}
	rows, err := d.list(ctx)
	if err != nil {
		return err
	}
	index := make([]map[string]*T, len(d.keys))
	for i := range index {
		index[i] = make(map[string]*T, len(rows))
	}
	for r := range rows {
		for i, key := range d.keys {
			index[i][key(&rows[r])] = &rows[r]
		}
	}
	d.index.Store(&index)
	d.ver = ver
	return nil
}

// Run checks the database every interval and reloads when it changed, until
// ctx ends. Errors are logged and retried at the next tick.
func (d *Directory[T]) Run(ctx context.Context, interval time.Duration) {
	d.mu.Lock()
	seen := d.ver
	d.mu.Unlock()
	d.db.PollChanges(ctx, interval, seen, func(ctx context.Context) error {
		if err := d.Reload(ctx); err != nil {
			return err
		}
		d.log.Info(d.what + " reloaded after a database change")
		return nil
	}, func(err error) { d.log.Warn("reloading "+d.what, zap.Error(err)) })
}

// Apps is the directory of Channels apps, by id and by public key.
type Apps struct{ *Directory[storage.App] }

// NewApps loads every app from db.
func NewApps(ctx context.Context, db *storage.DB, log *zap.Logger) (*Apps, error) {
	d, err := newDirectory(ctx, db, log, "apps", db.ListApps,
		func(a *storage.App) string { return a.ID },
		func(a *storage.App) string { return a.Key })
	if err != nil {
		return nil, err
	}
	return &Apps{d}, nil
}

// ByID returns the app with the id, or nil.
func (a *Apps) ByID(id string) *storage.App { return a.lookup(0, id) }

// ByKey returns the app with the public key, or nil.
func (a *Apps) ByKey(key string) *storage.App { return a.lookup(1, key) }

// Instances is the directory of Push instances, by id.
type Instances struct{ *Directory[storage.Instance] }

// NewInstances loads every instance from db.
func NewInstances(ctx context.Context, db *storage.DB, log *zap.Logger) (*Instances, error) {
	d, err := newDirectory(ctx, db, log, "instances", db.ListInstances,
		func(in *storage.Instance) string { return in.ID })
	if err != nil {
		return nil, err
	}
	return &Instances{d}, nil
}

// ByID returns the instance with the id, or nil.
func (in *Instances) ByID(id string) *storage.Instance { return in.lookup(0, id) }
