package push

import (
	"cmp"
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/storage"
)

// resolve claims pages of the targets of unresolved publishes and hands
// them out, oldest publish first, whenever the page's gateway has room in
// flight: every gateway is kept busy, and a slow one holds up only its own
// streams. Nodes sharing the database claim pages of the same publishes, so
// a large one is sent by all of them at once.
func (d *Dispatcher) resolve(ctx context.Context) {
	// Idle, it looks for work every second alone, and four times as often
	// on a shared database, where a publish another node accepted wakes
	// no one here: the sooner it is seen, the more of it this node sends.
	idle := time.Second
	if d.db.Shared() {
		idle = time.Second / 4
	}
	idle = cmp.Or(d.opts.idlePoll, idle)
	var active []*reading
	var listed time.Time
	relist := true
	for ctx.Err() == nil {
		progressed := false
		panicked := d.panics.Do(d.log, "round of the publish resolver", func() {
			if relist || time.Since(listed) > time.Second {
				active, listed = d.listPublishes(ctx), time.Now()
			}
			var claims []*storage.PageClaim
			var of []*reading
			for _, r := range active {
				if r.expired && d.room(r, "") {
					// The listing saw a page of it run out on another
					// node (or an earlier run): take it over, whatever its
					// stream. Only then: a publish nobody died on costs no
					// probe.
					progressed = d.takeOver(ctx, r) || progressed
				}
				// The next page of every stream with room.
				var next []storage.Platform
				for _, pl := range streamOrder {
					st := r.streams[pl]
					if st != nil && !st.exhausted && d.room(r, pl) {
						next = append(next, pl)
					}
				}
				if len(next) > 0 {
					claims = append(claims, &storage.PageClaim{Publish: &r.publish, Streams: next, Platforms: r.wanted})
					of = append(of, r)
				}
			}
			// Every publish's pages in one claim: a round of many small
			// publishes costs one transaction, not one each.
			if len(claims) > 0 {
				progressed = d.claimPages(ctx, of, claims) || progressed
			}
		})
		// After a panic the round's progress is unknown: list again, after
		// a pause so that a panic that repeats does not spin.
		relist = !progressed || panicked
		if !progressed || panicked {
			fire, stop := d.opts.timer(idle)
			select {
			case <-ctx.Done():
			case <-d.wakeResolver:
			case <-fire:
			}
			stop()
		}
	}
}

// renew renews the leases of the pages in flight here every quarter of a
// lease, in a loop of its own: a resolver or a recorder that waits (on the
// database, on a full gateway) must not let them run out.
func (d *Dispatcher) renew(ctx context.Context) {
	ticks, stop := d.opts.ticker(d.opts.Lease / 4)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		d.mu.Lock()
		open := make([]int64, 0, len(d.claimed))
		for id := range d.claimed {
			open = append(open, id)
		}
		d.mu.Unlock()
		if len(open) == 0 {
			continue
		}
		if _, err := d.db.RenewPages(ctx, d.opts.Owner, open, d.opts.now().Add(d.opts.Lease)); err != nil && ctx.Err() == nil {
			d.log.Error("renewing the leases of pages in flight", zap.Error(err))
		}
	}
}

// streamOrder is the order the resolver visits a publish's streams in.
var streamOrder = []storage.Platform{storage.PlatformAPNs, storage.PlatformFCM, storage.PlatformWeb, ""}

// listPublishes returns the unresolved publishes, oldest first, with the
// resolver's state of each, starting the ones seen the first time. A publish no longer listed
// is forgotten once its pages here are recorded.
func (d *Dispatcher) listPublishes(ctx context.Context) []*reading {
	now := time.Now()
	d.mu.Lock()
	busy := len(d.reading)
	d.mu.Unlock()
	pubs, err := d.db.PendingPublishes(ctx, now, 64+busy)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Error("listing publishes to resolve", zap.Error(err))
		}
		return nil
	}
	listed := make(map[string]bool, len(pubs))
	for _, p := range pubs {
		listed[p.ID] = true
	}
	d.mu.Lock()
	for id, r := range d.reading {
		if !listed[id] && r.open == 0 {
			delete(d.reading, id) // resolved
		}
	}
	d.mu.Unlock()
	var out []*reading
	for _, p := range pubs {
		d.mu.Lock()
		r := d.reading[p.ID]
		d.mu.Unlock()
		if r == nil {
			if r = d.startReading(ctx, p.Publish); r == nil {
				continue
			}
			d.mu.Lock()
			d.reading[p.ID] = r
			d.mu.Unlock()
		}
		r.expired = p.Expired
		out = append(out, r)
	}
	return out
}

