package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// IdempotencyKey is a Publish API Idempotency-Key of an instance, as kept:
// claimed by a request still being processed (Status 0), or holding the
// answer of the request that claimed it.
type IdempotencyKey struct {
	Fingerprint string // what identifies the request (the caller's hex hash)
	Token       string // the claim's
	Status      int    // the answer's HTTP status; 0 while claimed
	Response    []byte // the answer's body
}

// KeyClaim is a request's claim of an instance's idempotency key.
type KeyClaim struct {
	InstanceID, Key string
	Token           string // names the claim: only it completes or releases the key
}

// ClaimIdempotencyKey claims c's key for a request with fingerprint at now,
// unless the key is held: then it returns what holds it, and claims
// nothing. A claim lapses at lockUntil unless completed first. Expired keys
// of the instance are deleted first, and, when the instance already holds
// maxKeys, its oldest, to make room. It is one write transaction, so of two
// requests with one key (on any node sharing the database) one claims it
// and the other sees the claim.
func (db *DB) ClaimIdempotencyKey(ctx context.Context, c KeyClaim, fingerprint string, now, lockUntil time.Time, maxKeys int) (*IdempotencyKey, error) {
	var held *IdempotencyKey
	err := db.write(ctx, func(tx *tx) error {
		nowMS := now.UnixMilli()
		if _, err := tx.ExecContext(ctx, "DELETE FROM idempotency_keys WHERE instance_id = ? AND expires_ms <= ?", c.InstanceID, nowMS); err != nil {
			return err
		}
		var k IdempotencyKey
		err := tx.QueryRowContext(ctx, `SELECT fingerprint, token, status, response FROM idempotency_keys
			WHERE instance_id = ? AND key = ?`, c.InstanceID, c.Key).Scan(&k.Fingerprint, &k.Token, &k.Status, &k.Response)
		if err == nil {
			held = &k
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM idempotency_keys WHERE instance_id = ?", c.InstanceID).Scan(&n); err != nil {
			return err
		}
		if n >= maxKeys {
			if _, err := tx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE instance_id = ? AND key IN (
				SELECT key FROM idempotency_keys WHERE instance_id = ? ORDER BY created_ms, key LIMIT ?)`,
				c.InstanceID, c.InstanceID, n-maxKeys+1); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO idempotency_keys
			(instance_id, key, fingerprint, token, status, response, created_ms, expires_ms) VALUES (?, ?, ?, ?, 0, ?, ?, ?)`,
			c.InstanceID, c.Key, fingerprint, c.Token, []byte{}, nowMS, lockUntil.UnixMilli())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim idempotency key of instance %q: %w", c.InstanceID, err)
	}
	return held, nil
}

// CompleteIdempotencyKey keeps the answer (status and body) of the request
// that claimed the key, until expires, if c is still the key's claim. Then,
// when the instance's keys cost more than maxBytes (each its key's and
// answer's bytes and overhead), its oldest are deleted until they do not:
// this one too, should its answer alone be over.
func (db *DB) CompleteIdempotencyKey(ctx context.Context, c KeyClaim, status int, response []byte, expires time.Time, maxBytes, overhead int) error {
	if response == nil {
		response = []byte{}
	}
	err := db.write(ctx, func(tx *tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET status = ?, response = ?, expires_ms = ?
			WHERE instance_id = ? AND key = ? AND token = ?`, status, response, expires.UnixMilli(), c.InstanceID, c.Key, c.Token)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		// The newest keys whose costs add up to at most maxBytes stay.
		_, err = tx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE instance_id = ? AND key IN (
			SELECT key FROM (
				SELECT key, SUM(length(key) + length(response) + ?) OVER (ORDER BY created_ms DESC, key DESC) AS total
				FROM idempotency_keys WHERE instance_id = ?) AS newest
			WHERE total > ?)`, c.InstanceID, overhead, c.InstanceID, maxBytes)
		return err
	})
	if err != nil {
		return fmt.Errorf("complete idempotency key of instance %q: %w", c.InstanceID, err)
	}
	return nil
}

// ReleaseIdempotencyKey deletes the key if c is still its claim.
func (db *DB) ReleaseIdempotencyKey(ctx context.Context, c KeyClaim) error {
	err := db.write(ctx, func(tx *tx) error {
		_, err := tx.ExecContext(ctx, "DELETE FROM idempotency_keys WHERE instance_id = ? AND key = ? AND token = ?", c.InstanceID, c.Key, c.Token)
		return err
	})
	if err != nil {
		return fmt.Errorf("release idempotency key of instance %q: %w", c.InstanceID, err)
	}
	return nil
}

// PurgeIdempotencyKeys deletes every key, of every instance, expired at now,
// and returns how many.
func (db *DB) PurgeIdempotencyKeys(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := db.write(ctx, func(tx *tx) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM idempotency_keys WHERE expires_ms <= ?", now.UnixMilli())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purge idempotency keys: %w", err)
	}
	return n, nil
}
