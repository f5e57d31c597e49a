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
// once, and fills in their ids.
//
// When maxPerApp > 0 it also keeps each app of items at no more than
// maxPerApp requests: in the same transaction it deletes the app's oldest
// requests that no sender has claimed, as many as the app is over, and
// returns how many it deleted per app (nil when none). The requests being
// sent are left alone, so an app stays over the cap only while more of its
// requests are in flight than the cap allows. New requests can be among the
// deleted when items alone exceed the cap; their ids then name no request.
func (db *DB) EnqueueWebhooks(ctx context.Context, items []OutboxWebhook, maxPerApp int) (dropped map[string]int, err error) {
	if len(items) == 0 {
		return nil, nil
	}
	t := now()
	err = db.write(ctx, func(tx *sql.Tx) error {
		dropped = nil
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO webhook_outbox
			(app_id, url, body, attempts, next_attempt_at_ms, created_at_ms) VALUES (?, ?, ?, 0, ?, ?)`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		newest := map[string]int64{} // per app, the id of its last request written here
		var appIDs []string
		for i := range items {
			res, err := stmt.ExecContext(ctx, items[i].AppID, items[i].URL, items[i].Body, t.UnixMilli(), t.UnixMilli())
			if err != nil {
				return err
			}
			if items[i].ID, err = res.LastInsertId(); err != nil {
				return err
			}
			items[i].NextAttemptAt, items[i].CreatedAt = t, t
			if _, ok := newest[items[i].AppID]; !ok {
				appIDs = append(appIDs, items[i].AppID)
			}
			newest[items[i].AppID] = items[i].ID
		}
		if maxPerApp <= 0 {
			return nil
		}
		for _, appID := range appIDs {
			n, err := capWebhooks(ctx, tx, appID, newest[appID], maxPerApp, t)
			if err != nil {
				return err
			}
			if n > 0 {
				if dropped == nil {
					dropped = map[string]int{}
				}
				dropped[appID] = n
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return dropped, nil
}

// capWebhooks deletes the oldest requests of an app that are not claimed at t
// until it has at most max, and returns how many it deleted; newest is the id
// of the app's last request. Every statement walks the app's entries of the
// webhook_outbox_app index only, and the count is skipped when the ids from
// the app's oldest to its newest are too few to exceed max, as they are
// unless the outbox is nearly full: counting 10,000 entries costs about as
// much as writing a batch.
func capWebhooks(ctx context.Context, tx *sql.Tx, appID string, newest int64, max int, t time.Time) (int, error) {
	var oldest int64
	if err := tx.QueryRowContext(ctx, `SELECT MIN(id) FROM webhook_outbox WHERE app_id = ?`, appID).Scan(&oldest); err != nil {
		return 0, err
	}
	if newest-oldest < int64(max) {
		return 0, nil
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM webhook_outbox WHERE app_id = ?`, appID).Scan(&n); err != nil {
		return 0, err
	}
	if n <= max {
		return 0, nil
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM webhook_outbox WHERE id IN (SELECT id FROM webhook_outbox
		WHERE app_id = ?1 AND COALESCE(claimed_until_ms, 0) <= ?2 ORDER BY id LIMIT ?3)`, appID, t.UnixMilli(), n-max)
	if err != nil {
		return 0, err
	}
	deleted, err := res.RowsAffected()
	return int(deleted), err
}

// outboxHeads defines, for the statements that follow it, the head of each
// URL's queue: its perURL (?2) oldest requests, with their due time (next)
// and claim end (claimed, 0 when never claimed). ready is the part of the
// heads that a sender may take or wait for at ?1: the requests that no older
// request of their URL, waiting for its retry, holds back.
//
// The URLs are found by skipping along the webhook_outbox_url index, one
// lookup per URL, and each head is a range of that index (as is the look for
// an older waiting request, since fewer than perURL are older), so the cost
// grows with the number of URLs and perURL, not with the number of requests
// queued.
const outboxHeads = `WITH RECURSIVE urls(url) AS (
		SELECT MIN(url) FROM webhook_outbox
		UNION ALL
		SELECT (SELECT MIN(o.url) FROM webhook_outbox o WHERE o.url > urls.url) FROM urls WHERE urls.url IS NOT NULL
	), heads AS MATERIALIZED (
		SELECT w.id, w.url, w.next_attempt_at_ms AS next, COALESCE(w.claimed_until_ms, 0) AS claimed
		FROM urls JOIN webhook_outbox w ON w.url = urls.url
		  AND w.id <= COALESCE((SELECT x.id FROM webhook_outbox x WHERE x.url = urls.url ORDER BY x.id LIMIT 1 OFFSET ?2 - 1), 9223372036854775807)
	), ready AS (
		SELECT h.* FROM heads h WHERE NOT EXISTS (SELECT 1 FROM webhook_outbox e WHERE e.url = h.url AND e.id < h.id AND e.next_attempt_at_ms > ?1)
	) `

// ClaimWebhooks takes up to limit requests that are due at t, oldest first,
// and claims them until t+lease: until then no other call returns them. Per
// URL it takes only among the perURL oldest requests of that URL, so at most
// perURL requests of a URL are claimed at any time and they are sent in the
// order they were written, up to perURL at once. A request that waits for its
// retry holds back every later request to its URL, so a failing endpoint is
// tried again before it gets anything new (and a receiver still sees events
// in order when perURL is 1, across restarts too).
//
// Reading and claiming are one statement: a request that one sender has
// delivered and deleted cannot be handed to another from an older read. The
// claimant deletes, reschedules (RetryWebhookAt) or releases
// (ReleaseWebhooks) each request; one it loses track of is due again when
// the claim runs out, or at once after ReleaseAllWebhookClaims.
func (db *DB) ClaimWebhooks(ctx context.Context, t time.Time, lease time.Duration, limit, perURL int) ([]OutboxWebhook, error) {
	var out []OutboxWebhook
	if limit <= 0 || perURL <= 0 {
		return nil, nil
	}
	err := db.write(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, outboxHeads+`UPDATE webhook_outbox SET claimed_until_ms = ?4
			WHERE id IN (SELECT id FROM ready WHERE next <= ?1 AND claimed <= ?1 ORDER BY id LIMIT ?3)
			RETURNING id, app_id, url, body, attempts, claimed_until_ms, created_at_ms`,
			t.UnixMilli(), perURL, limit, t.Add(lease).UnixMilli())
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

// NextWebhookDue returns, as seen at t by a sender taking perURL requests per
// URL (see ClaimWebhooks), when the next request will be due or its claim
// will run out, and false when the outbox is empty. Requests held back
// behind one waiting for its retry are not looked at: they cannot be due
// before it.
func (db *DB) NextWebhookDue(ctx context.Context, t time.Time, perURL int) (time.Time, bool, error) {
	var next sql.NullInt64
	if err := db.reader.QueryRowContext(ctx, outboxHeads+`SELECT MIN(MAX(next, claimed)) FROM ready`,
		t.UnixMilli(), max(perURL, 1)).Scan(&next); err != nil {
		return time.Time{}, false, err
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromMillis(next.Int64), true, nil
}

// DropExpiredWebhooks deletes the requests written before createdBefore that
// are not claimed at t, without another attempt, and returns how many it
// deleted per app (nil when none).
func (db *DB) DropExpiredWebhooks(ctx context.Context, createdBefore, t time.Time) (map[string]int, error) {
	var dropped map[string]int
	err := db.write(ctx, func(tx *sql.Tx) error {
		dropped = nil
		rows, err := tx.QueryContext(ctx, `DELETE FROM webhook_outbox
			WHERE created_at_ms < ? AND COALESCE(claimed_until_ms, 0) <= ? RETURNING app_id`,
			createdBefore.UnixMilli(), t.UnixMilli())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var appID string
			if err := rows.Scan(&appID); err != nil {
				return err
			}
			if dropped == nil {
				dropped = map[string]int{}
			}
			dropped[appID]++
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return dropped, nil
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