// startReading sets up the resolver's state of a publish: its payload and
// streams. It returns nil when that failed.
func (d *Dispatcher) startReading(ctx context.Context, p storage.Publish) *reading {
	payload := d.takeAccepted(p.ID)
	if payload == nil {
		var err error
		parse := func() { payload, err = ParseStoredPayload(p.Payload) }
		if d.panics.Do(d.log, "stored payload", parse, zap.String("publish", p.ID)) {
			payload, err = nil, errors.New("parsing it panicked")
		}
		if err != nil {
			// Checked when accepted; a stored payload that no longer parses
			// resolves to no device rather than blocking the queue.
			d.log.Error("stored publish payload is invalid", zap.String("publish", p.ID), zap.Error(err))
		}
	}
	wanted := (&Payload{}).Platforms()
	if payload != nil {
		wanted = payload.Platforms()
	}
	// A publish still accepted is started by its first claim (see
	// storage.ClaimPages).
	r := &reading{publish: p, payload: payload, wanted: wanted, streams: map[storage.Platform]*stream{}}
	if p.TargetKind == storage.TargetUsers {
		r.streams[""] = &stream{}
	} else {
		for _, pl := range platforms {
			if r.wanted[pl] {
				r.streams[pl] = &stream{}
			}
		}
		if len(r.streams) == 0 {
			// No platform to send to: one stream that holds no device (no
			// id starts with "-") resolves the publish with its first,
			// empty page.
			r.streams[""] = &stream{}
		}
	}
	for _, pl := range streamOrder {
		if r.streams[pl] != nil {
			r.names = append(r.names, pl)
		}
	}
	return r
}

// room reports whether the gateways of a stream can take another page.
func (d *Dispatcher) room(r *reading, pl storage.Platform) bool {
	limit := d.platformLimit() - int64(d.opts.PageSize)
	if pl != "" {
		return d.platformInFlight[pl].Load() <= limit
	}
	for p, ok := range r.wanted {
		if ok && d.platformInFlight[p].Load() > limit {
			return false
		}
	}
	return true
}

// claimPages claims the next page of each stream of the claims (see
// storage.ClaimPagesOf), of the publishes rs, in one transaction, as far as
// the gateways have room, and hands their deliveries out; it reports
// whether it got one. A stream whose last page was claimed, here or by
// another node, is not asked again. A claim that fails is tried again
// publish by publish, so that one publish that cannot be claimed holds up
// no other.
func (d *Dispatcher) claimPages(ctx context.Context, rs []*reading, claims []*storage.PageClaim) bool {
	accepted := make([]bool, len(rs))
	for i, r := range rs {
		accepted[i] = r.publish.State == storage.PublishAccepted
	}
	err := d.db.ClaimPagesOf(ctx, claims, d.roomLeft(), d.opts.Owner, d.opts.now(), d.opts.Lease, d.opts.PageSize)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		if len(claims) > 1 {
			claimed := false
			for i := range claims {
				claimed = d.claimPages(ctx, rs[i:i+1], claims[i:i+1]) || claimed
			}
			return claimed
		}
		d.log.Error("claiming pages of publish targets", zap.String("publish", rs[0].publish.ID), zap.Error(err))
		sleep(ctx, nil, time.Second)
		return false
	}
	claimed := false
	for i, c := range claims {
		r := rs[i]
		if accepted[i] && r.publish.State != storage.PublishAccepted && r.publish.WebhookURL != "" {
			wake(d.wakeHooks) // started, by this claim or another node's
		}
		for j, pg := range c.Pages {
			if c.Ended[j] {
				r.streams[c.Streams[j]].exhausted = true
			}
			if pg != nil {
				claimed = true
				d.handOut(r, pg)
			}
		}
	}
	return claimed
}

// roomLeft is how many more deliveries each gateway may take in flight.
func (d *Dispatcher) roomLeft() map[storage.Platform]int {
	room := make(map[storage.Platform]int, len(platforms))
	for _, pl := range platforms {
		room[pl] = int(d.platformLimit() - d.platformInFlight[pl].Load())
	}
	return room
}

// takeOver takes over a page of the publish whose lease ran out (see
// storage.TakeOverPage) and hands its deliveries out; it reports whether it
// got one. The publish is probed again in the next round until it has none
// left: a dead node may have left several.
func (d *Dispatcher) takeOver(ctx context.Context, r *reading) bool {
	got, err := d.db.TakeOverPage(ctx, r.publish, r.wanted, d.opts.Owner, d.opts.now(), d.opts.Lease, d.opts.PageSize)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Error("taking over a page of publish targets", zap.String("publish", r.publish.ID), zap.Error(err))
			sleep(ctx, nil, time.Second)
		}
		return false
	}
	r.expired = got != nil
	if got != nil {
		d.handOut(r, got)
	}
	return got != nil
}

// handOut hands a claimed page's deliveries to the senders.
func (d *Dispatcher) handOut(r *reading, got *storage.Page) {
	d.counters.pageClaimed(got.TakenOver, len(got.Targets))
	if got.TakenOver {
		d.log.Warn("took over a page whose lease ran out: its deliveries may be sent twice",
			zap.String("publish", r.publish.ID), zap.Int("deliveries", len(got.Targets)))
	}
	pg := &page{reading: r, pending: len(got.Targets), result: storage.PageResult{PublishID: r.publish.ID, Page: got.ID,
		Owner: got.Owner, Epoch: got.Epoch, Streams: r.names, Targeted: len(got.Targets)}}
	d.mu.Lock()
	r.open++
	d.claimed[got.ID] = true
	if len(got.Targets) == 0 {
		d.ready = append(d.ready, pg)
	}
	d.mu.Unlock()
	d.pageInFlight.Add(int64(len(got.Targets)))
	for _, t := range got.Targets {
		d.platformInFlight[t.Platform].Add(1)
		d.queues[t.Platform] <- job{d: t, page: pg} // room() keeps it under the queue's size
	}
	if len(got.Targets) == 0 {
		wake(d.wakeRecorder)
	}
}
