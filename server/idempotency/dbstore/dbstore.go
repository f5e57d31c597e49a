// Package dbstore keeps the Idempotency-Keys of the Publish API in the
// database (storage), so that they hold across restarts and, on a shared
// PostgreSQL database, over every node. It is apart from package
// idempotency, which the cluster's Redis store imports, so that the cluster
// links no storage code.
package dbstore

import (
	"context"
	"encoding/hex"
	"time"

	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/storage"
)

// Store is the idempotency.Store of the Publish API: the keys of each Push
// instance (the scope) in the database, so they hold across restarts and,
// on a PostgreSQL database, over every node sharing it.
type Store struct {
	db       *storage.DB
	maxKeys  int
	maxBytes int
	lock     time.Duration
}

var _ idempotency.Store = (*Store)(nil)

// New returns the store over db with opts' bounds.
func New(db *storage.DB, opts idempotency.Options) *Store {
	opts = opts.WithDefaults()
	return &Store{db: db, maxKeys: opts.MaxKeys, maxBytes: opts.MaxBytes, lock: opts.Lock}
}

func keyClaim(c idempotency.Claim) storage.KeyClaim {
	return storage.KeyClaim{InstanceID: c.Scope, Key: c.Key, Token: c.Token}
}

// Begin implements Store.
func (s *Store) Begin(ctx context.Context, c idempotency.Claim, fp idempotency.Fingerprint, now time.Time) (*idempotency.Entry, error) {
	k, err := s.db.ClaimIdempotencyKey(ctx, keyClaim(c), fp.String(), now, c.LockEnd(now, s.lock), s.maxKeys)
	if err != nil || k == nil {
		return nil, err
	}
	e := &idempotency.Entry{Done: k.Status != 0, Response: idempotency.Response{Status: k.Status, Body: k.Response}}
	// A fingerprint that does not decode (none this store wrote) matches
	// no request's: the key counts as used for another.
	_, _ = hex.Decode(e.Fingerprint[:], []byte(k.Fingerprint))
	return e, nil
}

// Complete implements Store.
func (s *Store) Complete(ctx context.Context, c idempotency.Claim, res idempotency.Response) error {
	return s.db.CompleteIdempotencyKey(ctx, keyClaim(c), res.Status, res.Body, c.Expires, s.maxBytes, idempotency.KeyOverhead)
}

// Release implements Store.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	return s.db.ReleaseIdempotencyKey(ctx, keyClaim(c))
}

// Sweep deletes every expired key; the node calls it now and then, so that
// the keys of an instance that publishes no more do not stay for good.
func (s *Store) Sweep(ctx context.Context, now time.Time) error {
	_, err := s.db.PurgeIdempotencyKeys(ctx, now)
	return err
}
