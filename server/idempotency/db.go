package idempotency

import (
	"context"
	"encoding/hex"
	"time"

	"github.com/heraldrt/herald/storage"
)

// DB is the Store of the Publish API: the keys of each Push instance (the
// scope) in the database, so they hold across restarts and, on a
// PostgreSQL database, over every node sharing it.
type DB struct {
	db      *storage.DB
	maxKeys int
	lock    time.Duration
}

var _ Store = (*DB)(nil)

// NewDB returns the store over db with opts' bounds.
func NewDB(db *storage.DB, opts Options) *DB {
	opts = opts.WithDefaults()
	return &DB{db: db, maxKeys: opts.MaxKeys, lock: opts.Lock}
}

func keyClaim(c Claim) storage.KeyClaim {
	return storage.KeyClaim{InstanceID: c.Scope, Key: c.Key, Token: c.Token}
}

// Begin implements Store.
func (s *DB) Begin(ctx context.Context, c Claim, fp Fingerprint, now time.Time) (*Entry, error) {
	k, err := s.db.ClaimIdempotencyKey(ctx, keyClaim(c), fp.String(), now, claimEnd(c, now, s.lock), s.maxKeys)
	if err != nil || k == nil {
		return nil, err
	}
	e := &Entry{Done: k.Status != 0, Response: Response{Status: k.Status, Body: k.Response}}
	// A fingerprint that does not decode (none this store wrote) matches
	// no request's: the key counts as used for another.
	_, _ = hex.Decode(e.Fingerprint[:], []byte(k.Fingerprint))
	return e, nil
}

// Complete implements Store.
func (s *DB) Complete(ctx context.Context, c Claim, res Response) error {
	return s.db.CompleteIdempotencyKey(ctx, keyClaim(c), res.Status, res.Body, c.Expires)
}

// Release implements Store.
func (s *DB) Release(ctx context.Context, c Claim) error {
	return s.db.ReleaseIdempotencyKey(ctx, keyClaim(c))
}

// Sweep deletes every expired key; the node calls it now and then, so that
// the keys of an instance that publishes no more do not stay for good.
func (s *DB) Sweep(ctx context.Context, now time.Time) error {
	_, err := s.db.PurgeIdempotencyKeys(ctx, now)
	return err
}
