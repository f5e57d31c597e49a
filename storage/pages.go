package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// streamEnd is a stream's cursor once its last page was claimed: after
// every device id (they start with a platform's name and a dash).
const streamEnd = "~"

// Page is a claimed page of a publish's targets: the unit of work nodes
// sharing the database split a publish into, each page sent by the one node
// holding it (see ClaimPage).
type Page struct {
	ID        int64
	PublishID string
	Stream    Platform // the target stream (see PublishTargets)
	// After and End bound the page: the stream's targets after After up
	// to End.
	After, End string
	Owner      string
	// Epoch is 1 when the page is first claimed and one more each time
	// another node takes it over: it is recorded only under the epoch it
	// was claimed with (see PageResult).
	Epoch   int64
	Targets []Delivery
	// TakenOver reports that the page was claimed before by a node whose
	// lease on it ran out: that node may have sent some of it.
	TakenOver bool
	// Last reports that the page is its stream's last: every page of the
	// stream is claimed now.
	Last bool
}

// ClaimPage claims for owner, until t+lease, a page of p's targets to send:
// one whose lease ran out (see TakeOverPage) if p has one, else the next
// page of stream (see ClaimPages). It returns nil when there is neither.
// Tests and tools use it; the dispatcher takes over a page only when its
// listing saw one run out (PendingPublish.Expired), so that a publish
// nobody died on costs no probe.
func (db *DB) ClaimPage(ctx context.Context, p Publish, stream Platform, platforms map[Platform]bool, owner string, t time.Time, lease time.Duration, limit int) (*Page, error) {
	pg, err := db.TakeOverPage(ctx, p, platforms, owner, t, lease, limit)
	if pg != nil || err != nil {
		return pg, err
	}
	pages, err := db.ClaimPages(ctx, &p, []Platform{stream}, platforms, owner, t, lease, limit)
	if err != nil {
		return nil, err
	}
	return pages[0], nil
}

// ClaimPages claims for owner, until t+lease, the next page of each of p's
// streams, in one transaction (see ClaimPagesOf, which claims pages of
// several publishes at once). The page of streams[i] is pages[i], nil when
// every page of the stream was claimed (or p is resolved or gone). p's
// Cursor and State are set to the stored ones after the claim: a caller
// claiming again passes the same p.
func (db *DB) ClaimPages(ctx context.Context, p *Publish, streams []Platform, platforms map[Platform]bool, owner string, t time.Time, lease time.Duration, limit int) ([]*Page, error) {
	c := &PageClaim{Publish: p, Streams: streams, Platforms: platforms}
	if err := db.ClaimPagesOf(ctx, []*PageClaim{c}, nil, owner, t, lease, limit); err != nil {
		return nil, err
	}
	return c.Pages, nil
}

// PageClaim is one publish's part of a claim of pages (see ClaimPagesOf):
// the next page of each of its Streams.
type PageClaim struct {
	// Publish is the publish as its claimer knows it. The claim sets its
	// Cursor and State to the stored ones: a caller claiming again passes
	// the same Publish.
	Publish *Publish
	Streams []Platform
	// Platforms are those the publish has a payload for (they filter a
	// publish to users' devices).
	Platforms map[Platform]bool

	// Set by the claim: Pages[i] is the page claimed of Streams[i], nil
	// when the stream had no room (see ClaimPagesOf) or no page left;
	// Ended[i] reports that every page of Streams[i] is claimed now (or
	// the publish is resolved or gone), so that it need not be asked again.
	Pages []*Page
	Ended []bool
}

// ClaimPagesOf claims for owner, until t+lease, the next page of each
// stream of each claim, in one transaction: a resolver's round costs one,
// however many small publishes it starts. A page holds up to limit targets
// past the stream's stored cursor, which moves past them; a page that ends
// its stream says so (Page.Last). A publish still accepted is started by
// its first claim, as StartPublish does.
//
// room, when not nil, bounds the deliveries claimed per platform: a
// stream's page is claimed, in the claims' order, only while its platform
// (each of them, for a publish to users) has room for limit more, and its
// targets take their room. A stream left out for room is neither paged nor
// Ended. room is not changed.
//
// The claim and the read are one transaction, so nodes claiming pages of
// one publish at once get each target in exactly one page. A page is
// recorded (see CompletePages) only by the owner and epoch holding it; the
// holder renews its leases with RenewPages.
func (db *DB) ClaimPagesOf(ctx context.Context, claims []*PageClaim, room map[Platform]int, owner string, t time.Time, lease time.Duration, limit int) error {
	b := &claimBatch{owner: owner, untilMs: t.Add(lease).UnixMilli(), limit: limit}
	if room != nil {
		b.room = maps.Clone(room)
	}
	cs := make([]*claim, len(claims))
	for i, pc := range claims {
		cs[i] = &claim{PageClaim: pc, p: *pc.Publish}
	}
	var err error
	if db.Shared() {
		// On a shared database the write lock makes the read and the
		// claim one.
		err = db.write(ctx, func(tx *tx) error {
			for _, c := range cs {
				if err := db.claimTx(ctx, tx, b, c); err != nil {
					return err
				}
			}
			return nil
		})
	} else {
		err = db.claimReadAhead(ctx, b, cs)
	}
	if err != nil {
		if len(claims) == 1 {
			return fmt.Errorf("claim pages of publish %q: %w", claims[0].Publish.ID, err)
		}
		return fmt.Errorf("claim pages of %d publishes: %w", len(claims), err)
	}
	for _, c := range cs {
		*c.Publish = c.p
		c.Pages = c.pages
		c.Ended = make([]bool, len(c.Streams))
		for i, pg := range c.pages {
			c.Ended[i] = pg != nil && pg.Last || pg == nil && !c.skipped[i]
		}
	}
	return nil
}

