package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrQuotaExceeded means the instance has used its daily publish quota.
var ErrQuotaExceeded = errors.New("storage: publish quota exceeded")

// PublishState is where a publish is in its life.
type PublishState string

// The states of a publish.
const (
	PublishAccepted   PublishState = "accepted"   // stored; no target resolved yet
	PublishDelivering PublishState = "delivering" // targets being resolved and notified
	PublishDone       PublishState = "done"       // every target notified or given up
)

// PublishTargetKind says what a publish's targets are.
type PublishTargetKind string

// The kinds of publish targets.
const (
	TargetInterests PublishTargetKind = "interests"
	TargetUsers     PublishTargetKind = "users"
)

// PublishEvent names a publish webhook.
type PublishEvent string

// The publish webhook events.
const (
	PublishStarted  PublishEvent = "publish_started"  // the first targets were resolved
	PublishFinished PublishEvent = "publish_finished" // the last delivery completed
)

// Publish is an accepted publish request and its progress.
type Publish struct {
	ID         string
	InstanceID string
	TargetKind PublishTargetKind
	Targets    []string        // interests or user ids
	Payload    json.RawMessage // {"apns":…, "fcm":…, "web":…}, only the given ones
	WebhookURL string          // "" when none
	State      PublishState
	Cursor     string // resolution progress (see the publishes table)
	Resolved   bool   // every target turned into deliveries
	Targeted   int    // deliveries created
	Sent       int    // accepted by a gateway
	Failed     int    // refused by a gateway, or given up
	CreatedAt  time.Time
	FinishedAt time.Time // zero until done
}

// WebhookEncoder builds the body of a publish webhook for p's current
// counts. Storage calls it inside the transaction that changes the state, so
// the webhook is stored atomically with the change it reports.
type WebhookEncoder func(p Publish, ev PublishEvent, at time.Time) []byte

const publishColumns = `id, instance_id, target_kind, targets, payload, webhook_url, state, cursor, resolved,
	targeted, sent, failed, created_at_ms, finished_at_ms`

func scanPublish(s scanner) (Publish, error) {
	var p Publish
	var kind, targets, payload, state string
	var created int64
	var finished sql.NullInt64
	if err := s.Scan(&p.ID, &p.InstanceID, &kind, &targets, &payload, &p.WebhookURL, &state, &p.Cursor, &p.Resolved,
		&p.Targeted, &p.Sent, &p.Failed, &created, &finished); err != nil {
		return Publish{}, err
	}
	p.TargetKind, p.State = PublishTargetKind(kind), PublishState(state)
	if err := json.Unmarshal([]byte(targets), &p.Targets); err != nil {
		return Publish{}, err
	}
	p.Payload = json.RawMessage(payload)
	p.CreatedAt = fromMillis(created)
	if finished.Valid {
		p.FinishedAt = fromMillis(finished.Int64)
	}
	return p, nil
}

