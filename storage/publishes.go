package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	// WebhookGuarded: the webhook URL is not the Push instance's own (a
	// trigger's push_if_offline gave it), so its webhooks go only where a
	// Web Push endpoint may (netguard), never to a private address.
	WebhookGuarded bool
	State          PublishState
	// Cursor is how far pages of the targets were claimed (see ClaimPage):
	// for interests a JSON object of per-platform stream cursors (last
	// device id, or streamEnd once the stream's last page was claimed; a
	// bare id from earlier versions counts for every stream), for users the
	// number of users. StreamCursor reads it.
	Cursor     string
	Resolved   bool // every target handled: sent, failed, or stored for a retry
	Targeted   int  // deliveries created
	Sent       int  // accepted by a gateway
	Failed     int  // refused by a gateway, or given up
	CreatedAt  time.Time
	FinishedAt time.Time // zero until done
}

const publishColumns = `id, instance_id, target_kind, targets, payload, webhook_url, webhook_guarded, state, cursor, resolved,
	targeted, sent, failed, created_at_ms, finished_at_ms`

func scanPublish(s scanner) (Publish, error) {
	var p Publish
	var kind, targets, payload, state string
	var created int64
	var finished sql.NullInt64
	if err := s.Scan(&p.ID, &p.InstanceID, &kind, &targets, &payload, &p.WebhookURL, &p.WebhookGuarded, &state, &p.Cursor, &p.Resolved,
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
	for _, b := range [][]byte{targets, p.Payload} {
		if err := CheckJSON(b); err != nil {
			return Publish{}, err
		}
	}
	p.State, p.Cursor, p.Resolved, p.Targeted, p.Sent, p.Failed = PublishAccepted, "", false, 0, 0, 0
	p.CreatedAt = now()
	err = db.write(ctx, func(tx *tx) error {
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
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', 0, 0, 0, 0, ?, NULL)`,
			p.ID, p.InstanceID, string(p.TargetKind), string(targets), string(p.Payload), p.WebhookURL, p.WebhookGuarded, string(p.State),
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

// Delivery is one notification to send: a device of a publish. Deliveries
// live in memory while their page is in flight; the deliveries table holds
// only those waiting for a retry (and, from earlier versions, rows
// resolved the old way), which ClaimDeliveries hands out when due.
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

// StartPublish moves an accepted publish to delivering and, when it has a
// webhook URL, stores its publish_started webhook in the same transaction.
// A publish already past accepted is returned unchanged.
func (db *DB) StartPublish(ctx context.Context, p Publish) (Publish, error) {
	if p.State != PublishAccepted {
		return p, nil
	}
	err := db.write(ctx, func(tx *tx) error { return startPublishTx(ctx, tx, &p) })
	if err != nil {
		return p, fmt.Errorf("start publish %q: %w", p.ID, err)
	}
	return p, nil
}

// startPublishTx is StartPublish in tx; it sets p's state when it started
// it.
func startPublishTx(ctx context.Context, tx *tx, p *Publish) error {
	res, err := tx.ExecContext(ctx, `UPDATE publishes SET state = ? WHERE id = ? AND state = ?`,
		string(PublishDelivering), p.ID, string(PublishAccepted))
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil // started already, or deleted with its instance
	}
	p.State = PublishDelivering
	return enqueuePublishWebhookTx(ctx, tx, *p, PublishStarted, now())
}

// PublishTargets reads the next page of one of p's target streams, after
// cursor. A publish to interests has a stream per platform (stream is the
// platform): up to limit of its devices on the interests, each once, in
// device id order. A publish to users has one stream (""): the devices of up
// to limit/MaxUserDevices of its users, kept when on one of the platforms.
// next is the cursor after the page and last reports that the page ends the
// stream. Nothing is written: ClaimPage claims pages for sending.
func (db *DB) PublishTargets(ctx context.Context, p Publish, stream Platform, platforms map[Platform]bool, cursor string, limit int) (page []Delivery, next string, last bool, err error) {
	err = db.read(ctx, func(tx *tx) error {
		page, next, last, err = db.targetsTx(ctx, tx, p, stream, platforms, cursor, "", limit)
		return err
	})
	if err != nil {
		return nil, cursor, false, err
	}
	return page, next, last, nil
}

// targetsTx is PublishTargets in tx, the page ending at until when it is
// not "" (the end of a page read before, read again).
func (db *DB) targetsTx(ctx context.Context, tx *tx, p Publish, stream Platform, platforms map[Platform]bool, cursor, until string, limit int) (page []Delivery, next string, last bool, err error) {
	switch p.TargetKind {
	case TargetInterests:
		page, next, last, err = db.interestTargets(ctx, tx, p, stream, cursor, until, limit)
	case TargetUsers:
		start := 0
		if cursor != "" {
			start, _ = strconv.Atoi(cursor)
		}
		end := min(len(p.Targets), start+max(1, limit/MaxUserDevices))
		if until != "" {
			u, _ := strconv.Atoi(until)
			end = max(start, min(len(p.Targets), u))
		}
		var devices []Device
		devices, err = userDevicesTx(ctx, tx, p.InstanceID, p.Targets[min(start, end):end])
		for _, d := range devices {
			if platforms[d.Platform] {
				page = append(page, Delivery{PublishID: p.ID, InstanceID: p.InstanceID, DeviceID: d.ID, Platform: d.Platform,
					Token: d.Token, BundleIdentifier: d.BundleIdentifier, UserID: d.UserID})
			}
		}
		next, last = strconv.Itoa(end), end == len(p.Targets)
	default:
		err = fmt.Errorf("unknown target kind %q", p.TargetKind)
	}
	if err != nil {
		return nil, cursor, false, fmt.Errorf("targets of publish %q: %w", p.ID, err)
	}
	return page, next, last, nil
}

// interestTargets is targetsTx for a publish to interests. A device id
// starts with its platform and a dash (see NewDeviceID), so one platform's
// subscribers of an interest are one primary-key range. Each interest's
// range is read on its own and, for several interests, the ranges are
// merged here: one query with IN (…) and DISTINCT would sort every
// subscriber of every interest on each page.
func (db *DB) interestTargets(ctx context.Context, tx *tx, p Publish, platform Platform, cursor, until string, limit int) ([]Delivery, string, bool, error) {
	var page []Delivery
	lower, upper := max(cursor, string(platform)+"-"), string(platform)+"."
	if until == "" {
		until = upper // no device id is the bare prefix
	}
	q := `SELECT d.id, d.token, d.bundle_identifier
		FROM device_interests AS di JOIN devices AS d ON d.id = di.device_id
		WHERE di.instance_id = ? AND di.interest = ? AND di.device_id > ? AND di.device_id < ? AND di.device_id <= ?
		ORDER BY di.device_id LIMIT ?`
	if db.d.postgres {
		// The page's ids first, then each device by its key: once
		// PostgreSQL has statistics it would rather merge-join or hash
		// the whole devices table, which costs every page the devices
		// before it (450 s instead of seconds for a million). OFFSET 0
		// keeps it from folding the lookup back into a join.
		q = `SELECT d.id, d.token, d.bundle_identifier
		FROM (SELECT device_id FROM device_interests
			WHERE instance_id = ? AND interest = ? AND device_id > ? AND device_id < ? AND device_id <= ?
			ORDER BY device_id LIMIT ?) AS di
		CROSS JOIN LATERAL (SELECT id, token, bundle_identifier FROM devices WHERE id = di.device_id OFFSET 0) AS d
		ORDER BY di.device_id`
	}
	stmt, err := tx.PrepareContext(ctx, q)
	if err != nil {
		return nil, cursor, false, err
	}
	defer stmt.Close()
	for _, interest := range uniqueSorted(p.Targets) {
		rows, err := stmt.QueryContext(ctx, p.InstanceID, interest, lower, upper, until, limit)
		if err != nil {
			return nil, cursor, false, err
		}
		for rows.Next() {
			d := Delivery{PublishID: p.ID, InstanceID: p.InstanceID, Platform: platform}
			if err := rows.Scan(&d.DeviceID, &d.Token, &d.BundleIdentifier); err != nil {
				rows.Close()
				return nil, cursor, false, err
			}
			page = append(page, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, cursor, false, err
		}
	}
	// Each range is sorted; the union's first `limit` distinct devices are
	// the page. One snapshot read them all, so a short page is the end.
	slices.SortFunc(page, func(a, b Delivery) int { return strings.Compare(a.DeviceID, b.DeviceID) })
	page = slices.CompactFunc(page, func(a, b Delivery) bool { return a.DeviceID == b.DeviceID })
	last := len(page) < limit
	page = page[:min(len(page), limit)]
	next := cursor
	if len(page) > 0 {
		next = page[len(page)-1].DeviceID
	}
	return page, next, last, nil
}

// StreamCursor returns where the publish's target stream (see
// PublishTargets) was recorded up to; "" is its start.
func (p Publish) StreamCursor(stream Platform) string {
	c, _ := decodeCursor(p.Cursor)
	if c == nil {
		return p.Cursor // one cursor for the whole publish
	}
	return c[stream]
}

// decodeCursor reads a publish's stored cursor: a JSON object of stream
// cursors for a publish to interests; otherwise (a user index, or the one
// device id cursor of earlier versions) nil.
func decodeCursor(s string) (map[Platform]string, error) {
	if !strings.HasPrefix(s, "{") {
		return nil, nil
	}
	var c map[Platform]string
	err := json.Unmarshal([]byte(s), &c)
	return c, err
}

// advanceCursor returns the stored cursor with stream moved to next.
func advanceCursor(kind PublishTargetKind, stored string, stream Platform, next string) (string, error) {
	if kind != TargetInterests {
		return next, nil
	}
	c, err := decodeCursor(stored)
	if err != nil {
		return "", err
	}
	if c == nil { // every stream starts where the single cursor was
		c = map[Platform]string{}
		for _, p := range []Platform{PlatformAPNs, PlatformFCM, PlatformWeb} {
			c[p] = stored
		}
	}
	c[stream] = next
	b, err := json.Marshal(c)
	return string(b), err
}

// PageResult is the outcome of one page of a publish's targets (see
// ClaimPage), recorded once each of its deliveries was sent, refused, or
// left for later.
type PageResult struct {
	PublishID string
	// Page, Owner and Epoch are the claimed page (see ClaimPage): it is
	// recorded only while Owner holds it under Epoch. A page that another
	// node took over meanwhile (its lease ran out) is not recorded: that
	// node sends it again.
	Page  int64
	Owner string
	Epoch int64
	// Streams are the publish's target streams (the platforms it has a
	// payload for, or "" alone): once the last page of each was claimed
	// and none is open any more, the publish is resolved.
	Streams  []Platform
	Targeted int // deliveries of the page
	Sent     int // of those, accepted by their gateway
	Failed   int // and refused
	// Dead are the deliveries whose token is dead (counted in Failed):
	// their devices are deleted.
	Dead []Delivery
	// Later are the deliveries to try again from the deliveries table, at
	// their time, with their Attempts so far (counted neither sent nor
	// failed yet).
	Later []LaterDelivery

	// Without a Page (tests, tools recording by hand), the publish's
	// Stream cursor is set to Cursor and it is resolved when Resolved.
	Stream   Platform
	Cursor   string
	Resolved bool
}

// LaterDelivery is a delivery stored to be attempted at At.
type LaterDelivery struct {
	Delivery Delivery
	At       time.Time
}

// CompletePages records pages in one transaction: their later deliveries
// are stored, dead devices deleted, and each publish's counts advance; a
// publish whose last page this is becomes resolved, and done when nothing of
// it is left in the deliveries table (storing its publish_finished webhook).
// The publishes that became done are returned, with how many deliveries were
// in pages not recorded because another node took them over since they were
// claimed: sent twice, as that node sends them again. A crash before this
// call loses nothing: the pages' leases run out and they are sent again.
func (db *DB) CompletePages(ctx context.Context, pages []PageResult) (finished []Publish, duplicated int, err error) {
	if len(pages) == 0 {
		return nil, 0, nil
	}
	err = db.write(ctx, func(tx *tx) error {
		finished, duplicated = finished[:0], 0
		ts := now()
		// A publish's claimed pages in the batch (a small publish's, one
		// per platform, come back together) are counted into it at once.
		var counted []*PageResult
		byPublish := map[string]*PageResult{}
		for _, pg := range pages {
			found, lost := true, false
			if pg.Page != 0 {
				res, err := tx.ExecContext(ctx, `UPDATE publish_pages SET done = 1, targeted = ?, sent = ?, failed = ?
					WHERE id = ? AND owner = ? AND epoch = ? AND done = 0`, pg.Targeted, pg.Sent, pg.Failed, pg.Page, pg.Owner, pg.Epoch)
				if err != nil {
					return err
				}
				n, err := res.RowsAffected()
				if err != nil {
					return err
				}
				if n == 0 {
					// Taken over by another node, or gone with its
					// publish (deleted with its instance): asked only
					// then, so a page recorded costs one statement here.
					if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM publishes WHERE id = ?)`, pg.PublishID).Scan(&found); err != nil {
						return err
					}
					lost = found
				}
			}
			if lost {
				duplicated += pg.Targeted // the new owner reads the page again, retries and all
			} else {
				for _, l := range pg.Later {
					d := l.Delivery
					if _, err := tx.ExecContext(ctx, `INSERT INTO deliveries (publish_id, instance_id, device_id, platform, token,
						bundle_identifier, user_id, attempts, claimed, next_attempt_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)
						ON CONFLICT DO NOTHING`, d.PublishID, d.InstanceID, d.DeviceID, string(d.Platform), d.Token,
						d.BundleIdentifier, d.UserID, d.Attempts, l.At.UnixMilli()); err != nil {
						return err
					}
				}
			}
			for _, d := range pg.Dead { // a dead token is dead whoever found it
				if err := deleteDeadDeviceTx(ctx, tx, d); err != nil {
					return err
				}
			}
			switch {
			case !found || lost:
			case pg.Page == 0:
				p, err := recordByCursorTx(ctx, tx, pg)
				if errors.Is(err, sql.ErrNoRows) {
					continue // deleted with its instance
				}
				if err != nil {
					return err
				}
				if done, err := finishIfDoneTx(ctx, tx, &p, ts); err != nil {
					return err
				} else if done {
					finished = append(finished, p)
				}
			case byPublish[pg.PublishID] != nil:
				c := byPublish[pg.PublishID]
				c.Targeted, c.Sent, c.Failed = c.Targeted+pg.Targeted, c.Sent+pg.Sent, c.Failed+pg.Failed
			default:
				c := &PageResult{PublishID: pg.PublishID, Streams: pg.Streams, Targeted: pg.Targeted, Sent: pg.Sent, Failed: pg.Failed}
				byPublish[pg.PublishID] = c
				counted = append(counted, c)
			}
		}
		for _, c := range counted {
			p, resolved, err := recordPagesTx(ctx, tx, *c)
			if err != nil {
				return err
			}
			done, err := finishIfDoneTx(ctx, tx, &p, ts)
			if err != nil {
				return err
			}
			if done {
				finished = append(finished, p)
			} else if resolved {
				if _, err := tx.ExecContext(ctx, `UPDATE publishes SET resolved = ? WHERE id = ?`, true, p.ID); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("complete publish pages: %w", err)
	}
	return finished, duplicated, nil
}

// recordPagesTx adds the counts of a publish's recorded pages (c) to it,
// and reports whether they resolve it: the last page of each stream was
// claimed (its cursor) and no page of it is open any more (asked in the
// same statement). The publish is returned as updated, Resolved set when
// they resolve it; storing that is left to the caller, who writes it with
// the publish's end when nothing of it is left to send (see
// finishIfDoneTx).
func recordPagesTx(ctx context.Context, tx *tx, c PageResult) (p Publish, resolved bool, err error) {
	var open bool
	p, err = scanPublish(scanWith{tx.QueryRowContext(ctx, `UPDATE publishes SET
		targeted = targeted + ?, sent = sent + ?, failed = failed + ? WHERE id = ?
		RETURNING `+publishColumns+`, EXISTS (SELECT 1 FROM publish_pages AS pp WHERE pp.publish_id = publishes.id AND pp.done = 0)`,
		c.Targeted, c.Sent, c.Failed, c.PublishID), &open})
	if err != nil || open || p.Resolved {
		return p, false, err
	}
	for _, s := range c.Streams {
		if !p.streamClaimed(s) {
			return p, false, nil
		}
	}
	p.Resolved = true
	return p, true, nil
}

// recordByCursorTx records a page without a claim (PageResult.Page 0): its
// publish's stream cursor moves to pg.Cursor, and it is resolved when
// pg.Resolved.
func recordByCursorTx(ctx context.Context, tx *tx, pg PageResult) (Publish, error) {
	var kind, stored string
	if err := tx.QueryRowContext(ctx, `SELECT target_kind, cursor FROM publishes WHERE id = ?`, pg.PublishID).Scan(&kind, &stored); err != nil {
		return Publish{}, err
	}
	cursor, err := advanceCursor(PublishTargetKind(kind), stored, pg.Stream, pg.Cursor)
	if err != nil {
		return Publish{}, err
	}
	return scanPublish(tx.QueryRowContext(ctx, `UPDATE publishes SET cursor = ?, resolved = ?,
		targeted = targeted + ?, sent = sent + ?, failed = failed + ? WHERE id = ? RETURNING `+publishColumns,
		cursor, pg.Resolved, pg.Targeted, pg.Sent, pg.Failed, pg.PublishID))
}

// finishIfDoneTx moves a resolved publish with nothing left to send to done
// and stores its publish_finished webhook; it reports whether it did.
func finishIfDoneTx(ctx context.Context, tx *tx, p *Publish, ts time.Time) (bool, error) {
	if !p.Resolved || p.State == PublishDone || pendingDeliveriesTx(ctx, tx, p.ID) {
		return false, nil
	}
	p.State, p.FinishedAt = PublishDone, ts
	// resolved too: a publish that its last page resolves ends in one
	// statement (see recordPagesTx).
	if _, err := tx.ExecContext(ctx, `UPDATE publishes SET resolved = ?, state = ?, finished_at_ms = ? WHERE id = ?`,
		true, string(p.State), ts.UnixMilli(), p.ID); err != nil {
		return false, err
	}
	return true, enqueuePublishWebhookTx(ctx, tx, *p, PublishFinished, ts)
}

// deleteDeadDeviceTx deletes the device of a delivery whose token the
// gateway declared dead, unless it changed token meanwhile.
func deleteDeadDeviceTx(ctx context.Context, tx *tx, d Delivery) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM devices WHERE id = ? AND instance_id = ? AND platform = ? AND token = ?`,
		d.DeviceID, d.InstanceID, string(d.Platform), d.Token)
	return err
}

func pendingDeliveriesTx(ctx context.Context, tx *tx, publishID string) bool {
	var pending bool
	err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM deliveries WHERE publish_id = ?)`, publishID).Scan(&pending)
	return err != nil || pending
}

// ReleaseDeliveryClaims makes every claimed delivery claimable again. A node
// alone on its database (not Shared) calls it at start: the claims are its
// previous run's, void, and need not wait to run out.
func (db *DB) ReleaseDeliveryClaims(ctx context.Context) (int, error) {
	res, err := db.writer.ExecContext(ctx, `UPDATE deliveries SET claimed = 0 WHERE claimed = 1`)
	if err != nil {
		return 0, fmt.Errorf("release delivery claims: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// ClaimDeliveries claims, until t+lease, up to limit unclaimed deliveries
// of the platform due at t, in due order, and returns them. Claims that ran
// out by t (their node died) are given up first, so their deliveries are
// claimed again.
func (db *DB) ClaimDeliveries(ctx context.Context, p Platform, t time.Time, lease time.Duration, limit int) ([]Delivery, error) {
	var out []Delivery
	err := db.write(ctx, func(tx *tx) error {
		out = out[:0]
		if _, err := tx.ExecContext(ctx, `UPDATE deliveries SET claimed = 0 WHERE claimed = 1 AND claimed_until_ms <= ?`, t.UnixMilli()); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `UPDATE deliveries SET claimed = 1, claimed_until_ms = ? WHERE id IN (
				SELECT id FROM deliveries WHERE claimed = 0 AND platform = ? AND next_attempt_at_ms <= ? ORDER BY next_attempt_at_ms, id LIMIT ?)
			RETURNING id, publish_id, instance_id, device_id, platform, token, bundle_identifier, user_id, attempts`,
			t.Add(lease).UnixMilli(), string(p), t.UnixMilli(), limit)
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

// NextDeliveryDue returns when a delivery may next be claimed — the
// earliest unclaimed one is due, or the earliest claim runs out — and false
// when there is none.
func (db *DB) NextDeliveryDue(ctx context.Context) (time.Time, bool, error) {
	var due, runsOut sql.NullInt64
	if err := db.reader.QueryRowContext(ctx, `SELECT (SELECT MIN(next_attempt_at_ms) FROM deliveries WHERE claimed = 0),
		(SELECT MIN(claimed_until_ms) FROM deliveries WHERE claimed = 1)`).Scan(&due, &runsOut); err != nil {
		return time.Time{}, false, fmt.Errorf("next delivery due: %w", err)
	}
	switch {
	case due.Valid && runsOut.Valid:
		return fromMillis(min(due.Int64, runsOut.Int64)), true, nil
	case due.Valid:
		return fromMillis(due.Int64), true, nil
	case runsOut.Valid:
		return fromMillis(runsOut.Int64), true, nil
	}
	return time.Time{}, false, nil
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
func (db *DB) CompleteDeliveries(ctx context.Context, results []DeliveryResult) ([]Publish, error) {
	if len(results) == 0 {
		return nil, nil
	}
	var finished []Publish
	err := db.write(ctx, func(tx *tx) error {
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
				if err := deleteDeadDeviceTx(ctx, tx, d); err != nil {
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
			if done, err := finishIfDoneTx(ctx, tx, &p, ts); err != nil {
				return err
			} else if done {
				finished = append(finished, p)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("complete deliveries: %w", err)
	}
	return finished, nil
}

// PublishWebhook is one publish webhook waiting in its outbox: what
// happened to the publish, as it was when it happened. The request body is
// encoded from it when the webhook is sent (push does that), so storage
// keeps facts, not a wire format.
type PublishWebhook struct {
	ID         int64
	InstanceID string // signs the request with this instance's secret key at send time
	URL        string
	Guarded    bool // the publish's WebhookGuarded

	PublishID              string
	Event                  PublishEvent
	State                  PublishState // the publish's state after the event
	Targeted, Sent, Failed int          // the publish's counts after the event
	At                     time.Time    // when the event happened

	Attempts      int
	NextAttemptAt time.Time
	CreatedAt     time.Time
}

func enqueuePublishWebhookTx(ctx context.Context, tx *tx, p Publish, ev PublishEvent, ts time.Time) error {
	if p.WebhookURL == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO publish_webhook_outbox (instance_id, url, guarded, publish_id, event, state,
		targeted, sent, failed, at_ms, attempts, next_attempt_at_ms, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)`,
		p.InstanceID, p.WebhookURL, p.WebhookGuarded, p.ID, string(ev), string(p.State), p.Targeted, p.Sent, p.Failed, ts.UnixMilli(),
		ts.UnixMilli(), ts.UnixMilli())
	return err
}

// ClaimPublishWebhooks claims up to limit publish webhooks due at t, oldest
// first, by making them due again only at t+lease, and returns them (with
// NextAttemptAt the time they were due): the sender deletes each once sent
// or sets its retry time, and one whose sender died is due again when the
// lease runs out, for whichever node sharing the database looks first.
func (db *DB) ClaimPublishWebhooks(ctx context.Context, t time.Time, lease time.Duration, limit int) ([]PublishWebhook, error) {
	var out []PublishWebhook
	err := db.write(ctx, func(tx *tx) error {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, `SELECT id, instance_id, url, guarded, publish_id, event, state, targeted, sent, failed,
			at_ms, attempts, next_attempt_at_ms, created_at_ms
			FROM publish_webhook_outbox WHERE next_attempt_at_ms <= ? ORDER BY next_attempt_at_ms, id LIMIT ?`, t.UnixMilli(), limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			var w PublishWebhook
			var event, state string
			var at, next, created int64
			if err := rows.Scan(&w.ID, &w.InstanceID, &w.URL, &w.Guarded, &w.PublishID, &event, &state, &w.Targeted, &w.Sent, &w.Failed,
				&at, &w.Attempts, &next, &created); err != nil {
				rows.Close()
				return err
			}
			w.Event, w.State = PublishEvent(event), PublishState(state)
			w.At, w.NextAttemptAt, w.CreatedAt = fromMillis(at), fromMillis(next), fromMillis(created)
			out = append(out, w)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, w := range out {
			if _, err := tx.ExecContext(ctx, `UPDATE publish_webhook_outbox SET next_attempt_at_ms = ? WHERE id = ?`,
				t.Add(lease).UnixMilli(), w.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim publish webhooks: %w", err)
	}
	return out, nil
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
