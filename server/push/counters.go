package push

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/storage"
)

// queueDepthTimeout bounds the pending-deliveries count of one scrape.
const queueDepthTimeout = 2 * time.Second

// Delivery outcomes as the metrics label them.
const (
	OutcomeDelivered = "delivered"  // the gateway accepted the notification
	OutcomeFailed    = "failed"     // refused, or retried MaxAttempts times
	OutcomeRetried   = "retried"    // a transient failure; tried again later
	OutcomeDeadToken = "dead_token" // the token is dead; the device is deleted
)

var (
	counterGateways = [...]storage.Platform{storage.PlatformAPNs, storage.PlatformFCM, storage.PlatformWeb}
	counterOutcomes = [...]string{OutcomeDelivered, OutcomeFailed, OutcomeRetried, OutcomeDeadToken}
)

// counters are the dispatcher's metrics: one atomic add per event.
type counters struct {
	publishes  atomic.Int64
	duplicates atomic.Int64 // deliveries of pages not recorded because another node took them over
	deliveries [len(counterGateways)][len(counterOutcomes)]atomic.Int64

	pagesClaimed  atomic.Int64 // pages claimed, taken over ones included
	pagesTaken    atomic.Int64 // pages taken over from a node whose lease ran out
	takenTargeted atomic.Int64 // the deliveries of those pages
}

// pageClaimed counts a claimed page of n deliveries.
func (c *counters) pageClaimed(takenOver bool, n int) {
	c.pagesClaimed.Add(1)
	if takenOver {
		c.pagesTaken.Add(1)
		c.takenTargeted.Add(int64(n))
	}
}

// published counts an accepted publish.
func (c *counters) published() { c.publishes.Add(1) }

// delivery counts the recorded outcome of one attempt on gateway p.
func (c *counters) delivery(p storage.Platform, o storage.DeliveryOutcome) {
	g := slices.Index(counterGateways[:], p)
	k := slices.Index(counterOutcomes[:], outcomeName(o))
	if g >= 0 && k >= 0 {
		c.deliveries[g][k].Add(1)
	}
}

// outcomeName is the label of a recorded outcome; "" for one not counted.
func outcomeName(o storage.DeliveryOutcome) string {
	switch o {
	case storage.DeliverySent:
		return OutcomeDelivered
	case storage.DeliveryFailed:
		return OutcomeFailed
	case storage.DeliveryRetry:
		return OutcomeRetried
	case storage.DeliveryDeadToken:
		return OutcomeDeadToken
	}
	return ""
}

// Counters is a snapshot of the dispatcher's state, as the metrics export it.
type Counters struct {
	QueueDepth int   // deliveries waiting to be sent
	Publishes  int64 // publishes accepted since start
	// Deliveries counts delivery attempts by gateway (apns, fcm, web) and
	// outcome (delivered, failed, retried, dead_token).
	Deliveries []DeliveryCount
	// Duplicates counts deliveries sent by this node that another node
	// sends again: their page was in flight when that node took it over
	// (this one had stopped renewing its lease in time).
	Duplicates int64
	// PagesClaimed counts the pages of publishes' targets this node claimed
	// (see storage.ClaimPage); PagesTakenOver those of them it took over
	// from a node whose lease on them ran out, and TakenOverDeliveries
	// their deliveries: the most that node may have sent too.
	PagesClaimed, PagesTakenOver, TakenOverDeliveries int64
	// Panics counts the panics recovered since start in sends (each one a
	// failed delivery), the resolver, the recorder and the publish webhook
	// sender; each was logged with its stack.
	Panics int64
}

// DeliveryCount is one (gateway, outcome) counter.
type DeliveryCount struct {
	Gateway string
	Outcome string
	Count   int64
}

// PushCounters reports the publishes accepted and delivery attempts recorded
// since the dispatcher was created, by gateway and outcome (every pair, zeros
// included, so rates work from the first scrape), and the queue depth: the
// deliveries not completed yet: stored ones (claimed or waiting) and those of
// pages in flight.
func (d *Dispatcher) PushCounters() Counters {
	out := Counters{
		Publishes:  d.counters.publishes.Load(),
		Duplicates: d.counters.duplicates.Load(),

		PagesClaimed:        d.counters.pagesClaimed.Load(),
		PagesTakenOver:      d.counters.pagesTaken.Load(),
		TakenOverDeliveries: d.counters.takenTargeted.Load(),
		Panics:              d.panics.Count(),
		Deliveries:          make([]DeliveryCount, 0, len(counterGateways)*len(counterOutcomes)),
	}
	for g, gw := range counterGateways {
		for k, o := range counterOutcomes {
			out.Deliveries = append(out.Deliveries, DeliveryCount{
				Gateway: string(gw), Outcome: o, Count: d.counters.deliveries[g][k].Load(),
			})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), queueDepthTimeout)
	defer cancel()
	n, err := d.db.PendingDeliveries(ctx)
	if err != nil {
		// The claimed ones are known without the database.
		d.log.Warn("counting pending deliveries", zap.Error(err))
		n = d.InFlight() - int(d.pageInFlight.Load())
	}
	out.QueueDepth = n + int(d.pageInFlight.Load())
	return out
}