// CreatePublish stores a new publish in the accepted state. When quota is
// positive and the instance already has quota publishes since dayStart, it
// stores nothing and returns ErrQuotaExceeded; the count and the insert are
// one transaction, so concurrent publishes cannot overshoot.
func (db *DB) CreatePublish(ctx context.Context, p Publish, quota int, dayStart time.Time) (Publish, error) {
	targets, err := json.Marshal(p.Targets)
	if err != nil {
		return Publish{}, err
	}
	p.State, p.Cursor, p.Resolved, p.Targeted, p.Sent, p.Failed = PublishAccepted, "", false, 0, 0, 0
	p.CreatedAt = now()
	err = db.write(ctx, func(tx *sql.Tx) error {
		if quota > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM publishes WHERE instance_id = ? AND created_at_ms >= ?`,
				p.InstanceID, dayStart.UnixMilli()).Scan(&n); err != nil {
				return err
			}
			if n >= quota {
				return ErrQuotaExceeded
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO publishes (`+publishColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, '', 0, 0, 0, 0, ?, NULL)`,
			p.ID, p.InstanceID, string(p.TargetKind), string(targets), string(p.Payload), p.WebhookURL, string(p.State),
			p.CreatedAt.UnixMilli())
		return conflict(err)
	})
	if err != nil {
		return Publish{}, fmt.Errorf("create publish on instance %q: %w", p.InstanceID, err)
	}
	return p, nil
}

// GetPublish returns the publish of the instance, or ErrNotFound.
func (db *DB) GetPublish(ctx context.Context, instanceID, id string) (Publish, error) {
	p, err := scanPublish(db.reader.QueryRowContext(ctx, `SELECT `+publishColumns+` FROM publishes WHERE id = ? AND instance_id = ?`, id, instanceID))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Publish{}, fmt.Errorf("get publish %q: %w", id, err)
	}
	return p, nil
}

// UnresolvedPublishes returns up to limit publishes whose targets are not
// all resolved yet, oldest first.
func (db *DB) UnresolvedPublishes(ctx context.Context, limit int) ([]Publish, error) {
	rows, err := db.reader.QueryContext(ctx, `SELECT `+publishColumns+` FROM publishes WHERE resolved = 0
		ORDER BY created_at_ms, id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("unresolved publishes: %w", err)
	}
	defer rows.Close()
	var out []Publish
	for rows.Next() {
		p, err := scanPublish(rows)
		if err != nil {
			return nil, fmt.Errorf("unresolved publishes: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Delivery is one notification to send: a device of a publish.
type Delivery struct {
	ID               int64
	PublishID        string
	InstanceID       string
	DeviceID         string
	Platform         Platform
	Token            string
	BundleIdentifier string
	UserID           string // the target user of a publish to users; "" for interests
	Attempts         int    // failed attempts so far
}

// ResolvePublishPage turns the next page of p's targets (up to pageSize
// devices of the interests, or pageSize users' devices) into deliveries for
// the platforms in platforms, advances the cursor and counts the new
// targets, all in one transaction, so a crash never resolves a device twice.
// It moves an accepted publish to delivering (storing a publish_started
// webhook when p has a webhook URL) and marks it resolved after the last
// page; a publish without any target is done at once. It returns the
// publish as stored and the number of deliveries created.
func (db *DB) ResolvePublishPage(ctx context.Context, p Publish, platforms map[Platform]bool, pageSize int, encode WebhookEncoder) (Publish, int, error) {
	var devices []Device
	last := false
	next := p.Cursor
	switch p.TargetKind {
	case TargetInterests:
		page, err := db.SubscribedDevices(ctx, p.InstanceID, p.Targets, p.Cursor, pageSize)
		if err != nil {
			return p, 0, err
		}
		devices, last = page, len(page) < pageSize
		if len(page) > 0 {
			next = page[len(page)-1].ID
		}
	case TargetUsers:
		start := 0
		if p.Cursor != "" {
			start, _ = strconv.Atoi(p.Cursor)
		}
		// A user has at most MaxUserDevices devices.
		end := min(len(p.Targets), start+max(1, pageSize/MaxUserDevices))
		page, err := db.UserDevices(ctx, p.InstanceID, p.Targets[start:end])
		if err != nil {
			return p, 0, err
		}
		devices, last, next = page, end == len(p.Targets), strconv.Itoa(end)
	default:
		return p, 0, fmt.Errorf("publish %q: unknown target kind %q", p.ID, p.TargetKind)
	}
	created := 0
	err := db.write(ctx, func(tx *sql.Tx) error {
		var cursor string
		var resolved bool
		if err := tx.QueryRowContext(ctx, `SELECT cursor, resolved, sent, failed FROM publishes WHERE id = ?`, p.ID).Scan(&cursor, &resolved, &p.Sent, &p.Failed); err != nil {
			return err
		}
		if cursor != p.Cursor || resolved {
			return fmt.Errorf("publish %q was resolved concurrently", p.ID)
		}
		ins, err := tx.PrepareContext(ctx, `INSERT INTO deliveries (publish_id, instance_id, device_id, platform, token,
			bundle_identifier, user_id, attempts, claimed, next_attempt_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, ?)
			ON CONFLICT DO NOTHING`)
		if err != nil {
			return err
		}
		defer ins.Close()
		ts := now()
		for _, d := range devices {
			if !platforms[d.Platform] {
				continue
			}
			user := "" // only a publish to users names the user in its payloads
			if p.TargetKind == TargetUsers {
				user = d.UserID
			}
			res, err := ins.ExecContext(ctx, p.ID, p.InstanceID, d.ID, string(d.Platform), d.Token, d.BundleIdentifier, user, ts.UnixMilli())
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n > 0 {
				created++
			}
		}
		started := p.State == PublishAccepted
		p.Cursor, p.Resolved, p.Targeted = next, last, p.Targeted+created
		p.State = PublishDelivering
		var finished any
		done := last && !pendingDeliveriesTx(ctx, tx, p.ID)
		if done {
			p.State, p.FinishedAt = PublishDone, ts
			finished = ts.UnixMilli()
		}
		if _, err := tx.ExecContext(ctx, `UPDATE publishes SET cursor = ?, resolved = ?, targeted = ?, state = ?, finished_at_ms = ?
			WHERE id = ?`, p.Cursor, p.Resolved, p.Targeted, string(p.State), finished, p.ID); err != nil {
			return err
		}
		if started {
			if err := enqueuePublishWebhookTx(ctx, tx, p, PublishStarted, ts, encode); err != nil {
				return err
			}
		}
		if done {
			return enqueuePublishWebhookTx(ctx, tx, p, PublishFinished, ts, encode)
		}
		return nil
	})
	if err != nil {
		return p, 0, fmt.Errorf("resolve publish %q: %w", p.ID, err)
	}
	return p, created, nil
}

func pendingDeliveriesTx(ctx context.Context, tx *sql.Tx, publishID string) bool {
	var pending bool
	err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM deliveries WHERE publish_id = ?)`, publishID).Scan(&pending)
	return err != nil || pending
}

// ReleaseDeliveryClaims makes every claimed delivery claimable again. A node
// calls it at start: claims of a process that died are void.
func (db *DB) ReleaseDeliveryClaims(ctx context.Context) (int, error) {
	res, err := db.writer.ExecContext(ctx, `UPDATE deliveries SET claimed = 0 WHERE claimed = 1`)
	if err != nil {
		return 0, fmt.Errorf("release delivery claims: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// ClaimDeliveries claims up to limit unclaimed deliveries of the platform
// due at t, in due order, and returns them.
func (db *DB) ClaimDeliveries(ctx context.Context, p Platform, t time.Time, limit int) ([]Delivery, error) {
	var out []Delivery
	err := db.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `UPDATE deliveries SET claimed = 1 WHERE id IN (
				SELECT id FROM deliveries WHERE claimed = 0 AND platform = ? AND next_attempt_at_ms <= ? ORDER BY next_attempt_at_ms, id LIMIT ?)
			RETURNING id, publish_id, instance_id, device_id, platform, token, bundle_identifier, user_id, attempts`, string(p), t.UnixMilli(), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var d Delivery
			var platform string
			if err := rows.Scan(&d.ID, &d.PublishID, &d.InstanceID, &d.DeviceID, &platform, &d.Token, &d.BundleIdentifier, &d.UserID, &d.Attempts); err != nil {
				return err
			}
			d.Platform = Platform(platform)
			out = append(out, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	return out, nil
}

// NextDeliveryDue returns when the earliest unclaimed delivery is due, and
// false when there is none.
func (db *DB) NextDeliveryDue(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullInt64
	if err := db.reader.QueryRowContext(ctx, `SELECT MIN(next_attempt_at_ms) FROM deliveries WHERE claimed = 0`).Scan(&next); err != nil {
		return time.Time{}, false, fmt.Errorf("next delivery due: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromMillis(next.Int64), true, nil
}

// DeliveryOutcome is what became of one attempt.
type DeliveryOutcome int

// The outcomes of a delivery attempt.
const (
	DeliverySent      DeliveryOutcome = iota // the gateway accepted it
	DeliveryFailed                           // refused, or given up; not retried
	DeliveryDeadToken                        // the token is dead: failed, and the device is deleted
	DeliveryRetry                            // transient failure: try again at RetryAt
)

// DeliveryResult reports the outcome of a claimed delivery.
type DeliveryResult struct {
	Delivery Delivery
	Outcome  DeliveryOutcome
	RetryAt  time.Time // for DeliveryRetry
}

// CompleteDeliveries records results in one transaction: sent and failed
// deliveries are deleted and counted on their publish, dead tokens also
// delete their device, retries are released with their next attempt time.
// Publishes whose last delivery completed become done (with a
// publish_finished webhook when they have a URL); they are returned.
func (db *DB) CompleteDeliveries(ctx context.Context, results []DeliveryResult, encode WebhookEncoder) ([]Publish, error) {
	if len(results) == 0 {
		return nil, nil
	}
	var finished []Publish
	err := db.write(ctx, func(tx *sql.Tx) error {
		del, err := tx.PrepareContext(ctx, `DELETE FROM deliveries WHERE id = ?`)
		if err != nil {
			return err
		}
		defer del.Close()
		retry, err := tx.PrepareContext(ctx, `UPDATE deliveries SET claimed = 0, attempts = attempts + 1, next_attempt_at_ms = ? WHERE id = ?`)
		if err != nil {
			return err
		}
		defer retry.Close()
		dead, err := tx.PrepareContext(ctx, `DELETE FROM devices WHERE id = ? AND instance_id = ? AND platform = ? AND token = ?`)
		if err != nil {
			return err
		}
		defer dead.Close()
		type counts struct{ sent, failed int }
		touched := map[string]*counts{}
		var order []string
		for _, r := range results {
			d := r.Delivery
			if r.Outcome == DeliveryRetry {
				if _, err := retry.ExecContext(ctx, r.RetryAt.UnixMilli(), d.ID); err != nil {
					return err
				}
				continue
			}
			res, err := del.ExecContext(ctx, d.ID)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				continue // completed already (a duplicate result)
			}
			c := touched[d.PublishID]
			if c == nil {
				c = &counts{}
				touched[d.PublishID] = c
				order = append(order, d.PublishID)
			}
			if r.Outcome == DeliverySent {
				c.sent++
			} else {
				c.failed++
			}
			if r.Outcome == DeliveryDeadToken {
				if _, err := dead.ExecContext(ctx, d.DeviceID, d.InstanceID, string(d.Platform), d.Token); err != nil {
					return err
				}
			}
		}
		ts := now()
		for _, id := range order {
			c := touched[id]
			p, err := scanPublish(tx.QueryRowContext(ctx, `UPDATE publishes SET sent = sent + ?, failed = failed + ? WHERE id = ?
				RETURNING `+publishColumns, c.sent, c.failed, id))
			if errors.Is(err, sql.ErrNoRows) {
				continue // the publish was deleted with its instance
			}
			if err != nil {
				return err
			}
			if !p.Resolved || p.State == PublishDone || pendingDeliveriesTx(ctx, tx, id) {
				continue
			}
			p.State, p.FinishedAt = PublishDone, ts
			if _, err := tx.ExecContext(ctx, `UPDATE publishes SET state = ?, finished_at_ms = ? WHERE id = ?`,
				string(p.State), ts.UnixMilli(), id); err != nil {
				return err
			}
			if err := enqueuePublishWebhookTx(ctx, tx, p, PublishFinished, ts, encode); err != nil {
				return err
			}
			finished = append(finished, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("complete deliveries: %w", err)
	}
	return finished, nil
}

// PublishWebhook is one publish webhook request waiting in its outbox.
type PublishWebhook struct {
	ID            int64
	InstanceID    string // signs the request with this instance's secret key at send time
	URL           string
	Body          []byte
	Attempts      int
	NextAttemptAt time.Time
	CreatedAt     time.Time
}

func enqueuePublishWebhookTx(ctx context.Context, tx *sql.Tx, p Publish, ev PublishEvent, ts time.Time, encode WebhookEncoder) error {
	if p.WebhookURL == "" || encode == nil {
		return nil
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO publish_webhook_outbox (instance_id, url, body, attempts, next_attempt_at_ms, created_at_ms)
		VALUES (?, ?, ?, 0, ?, ?)`, p.InstanceID, p.WebhookURL, encode(p, ev, ts), ts.UnixMilli(), ts.UnixMilli())
	return err
}

// DuePublishWebhooks returns up to limit publish webhooks due at t, oldest first.
func (db *DB) DuePublishWebhooks(ctx context.Context, t time.Time, limit int) ([]PublishWebhook, error) {
	rows, err := db.reader.QueryContext(ctx, `SELECT id, instance_id, url, body, attempts, next_attempt_at_ms, created_at_ms
		FROM publish_webhook_outbox WHERE next_attempt_at_ms <= ? ORDER BY next_attempt_at_ms, id LIMIT ?`, t.UnixMilli(), limit)
	if err != nil {
		return nil, fmt.Errorf("due publish webhooks: %w", err)
	}
	defer rows.Close()
	var out []PublishWebhook
	for rows.Next() {
		var w PublishWebhook
		var next, created int64
		if err := rows.Scan(&w.ID, &w.InstanceID, &w.URL, &w.Body, &w.Attempts, &next, &created); err != nil {
			return nil, err
		}
		w.NextAttemptAt, w.CreatedAt = fromMillis(next), fromMillis(created)
		out = append(out, w)
	}
	return out, rows.Err()
}

// DeletePublishWebhook removes a sent (or abandoned) publish webhook.
func (db *DB) DeletePublishWebhook(ctx context.Context, id int64) error {
	_, err := db.writer.ExecContext(ctx, `DELETE FROM publish_webhook_outbox WHERE id = ?`, id)
	return err
}

// RetryPublishWebhook counts a failed attempt and sets the next one.
func (db *DB) RetryPublishWebhook(ctx context.Context, id int64, next time.Time) error {
	_, err := db.writer.ExecContext(ctx, `UPDATE publish_webhook_outbox SET attempts = attempts + 1, next_attempt_at_ms = ? WHERE id = ?`,
		next.UnixMilli(), id)
	return err
}

// NextPublishWebhookDue returns when the earliest publish webhook is due, and
// false when the outbox is empty.
func (db *DB) NextPublishWebhookDue(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullInt64
	if err := db.reader.QueryRowContext(ctx, `SELECT MIN(next_attempt_at_ms) FROM publish_webhook_outbox`).Scan(&next); err != nil {
		return time.Time{}, false, err
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromMillis(next.Int64), true, nil
}

// PendingDeliveries counts the deliveries not completed yet, claimed or not.
func (db *DB) PendingDeliveries(ctx context.Context) (int, error) {
	var n int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM deliveries`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count deliveries: %w", err)
	}
	return n, nil
}