// claimBatch is what the claims of one ClaimPagesOf share.
type claimBatch struct {
	owner   string
	untilMs int64
	limit   int
	room    map[Platform]int // nil: no bound
}

// fits reports whether a page of the stream has room.
func (b *claimBatch) fits(stream Platform, platforms map[Platform]bool) bool {
	if b.room == nil {
		return true
	}
	if stream != "" {
		return b.room[stream] >= b.limit
	}
	for pl, ok := range platforms {
		if ok && b.room[pl] < b.limit {
			return false
		}
	}
	return true
}

// claim is one publish's claim of pages in the making (see ClaimPagesOf):
// the publish as its claimer knows it, then as stored after the claim, and
// the pages.
type claim struct {
	*PageClaim
	p       Publish
	pages   []*Page
	skipped []bool // the streams left out for room
}

// read reads the next page of each stream after p.Cursor, and moves
// p.Cursor past them.
func (c *claim) read(ctx context.Context, db *DB, tx *tx, b *claimBatch) error {
	c.pages, c.skipped = make([]*Page, len(c.Streams)), make([]bool, len(c.Streams))
	cursor := c.p.Cursor
	for i, stream := range c.Streams {
		if c.p.streamClaimed(stream) {
			continue
		}
		if !b.fits(stream, c.Platforms) {
			c.skipped[i] = true
			continue
		}
		pg := &Page{PublishID: c.p.ID, Owner: b.owner, Stream: stream, After: c.p.StreamCursor(stream), Epoch: 1}
		var err error
		if pg.Targets, pg.End, pg.Last, err = db.targetsTx(ctx, tx, c.p, stream, c.Platforms, pg.After, "", b.limit); err != nil {
			return err
		}
		if b.room != nil {
			for _, t := range pg.Targets {
				b.room[t.Platform]--
			}
		}
		next := pg.End
		if pg.Last && c.p.TargetKind == TargetInterests {
			next = streamEnd
		}
		if cursor, err = advanceCursor(c.p.TargetKind, cursor, stream, next); err != nil {
			return err
		}
		c.pages[i] = pg
	}
	c.p.Cursor = cursor
	return nil
}

// changes reports whether the claim, read from the cursor from, has
// anything to store: pages, or the start of a publish still accepted whose
// streams had room. A claim whose streams were all claimed already (or left
// out for room) stores nothing.
func (c *claim) changes(from string) bool {
	if c.p.Cursor != from {
		return true
	}
	return c.p.State == PublishAccepted && slices.Contains(c.skipped, false)
}

// store stores the pages read and the publish's cursor after them,
// starting the publish when it is accepted, in tx. The cursor is stored
// only where it is still from (and the publish unresolved, in the state
// the claim knew): it reports false, storing nothing, when it is not.
func (c *claim) store(ctx context.Context, tx *tx, b *claimBatch, from string) (bool, error) {
	state := c.p.State
	if state == PublishAccepted {
		state = PublishDelivering // started by its first claim, here (see StartPublish)
	}
	res, err := tx.ExecContext(ctx, `UPDATE publishes SET cursor = ?, state = ? WHERE id = ? AND cursor = ? AND state = ? AND resolved = ?`,
		c.p.Cursor, string(state), c.p.ID, from, string(c.p.State), false)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	if state != c.p.State {
		c.p.State = state
		if err := enqueuePublishWebhookTx(ctx, tx, c.p, PublishStarted, now()); err != nil {
			return false, err
		}
	}
	return true, insertPagesTx(ctx, tx, c.pages, b.untilMs)
}

