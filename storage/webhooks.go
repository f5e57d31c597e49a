package storage

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"time"
)

// OutboxWebhook is one webhook request waiting in the durable outbox.
type OutboxWebhook struct {
	ID            int64
	AppID         string // signs the request with this app's key and secret at send time
	URL           string
	Body          []byte // the exact JSON bytes to sign and send
	Attempts      int
	NextAttemptAt time.Time // when it may be attempted (again)
	ClaimedUntil  time.Time // set by ClaimWebhooks: the claim's end
	CreatedAt     time.Time
}

// EnqueueWebhooks stores requests in the outbox in one transaction, due at
// once. It fills in their ids.
func (db *DB) EnqueueWebhooks(ctx context.Context, items []OutboxWebhook) error {
	if len(items) == 0 {
		return nil
	}
	t := now()
	return db.write(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO webhook_outbox
			(app_id, url, body, attempts, next_attempt_at_ms, created_at_ms) VALUES (?, ?, ?, 0, ?, ?)`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i := range items {
			res, err := stmt.ExecContext(ctx, items[i].AppID, items[i].URL, items[i].Body, t.UnixMilli(), t.UnixMilli())
			if err != nil {
				return err
			}
			if items[i].ID, err = res.LastInsertId(); err != nil {
				return err
			}
			items[i].NextAttemptAt, items[i].CreatedAt = t, t
		}
		return nil
	})
}

// ClaimWebhooks takes up to limit requests that are due at t, in the order
// they were written, and claims them until t+lease: until then no other call
// returns them, and they hold back later requests to the same URL, so each
// URL is served by one sender at a time. A request queued behind an older one
// to the same URL that is not due (waiting for its retry, or claimed) is left
// out, so a receiver sees events in order even across restarts.
//
// Reading and claiming are one statement: a request that one sender has
// delivered and deleted cannot be handed to another from an older read. The
// claimant deletes, reschedules (RetryWebhookAt) or releases
// (ReleaseWebhooks) each request; one it loses track of is due again when
// the claim runs out, or at once after ReleaseAllWebhookClaims.
func (db *DB) ClaimWebhooks(ctx context.Context, t time.Time, lease time.Duration, limit int) ([]OutboxWebhook, error) {
	var out []OutboxWebhook
	err := db.write(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, `UPDATE webhook_outbox SET claimed_until_ms = ?3
			WHERE id IN (SELECT w.id FROM webhook_outbox w
				WHERE w.next_attempt_at_ms <= ?1 AND COALESCE(w.claimed_until_ms, 0) <= ?1
				  AND NOT EXISTS (SELECT 1 FROM webhook_outbox o WHERE o.url = w.url AND o.id < w.id
				    AND (o.next_attempt_at_ms > ?1 OR COALESCE(o.claimed_until_ms, 0) > ?1))
				ORDER BY w.id LIMIT ?2)
			RETURNING id, app_id, url, body, attempts, claimed_until_ms, created_at_ms`, t.UnixMilli(), limit, t.Add(lease).UnixMilli())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var w OutboxWebhook
			var until, created int64
			if err := rows.Scan(&w.ID, &w.AppID, &w.URL, &w.Body, &w.Attempts, &until, &created); err != nil {
				return err
			}
			w.ClaimedUntil, w.CreatedAt = fromMillis(until), fromMillis(created)
			out = append(out, w)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	// RETURNING promises no order; senders need the order of writing.
	slices.SortFunc(out, func(a, b OutboxWebhook) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// ReleaseWebhooks gives back claimed requests that were not attempted.
func (db *DB) ReleaseWebhooks(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	return db.write(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `UPDATE webhook_outbox SET claimed_until_ms = NULL WHERE id = ?`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, id := range ids {
			if _, err := stmt.ExecContext(ctx, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// ReleaseAllWebhookClaims gives back every claimed request. Only a node that
// is alone on the database may call it, at start: the claims are its previous
// run's, cut short by a crash, and their requests are due again at once.
func (db *DB) ReleaseAllWebhookClaims(ctx context.Context) error {
	_, err := db.writer.ExecContext(ctx, `UPDATE webhook_outbox SET claimed_until_ms = NULL WHERE claimed_until_ms IS NOT NULL`)
	return err
}

// NextWebhookDue returns when the earliest request in the outbox is due, and
// false when the outbox is empty.
func (db *DB) NextWebhookDue(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullInt64
	if err := db.reader.QueryRowContext(ctx, `SELECT MIN(MAX(next_attempt_at_ms, COALESCE(claimed_until_ms, 0))) FROM webhook_outbox`).Scan(&next); err != nil {
		return time.Time{}, false, err
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromMillis(next.Int64), true, nil
}

// DeleteWebhook removes a request from the outbox (delivered or given up).
func (db *DB) DeleteWebhook(ctx context.Context, id int64) error {
	_, err := db.writer.ExecContext(ctx, `DELETE FROM webhook_outbox WHERE id = ?`, id)
	return err
}

// RetryWebhookAt records a failed attempt and when to try again.
func (db *DB) RetryWebhookAt(ctx context.Context, id int64, next time.Time) error {
	_, err := db.writer.ExecContext(ctx, `UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at_ms = ?, claimed_until_ms = NULL WHERE id = ?`, next.UnixMilli(), id)
	return err
}

// CountWebhookOutbox is the number of requests waiting in the outbox.
func (db *DB) CountWebhookOutbox(ctx context.Context) (int, error) {
	var n int
	err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM webhook_outbox`).Scan(&n)
	return n, err
}
