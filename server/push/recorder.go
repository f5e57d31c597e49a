package push

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/storage"
)

// record counts results back into their pages and rows and writes them in
// batches: whatever arrived while the previous batch was written goes in the
// next transaction. A page is written once all its deliveries are done.
func (d *Dispatcher) record() {
	rows := make([]storage.DeliveryResult, 0, 1024)
	for {
		got := 0
		select {
		case o, ok := <-d.results:
			if !ok {
				d.writeRecovered(rows) // pages complete at Close are recorded too
				return
			}
			rows = d.applyRecovered(rows, o)
			got++
		case <-d.wakeRecorder:
		}
	drain:
		for got < cap(rows) {
			select {
			case o, ok := <-d.results:
				if !ok {
					break drain // the next round returns
				}
				rows = d.applyRecovered(rows, o)
				got++
			default:
				break drain
			}
		}
		d.writeRecovered(rows)
		rows = rows[:0]
	}
}

// applyRecovered is apply with a panic of it logged and counted: only that
// result is dropped (apply appends nothing before it returns), the batch's
// other results are recorded and the recorder goes on. The dropped result's
// delivery stays unrecorded, so the next start sends it again.
func (d *Dispatcher) applyRecovered(rows []storage.DeliveryResult, o outcome) []storage.DeliveryResult {
	var recorded storage.DeliveryOutcome
	if d.panics.Do(d.log, "delivery result (its delivery is sent again at the next start)", func() { rows, recorded = d.apply(rows, o) },
		zap.String("publish", o.d.PublishID), zap.String("device", o.d.DeviceID)) {
		return rows
	}
	// The hook is told once the result is counted and its page or row
	// updated, so that its panic (recovered in tellOutcome) loses none of
	// that bookkeeping.
	d.tellOutcome(o.d, recorded)
	return rows
}

// writeRecovered is write with a panic of it logged and counted: the
// batch's results are not recorded (the next start sends their deliveries
// again, as after a crash) and the recorder goes on with the next batch.
func (d *Dispatcher) writeRecovered(rows []storage.DeliveryResult) {
	d.panics.Do(d.log, "batch of delivery results (its deliveries are sent again at the next start)", func() { d.write(rows) },
		zap.Int("rows", len(rows)))
}

// apply counts one result: into its page, or as a stored row's result. It
// returns the outcome recorded (a retry past MaxAttempts is a failure).
func (d *Dispatcher) apply(rows []storage.DeliveryResult, o outcome) ([]storage.DeliveryResult, storage.DeliveryOutcome) {
	del, outcome := o.d, o.res.Outcome
	var retryAt time.Time
	if outcome == storage.DeliveryRetry {
		if del.Attempts+1 >= d.opts.MaxAttempts {
			outcome = storage.DeliveryFailed
		} else {
			retryAt = d.opts.now().Add(d.backoff(del.Attempts, o.res.RetryAfter))
		}
	}
	d.counters.delivery(del.Platform, outcome)
	if outcome != storage.DeliverySent {
		d.log.Debug("delivery not sent", zap.String("publish", del.PublishID), zap.String("device", del.DeviceID),
			zap.Int("outcome", int(outcome)), zap.String("reason", o.res.Reason))
	}
	d.platformInFlight[del.Platform].Add(-1)
	pg := o.page
	if pg == nil {
		return append(rows, storage.DeliveryResult{Delivery: del, Outcome: outcome, RetryAt: retryAt}), outcome
	}
	d.pageInFlight.Add(-1)
	pg.pending--
	if pg.pending == 0 {
		d.mu.Lock()
		d.ready = append(d.ready, pg)
		d.mu.Unlock()
	}
	switch outcome {
	case storage.DeliverySent:
		pg.result.Sent++
	case storage.DeliveryDeadToken:
		pg.result.Failed++
		pg.result.Dead = append(pg.result.Dead, del)
	case storage.DeliveryRetry:
		del.Attempts++
		pg.result.Later = append(pg.result.Later, storage.LaterDelivery{Delivery: del, At: retryAt})
	default:
		pg.result.Failed++
	}
	return rows, outcome
}

// tellOutcome hands one recorded outcome to Options.OnOutcome, a panic of
// the hook logged and counted.
func (d *Dispatcher) tellOutcome(del storage.Delivery, outcome storage.DeliveryOutcome) {
	if on := d.opts.OnOutcome; on != nil {
		d.panics.Do(d.log, "delivery outcome report", func() { on(del.InstanceID, outcome) },
			zap.String("publish", del.PublishID), zap.String("device", del.DeviceID))
	}
}

// write records the rows' results and the pages done.
func (d *Dispatcher) write(rows []storage.DeliveryResult) {
	ctx := context.Background()
	d.mu.Lock()
	ready := d.ready
	d.ready = nil
	d.mu.Unlock()
	if len(rows) == 0 && len(ready) == 0 {
		return
	}
	pages := make([]storage.PageResult, len(ready))
	later := false
	for i, pg := range ready {
		pages[i] = pg.result
		later = later || len(pg.result.Later) > 0
	}
	var finished []storage.Publish
	retrying(d.log, "recording delivery results", func() error {
		f, err := d.db.CompleteDeliveries(ctx, rows)
		finished = append(finished, f...)
		return err
	})
	retrying(d.log, "recording pages of publish targets", func() error {
		f, dup, err := d.db.CompletePages(ctx, pages)
		finished = append(finished, f...)
		if dup > 0 {
			d.counters.duplicates.Add(int64(dup))
			// Another node took their pages over meanwhile (this one had
			// not renewed its leases in time): it sends them again.
			d.log.Warn("deliveries sent twice: another node took their pages over while they were in flight", zap.Int("deliveries", dup))
		}
		return err
	})
	d.mu.Lock()
	for _, pg := range ready {
		pg.reading.open--
		delete(d.claimed, pg.result.Page)
	}
	for _, p := range finished {
		delete(d.accepted, p.ID) // handed over after the resolver had started it
		delete(d.prepared, p.ID)
		if u := d.users[p.ID]; u != nil {
			d.nUsers -= len(u.byUser)
			delete(d.users, p.ID)
		}
	}
	d.mu.Unlock()
	wake(d.wakeResolver)
	if len(rows) > 0 || later || d.claimerFull.Load() {
		// New rows may be due sooner than the claimer's wait, or room
		// for the rows it could not hand out freed up. Otherwise it is
		// left alone: a small publish's pages cost it no round.
		wake(d.wakeClaimer)
	}
	for _, p := range finished {
		if p.WebhookURL != "" {
			wake(d.wakeHooks)
			break
		}
	}
}

// retrying runs write until it succeeds, ten more times at most, a second
// apart: a write that still fails leaves its deliveries unrecorded, and the
// next start sends them again.
func retrying(log *zap.Logger, what string, write func() error) {
	err := write()
	for try := 1; err != nil && try <= 10; try++ {
		log.Error(what, zap.Error(err))
		time.Sleep(time.Second)
		err = write()
	}
}
