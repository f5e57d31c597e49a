package push

import (
	"cmp"
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/storage"
)

// resolve reads the targets of unresolved publishes and hands them out a
// page at a time, oldest publish first, whenever the page's gateway has room
// in flight: every gateway is kept busy, and a slow one holds up only its
// own streams.
func (d *Dispatcher) resolve(ctx context.Context) {
	var active []*reading
	var listed time.Time
	relist := true
	for ctx.Err() == nil {
		progressed := false
		panicked := d.panics.Do(d.log, "round of the publish resolver", func() {
			if relist || time.Since(listed) > time.Second {
				active, listed = d.listPublishes(ctx), time.Now()
			}
			for _, r := range active {
				for _, pl := range streamOrder {
					st := r.streams[pl]
					if st != nil && !st.exhausted && d.room(r, pl) {
						d.readPage(ctx, r, pl, st)
						progressed = true
					}
				}
			}
		})
		// After a panic the round's progress is unknown: list again, after
		// a pause so that a panic that repeats does not spin.
		relist = !progressed || panicked
		if (!progressed || panicked) && !sleep(ctx, d.wakeResolver, cmp.Or(d.opts.idlePoll, time.Second)) {
			return
		}
	}
}

// streamOrder is the order the resolver visits a publish's streams in.
var streamOrder = []storage.Platform{storage.PlatformAPNs, storage.PlatformFCM, storage.PlatformWeb, ""}

// listPublishes leases (or renews) the unresolved publishes no other node
// holds and returns them, oldest first, with the resolver's progress
// through each, starting the ones seen the first time. A publish it was
// reading that another node holds now (this one did not renew in time) is
// dropped: its pages in flight are not recorded (see write), and that node
// reads them again. So is one listed under another lease epoch than its
// reading was started with (see storage.ClaimPublishes): another node held
// it between two listings and may have recorded pages past this one's, or
// before them; its pages in flight are not recorded (nor would the database
// record them), and its reading starts again from the stored cursor.
func (d *Dispatcher) listPublishes(ctx context.Context) []*reading {
	// A publish whose last page was recorded before this listing is
	// resolved in it: forgetting it now cannot read it twice.
	d.mu.Lock()
	for id, r := range d.reading {
		if r.final {
			delete(d.reading, id)
		}
	}
	busy := len(d.reading)
	d.mu.Unlock()
	pubs, err := d.db.ClaimPublishes(ctx, d.opts.Owner, time.Now(), d.opts.Lease, 64+busy)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Error("listing publishes to resolve", zap.Error(err))
		}
		return nil // the leases are unknown: no page is read until they are
	}
	held := make(map[string]bool, len(pubs))
	for _, p := range pubs {
		held[p.ID] = true
	}
	d.mu.Lock()
	for id, r := range d.reading {
		// One whose last pages are on their way to the database is being
		// resolved, not lost: the listing may have run between the write
		// that resolved it and the reading's marking as final.
		if !held[id] && !r.final && !r.allRecorded() {
			d.log.Warn("another node took over a publish this one was reading; it reads the rest", zap.String("publish", id))
			delete(d.reading, id)
		}
	}
	d.mu.Unlock()
	var out []*reading
	for _, p := range pubs {
		d.mu.Lock()
		r := d.reading[p.ID]
		if r != nil && r.publish.LeaseEpoch != p.LeaseEpoch {
			d.log.Warn("this node lost a publish it was reading to another and took it back; it reads it again from the stored cursor",
				zap.String("publish", p.ID), zap.Int64("epoch", r.publish.LeaseEpoch), zap.Int64("now", p.LeaseEpoch))
			delete(d.reading, p.ID)
			r = nil
		}
		d.mu.Unlock()
		if r == nil {
			if r = d.startReading(ctx, p); r == nil {
				continue
			}
			d.mu.Lock()
			d.reading[p.ID] = r
			d.mu.Unlock()
		}
		out = append(out, r)
	}
	return out
}

// startReading moves an accepted publish to delivering and sets up its
// streams from the stored cursor. The reading keeps p, and with it the lease
// epoch it was claimed with, which every page it reads carries. It returns
// nil when that failed.
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
	if p.State == storage.PublishAccepted {
		var err error
		if p, err = d.db.StartPublish(ctx, p); err != nil {
			if ctx.Err() == nil {
				d.log.Error("starting publish", zap.String("publish", p.ID), zap.Error(err))
			}
			return nil
		}
		if p.WebhookURL != "" {
			wake(d.wakeHooks)
		}
	}
	r := &reading{publish: p, payload: payload, wanted: wanted, streams: map[storage.Platform]*stream{}}
	if p.TargetKind == storage.TargetUsers {
		r.streams[""] = &stream{cursor: p.Cursor}
		return r
	}
	for _, pl := range platforms {
		if r.wanted[pl] {
			r.streams[pl] = &stream{cursor: p.StreamCursor(pl)}
		}
	}
	if len(r.streams) == 0 {
		// No platform to send to: one stream that holds no device (no id
		// starts with "-") resolves the publish with its first, empty page.
		r.streams[""] = &stream{}
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

// readPage reads the stream's next page and hands its deliveries out.
func (d *Dispatcher) readPage(ctx context.Context, r *reading, pl storage.Platform, st *stream) {
	targets, next, last, err := d.db.PublishTargets(ctx, r.publish, pl, r.wanted, st.cursor, d.opts.PageSize)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Error("reading publish targets", zap.String("publish", r.publish.ID), zap.Error(err))
			sleep(ctx, nil, time.Second)
		}
		return
	}
	pg := &page{result: storage.PageResult{PublishID: r.publish.ID, Owner: d.opts.Owner, LeaseEpoch: r.publish.LeaseEpoch,
		Stream: pl, Cursor: next, Targeted: len(targets)}, last: last, pending: len(targets)}
	// Registered before any of its deliveries can come back.
	d.mu.Lock()
	st.cursor, st.exhausted = next, last
	st.open = append(st.open, pg)
	d.mu.Unlock()
	d.pageInFlight.Add(int64(len(targets)))
	for _, t := range targets {
		d.platformInFlight[t.Platform].Add(1)
		d.queues[t.Platform] <- job{d: t, page: pg} // room() keeps it under the queue's size
	}
	if len(targets) == 0 {
		wake(d.wakeRecorder)
	}
}