// claimReadAhead is ClaimPagesOf alone on the database, where nothing else
// moves a publish's cursor: the pages are read on a reader from the cursor
// each claim holds, then stored in one write transaction by statements that
// find the cursors unchanged, so the writer is held only for that (small
// publishes cost what they did before pages). A claim whose cursor moved
// all the same (its publish was stale) is read again under the writer.
func (db *DB) claimReadAhead(ctx context.Context, b *claimBatch, cs []*claim) error {
	froms := make([]string, len(cs))
	var store []int
	err := db.read(ctx, func(tx *tx) error {
		for i, c := range cs {
			froms[i] = c.p.Cursor
			if err := c.read(ctx, db, tx, b); err != nil {
				return err
			}
			if c.changes(froms[i]) {
				store = append(store, i)
			}
		}
		return nil
	})
	if err != nil || len(store) == 0 {
		return err
	}
	return db.write(ctx, func(tx *tx) error {
		for _, i := range store {
			c := cs[i]
			stored, err := c.store(ctx, tx, b, froms[i])
			if err == nil && !stored {
				err = db.claimTx(ctx, tx, b, c)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// claimTx is a claim in a write transaction, from the stored cursor.
func (db *DB) claimTx(ctx context.Context, tx *tx, b *claimBatch, c *claim) error {
	c.pages, c.skipped = make([]*Page, len(c.Streams)), make([]bool, len(c.Streams))
	var resolved bool
	var state string
	err := tx.QueryRowContext(ctx, `SELECT cursor, state, resolved FROM publishes WHERE id = ?`, c.p.ID).Scan(&c.p.Cursor, &state, &resolved)
	if errors.Is(err, sql.ErrNoRows) || err == nil && resolved {
		return nil
	}
	if err != nil {
		return err
	}
	c.p.State = PublishState(state)
	from := c.p.Cursor
	if err := c.read(ctx, db, tx, b); err != nil {
		return err
	}
	if !c.changes(from) {
		return nil
	}
	ok, err := c.store(ctx, tx, b, from)
	if err == nil && !ok {
		err = errors.New("the publish changed under the write lock")
	}
	return err
}

// insertPagesTx stores the claimed pages (nil ones skipped, each of
// another stream) in one statement, open under lease until untilMs, and
// sets their ids.
func insertPagesTx(ctx context.Context, tx *tx, pages []*Page, untilMs int64) error {
	var values []string
	var args []any
	byStream := make(map[Platform]*Page, len(pages))
	for _, pg := range pages {
		if pg != nil {
			values = append(values, "(?, ?, ?, ?, ?, 1, ?, 0, 0, 0, 0)")
			args = append(args, pg.PublishID, string(pg.Stream), pg.After, pg.End, pg.Owner, untilMs)
			byStream[pg.Stream] = pg
		}
	}
	if len(values) == 0 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, `INSERT INTO publish_pages (publish_id, stream, after_cursor, end_cursor, owner, epoch,
		lease_until_ms, done, targeted, sent, failed) VALUES `+strings.Join(values, ", ")+` RETURNING id, stream`, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() { // in no promised order
		var id int64
		var stream string
		if err := rows.Scan(&id, &stream); err != nil {
			return err
		}
		byStream[Platform(stream)].ID = id
	}
	return rows.Err()
}

// TakeOverPage claims for owner, until t+lease, a page of p whose lease ran
// out by t (its owner died or stalled), under the page's next epoch, and
// reads its range again; it returns nil when p has none. The range once
// held at most limit targets; it is read up to twice that, which leaves
// room for devices registered in it since.
func (db *DB) TakeOverPage(ctx context.Context, p Publish, platforms map[Platform]bool, owner string, t time.Time, lease time.Duration, limit int) (*Page, error) {
	var out *Page
	err := db.write(ctx, func(tx *tx) error {
		out = nil
		pg := &Page{PublishID: p.ID, Owner: owner, TakenOver: true}
		err := tx.QueryRowContext(ctx, `UPDATE publish_pages SET owner = ?, epoch = epoch + 1, lease_until_ms = ?
			WHERE id = (SELECT id FROM publish_pages WHERE publish_id = ? AND done = 0 AND lease_until_ms <= ? ORDER BY id LIMIT 1)
			RETURNING id, stream, after_cursor, end_cursor, epoch`, owner, t.Add(lease).UnixMilli(), p.ID, t.UnixMilli()).
			Scan(&pg.ID, &pg.Stream, &pg.After, &pg.End, &pg.Epoch)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if pg.Targets, _, _, err = db.targetsTx(ctx, tx, p, pg.Stream, platforms, pg.After, pg.End, 2*limit); err != nil {
			return err
		}
		out = pg
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("take over a page of publish %q: %w", p.ID, err)
	}
	return out, nil
}

// streamClaimed reports whether the last page of the stream was claimed,
// by the publish's cursor.
func (p Publish) streamClaimed(stream Platform) bool {
	if p.TargetKind == TargetUsers {
		n, _ := strconv.Atoi(p.Cursor)
		return p.Cursor != "" && n >= len(p.Targets)
	}
	return p.StreamCursor(stream) == streamEnd
}

// RenewPages extends to until the leases of owner's open pages among ids
// (the ones it has in flight); it returns how many it renewed. A page
// another node took over is no longer owner's.
func (db *DB) RenewPages(ctx context.Context, owner string, ids []int64, until time.Time) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	args := []any{until.UnixMilli(), owner}
	marks := strings.Repeat(", ?", len(ids))[2:]
	for _, id := range ids {
		args = append(args, id)
	}
	n, err := db.execCount(ctx, `UPDATE publish_pages SET lease_until_ms = ? WHERE done = 0 AND owner = ? AND id IN (`+marks+`)`, args...)
	if err != nil {
		return 0, fmt.Errorf("renew pages of %q: %w", owner, err)
	}
	return n, nil
}

// ReleasePages ends the leases of owner's open pages, left by an earlier
// run under the same name: they are taken over at once (by this run too)
// rather than renewed forever by a run that does not hold them.
func (db *DB) ReleasePages(ctx context.Context, owner string) (int, error) {
	// Open pages are of unresolved publishes only: found through them by
	// the indexes, not by a scan of every page ever recorded.
	n, err := db.execCount(ctx, `UPDATE publish_pages SET lease_until_ms = 0
		WHERE publish_id IN (SELECT id FROM publishes WHERE resolved = 0) AND done = 0 AND owner = ?`, owner)
	if err != nil {
		return 0, fmt.Errorf("release pages of %q: %w", owner, err)
	}
	return n, nil
}

// execCount runs one statement in a write transaction and returns how many
// rows it changed.
func (db *DB) execCount(ctx context.Context, query string, args ...any) (int, error) {
	var n int64
	err := db.write(ctx, func(tx *tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// PendingPublish is a publish whose targets are not all resolved yet.
type PendingPublish struct {
	Publish
	// Expired reports that a page of it is open under a lease that ran out:
	// TakeOverPage takes it over.
	Expired bool
}

// PendingPublishes returns up to limit publishes whose targets are not all
// resolved yet, oldest first, each saying whether a page of it is open
// under a lease that ran out by t.
func (db *DB) PendingPublishes(ctx context.Context, t time.Time, limit int) ([]PendingPublish, error) {
	rows, err := db.reader.QueryContext(ctx, `SELECT `+publishColumns+`,
		EXISTS (SELECT 1 FROM publish_pages AS pp WHERE pp.publish_id = publishes.id AND pp.done = 0 AND pp.lease_until_ms <= ?)
		FROM publishes WHERE resolved = 0 ORDER BY created_at_ms, id LIMIT ?`, t.UnixMilli(), limit)
	if err != nil {
		return nil, fmt.Errorf("pending publishes: %w", err)
	}
	defer rows.Close()
	var out []PendingPublish
	for rows.Next() {
		var p PendingPublish
		var err error
		p.Publish, err = scanPublish(scanWith{rows, &p.Expired})
		if err != nil {
			return nil, fmt.Errorf("pending publishes: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// scanWith scans a row's columns into a scanner's destinations and the
// extra ones after them.
type scanWith struct {
	s     scanner
	extra any
}

func (s scanWith) Scan(dest ...any) error { return s.s.Scan(append(dest, s.extra)...) }

// NodeShare is what one node did of a publish: the pages it recorded and
// their deliveries.
type NodeShare struct {
	Node                   string
	Pages                  int
	Targeted, Sent, Failed int
}

// PublishShares returns, per node (the owner of its pages, see ClaimPage),
// the recorded pages of the publish and their counts, by node name. A
// publish resolved by an earlier version, without pages, has none.
func (db *DB) PublishShares(ctx context.Context, publishID string) ([]NodeShare, error) {
	rows, err := db.reader.QueryContext(ctx, `SELECT owner, COUNT(*), SUM(targeted), SUM(sent), SUM(failed)
		FROM publish_pages WHERE publish_id = ? AND done = 1 GROUP BY owner ORDER BY owner`, publishID)
	if err != nil {
		return nil, fmt.Errorf("shares of publish %q: %w", publishID, err)
	}
	defer rows.Close()
	var out []NodeShare
	for rows.Next() {
		var s NodeShare
		if err := rows.Scan(&s.Node, &s.Pages, &s.Targeted, &s.Sent, &s.Failed); err != nil {
			return nil, fmt.Errorf("shares of publish %q: %w", publishID, err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
