package storage

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"
)

// OutboxWebhook is one webhook request waiting in the durable outbox.
type OutboxWebhook struct {
	ID    int64
	AppID string // signs the request with this app's key and secret at send time
	URL   string
	Body  []byte // the exact JSON bytes to sign and send
	// Key orders the requests of one URL: those with the same key are sent
	// one at a time, in the order they were written (see ClaimWebhooks).
	Key           string
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
	err = db.write(ctx, func(tx *tx) error {
		dropped = nil
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO webhook_outbox
			(app_id, url, order_key, body, attempts, next_attempt_at_ms, created_at_ms) VALUES (?, ?, ?, ?, 0, ?, ?) RETURNING id`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		newest := map[string]int64{} // per app, the id of its last request written here
		var appIDs []string
		for i := range items {
			if err := stmt.QueryRowContext(ctx, items[i].AppID, items[i].URL, items[i].Key, items[i].Body, t.UnixMilli(), t.UnixMilli()).Scan(&items[i].ID); err != nil {
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
func capWebhooks(ctx context.Context, tx *tx, appID string, newest int64, max int, t time.Time) (int, error) {
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

// outboxHeads lists the head of each URL's queue, its ?1 oldest requests.
// The URLs are found by skipping along the webhook_outbox_url index, one
// lookup per URL, and each head is a range of that index, so the cost grows
// with the number of URLs, not with the number of requests queued.
const outboxHeads = `WITH RECURSIVE urls(url) AS (
		SELECT MIN(url) FROM webhook_outbox
		UNION ALL
		SELECT (SELECT MIN(o.url) FROM webhook_outbox o WHERE o.url > urls.url) FROM urls WHERE urls.url IS NOT NULL
	)
	SELECT w.id, w.url, w.order_key, w.next_attempt_at_ms, COALESCE(w.claimed_until_ms, 0)
	FROM urls JOIN webhook_outbox w ON w.url = urls.url
	  AND w.id <= COALESCE((SELECT x.id FROM webhook_outbox x WHERE x.url = urls.url ORDER BY x.id LIMIT 1 OFFSET ?1 - 1), 9223372036854775807)`

// headWindow is how many of a URL's oldest requests ClaimWebhooks looks at
// for perURL requests in flight: room for perURL free keys besides those in
// flight. Reading a head costs about a microsecond and a half per request (a
// claim over 30 URLs with backlogs took 3 ms with eight times perURL).
func headWindow(perURL int) int { return 2 * perURL }

// head is one request at the head of its URL's queue, as outboxHeads reads it.
type head struct {
	id            int64
	url, key      string
	next, claimed int64 // due time and claim end (0: never claimed), in ms
}

// readHeads runs outboxHeads for perURL requests in flight per URL.
func readHeads(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, perURL int) ([]head, error) {
	rows, err := q.QueryContext(ctx, outboxHeads, headWindow(perURL))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []head
	for rows.Next() {
		var h head
		if err := rows.Scan(&h.id, &h.url, &h.key, &h.next, &h.claimed); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	// Sorted here rather than by SQLite, which would copy them into a
	// temporary b-tree first.
	slices.SortFunc(out, func(a, b head) int { return cmp.Or(strings.Compare(a.url, b.url), cmp.Compare(a.id, b.id)) })
	return out, rows.Err()
}

// walkHeads applies the rules of ClaimWebhooks at t (ms) to the heads of
// each URL, in order: it calls claimable for each request that may be
// claimed now, and returns the earliest later time (ms) at which one may
// become claimable without another request finishing: a claim running out,
// or the retry that holds its URL back; 0 when there is none.
func walkHeads(heads []head, t int64, perURL int, claimable func(head)) (later int64) {
	soonest := func(ms int64) {
		if later == 0 || ms < later {
			later = ms
		}
	}
	for i := 0; i < len(heads); {
		j := i
		for j < len(heads) && heads[j].url == heads[i].url {
			j++
		}
		q := heads[i:j] // one URL's head, oldest first
		i = j
		inflight := 0
		for _, h := range q {
			if h.claimed > t {
				inflight++
			}
		}
		busy := map[string]bool{} // keys with an older request in flight or waiting to go
		for _, h := range q {
			switch {
			case h.claimed > t: // in flight
				busy[h.key] = true
				soonest(h.claimed)
				continue
			case h.next > t: // waiting for its retry: holds back the rest of its URL
				soonest(h.next)
			case !busy[h.key] && inflight < perURL:
				claimable(h)
				inflight++
				busy[h.key] = true
				continue
			default: // behind an older request of its key, or no room
				busy[h.key] = true
				continue
			}
			break
		}
	}
	return later
}

// ClaimWebhooks takes up to limit requests that are due at t, oldest first,
// and claims them until t+lease: until then no other call returns them.
//
// A URL gets at most perURL requests in flight (claimed) at once, and the
// requests of a URL with the same key one at a time, in the order they were
// written; those with other keys go at the same time. A request waiting for
// its retry holds back every later request of its URL, so a failing endpoint
// is tried again before it gets anything new. With perURL 1 a URL's requests
// go strictly one at a time, in order, across restarts too. Only a URL's
// oldest 2×perURL requests are looked at, so a run of requests of one key
// there keeps the ones behind it waiting.
//
// Reading and claiming are one transaction: a request that one sender has
// delivered and deleted cannot be handed to another from an older read. The
// claimant deletes, reschedules (RetryWebhookAt) or releases
// (ReleaseWebhooks) each request; one it loses track of is due again when
// the claim runs out, or at once after ReleaseAllWebhookClaims.
func (db *DB) ClaimWebhooks(ctx context.Context, t time.Time, lease time.Duration, limit, perURL int) ([]OutboxWebhook, error) {
	if limit <= 0 || perURL <= 0 {
		return nil, nil
	}
	var out []OutboxWebhook
	err := db.write(ctx, func(tx *tx) error {
		out = out[:0]
		heads, err := readHeads(ctx, tx, perURL)
		if err != nil {
			return err
		}
		var ids []int64
		walkHeads(heads, t.UnixMilli(), perURL, func(h head) { ids = append(ids, h.id) })
		if len(ids) == 0 {
			return nil
		}
		slices.Sort(ids) // oldest first, over every URL
		ids = ids[:min(len(ids), limit)]
		args := []any{t.Add(lease).UnixMilli()}
		marks := make([]string, len(ids))
		for i, id := range ids {
			marks[i] = "?"
			args = append(args, id)
		}
		rows, err := tx.QueryContext(ctx, `UPDATE webhook_outbox SET claimed_until_ms = ?
			WHERE id IN (`+strings.Join(marks, ",")+`)
			RETURNING id, app_id, url, order_key, body, attempts, claimed_until_ms, created_at_ms`, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var w OutboxWebhook
			var until, created int64
			if err := rows.Scan(&w.ID, &w.AppID, &w.URL, &w.Key, &w.Body, &w.Attempts, &until, &created); err != nil {
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
	return db.write(ctx, func(tx *tx) error {
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
// is alone on the database (not Shared) may call it, at start: the claims are
// its previous run's, cut short by a crash, and their requests are due again
// at once.
func (db *DB) ReleaseAllWebhookClaims(ctx context.Context) error {
	_, err := db.writer.ExecContext(ctx, `UPDATE webhook_outbox SET claimed_until_ms = NULL WHERE claimed_until_ms IS NOT NULL`)
	return err
}

// NextWebhookDue returns, as seen at t by a sender with perURL requests in
// flight per URL (see ClaimWebhooks), when a request may next be claimed
// without another finishing first: t when one may be claimed now, else when
// a retry that holds back its URL is due or a claim runs out. It returns
// false when there is no such time (the outbox is empty, or only requests
// finishing can free the next ones).
func (db *DB) NextWebhookDue(ctx context.Context, t time.Time, perURL int) (time.Time, bool, error) {
	perURL = max(perURL, 1)
	heads, err := readHeads(ctx, db.reader, perURL)
	if err != nil {
		return time.Time{}, false, err
	}
	now := false
	later := walkHeads(heads, t.UnixMilli(), perURL, func(head) { now = true })
	switch {
	case now:
		return fromMillis(t.UnixMilli()), true, nil
	case later > 0:
		return fromMillis(later), true, nil
	}
	return time.Time{}, false, nil
}

// DropExpiredWebhooks deletes the requests written before createdBefore that
// are not claimed at t, without another attempt, and returns how many it
// deleted per app (nil when none).
func (db *DB) DropExpiredWebhooks(ctx context.Context, createdBefore, t time.Time) (map[string]int, error) {
	var dropped map[string]int
	err := db.write(ctx, func(tx *tx) error {
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
