package hub

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/eventlog"
)

// Recovery: a subscription that asks for it gets, before each event kept
// in its channel's history, pusher_internal:position with the event's ID
// (and only that frame for an event its connection was excluded from), so
// the client knows the position of the last event it really got. A new
// connection that resubscribes from such a position gets what it missed,
// from the history, before any newer event. The positions are given in
// delivery order because, on a node, a kept publish is appended and
// queued under one lock (PublishKept), so a channel's fan-out worker sees
// its events in the order of their IDs; a recovery is a worker item too,
// queued under the same lock after the channel's last kept event, so it
// replays exactly the events up to that one while the newer ones, queued
// behind it, go out live after it.

// Recovery asks Subscribe to make the subscription recoverable and, with
// Resume, to recover what the connection's previous one missed.
type Recovery struct {
	Log    eventlog.Positioned // the app's channel history
	Policy eventlog.Policy     // the app's history setting
	// Window bounds how old the first missed event may be: older, the
	// client was away too long and the recovery fails (past the history's
	// TTL the log has lost them anyway: a gap).
	Window time.Duration
	// Token is the secret that lets the connection recover this
	// subscription from position later (the transport signs it, with
	// mark: what the log said of itself then, which the recovery checks).
	Token func(position eventlog.ID, mark string) string
	// Resume: recover the events after After; else only make the
	// subscription recoverable. Mark is the one the old subscription's
	// token carried.
	Resume bool
	After  eventlog.ID
	Mark   string
	// OldSocket is the socket_id of the connection that had the
	// subscription: the events triggered without it are not replayed.
	OldSocket string
	// Refused, when not empty, is why a resume was refused before it came
	// here (a bad token): the subscription is made recoverable and the
	// client told.
	Refused string
}

// replays reports whether r is a resume that will replay what was missed
// (not one refused already).
func (r *Recovery) replays() bool { return r != nil && r.Resume && r.Refused == "" }

// Reasons of a failed recovery, sent in pusher:recovery_failed.
const (
	RecoveryRefused = "refused"     // the token does not prove the old subscription
	RecoveryExpired = "expired"     // the first missed event is older than the window
	RecoveryGap     = "gap"         // the channel's history no longer holds what was missed
	RecoveryError   = "unavailable" // the history could not be read, or this node cannot recover
	RecoveryOff     = "off"         // the app keeps no history or has no window
)

// recovering is a recoverable subscriber's state on its channel.
type recovering struct {
	// upTo: while a resume waits for its turn in the channel's worker, the
	// kept events up to it are the replay's to send, not Deliver's.
	upTo eventlog.ID
}

// recoverItem is a recovery's turn in its channel's fan-out worker.
type recoverItem struct {
	app     string
	channel string
	conn    *Conn
	rec     *Recovery
	upTo    eventlog.ID // the channel's last kept event when it was queued
}

// RecoveryStats counts recoveries by outcome.
type RecoveryStats struct {
	Recovered, Refused, Expired, Gap, Error, Off int64
}

type recoveryCounters struct {
	recovered, refused, expired, gap, failed, off atomic.Int64
}

func (r *recoveryCounters) count(reason string) {
	switch reason {
	case "":
		r.recovered.Add(1)
	case RecoveryRefused:
		r.refused.Add(1)
	case RecoveryExpired:
		r.expired.Add(1)
	case RecoveryGap:
		r.gap.Add(1)
	case RecoveryOff:
		r.off.Add(1)
	default:
		r.failed.Add(1)
	}
}

// RecoveryStats returns the hub's recoveries so far.
func (h *Hub) RecoveryStats() RecoveryStats {
	r := &h.recoveries
	return RecoveryStats{r.recovered.Load(), r.refused.Load(), r.expired.Load(), r.gap.Load(), r.failed.Load(), r.off.Load()}
}

// RecoveryRefusedHere counts a resume asked of a subscription that cannot
// recover at all (reason RecoveryOff or RecoveryError), which the
// transport answers itself.
func (h *Hub) RecoveryRefusedHere(reason string) { h.recoveries.count(reason) }

// positionFrame is pusher_internal:position: the ID of the event that
// follows on the channel, or, excluded, of one the connection does not get.
func positionFrame(channel string, id eventlog.ID, excluded bool) []byte {
	data := `{"id":"` + id.String() + `"}`
	if excluded {
		data = `{"id":"` + id.String() + `","excluded":true}`
	}
	return EventFrame("pusher_internal:position", channel, data, "")
}

// RecoveryFrame is pusher_internal:recovery: the secret and the position
// from which the subscription can be recovered (both empty: it cannot be).
func RecoveryFrame(channel, token, position string) []byte {
	return JSONFrame("pusher_internal:recovery", channel, struct {
		Token    string `json:"token"`
		Position string `json:"position"`
	}{token, position})
}

// PublishKept publishes ms as Publish does and, in a cluster whose history
// store is (a Keeper), has them appended to it in the same round trip.
// On a node of its own with a Positioned store they are appended first
// and carry their IDs, which recoverable subscribers get. It reports
// whether they were kept: when not, the caller appends them.
func (h *Hub) PublishKept(store eventlog.Store, p eventlog.Policy, now time.Time, ms ...Message) (kept bool, err error) {
	if h.cluster != nil {
		if k, ok := store.(Keeper); ok {
			return k.PublishKept(p, now, cloneMessages(ms))
		}
		return false, h.Publish(ms...)
	}
	log, ok := store.(eventlog.Positioned)
	if !ok || !p.On() || len(ms) == 0 {
		return false, h.Publish(ms...)
	}
	entries := make([]eventlog.Entry, len(ms))
	for i, m := range ms {
		entries[i] = eventlog.Entry{Channel: m.Channel, Name: m.Event, Data: m.Data, Exclude: m.ExcludeSocketID}
	}
	// Appended and queued under one lock: each channel's worker gets its
	// kept events in the order of their IDs, and a recovery queued under
	// it knows the last one before it.
	mu := h.keepLock(ms[0].AppID)
	mu.Lock()
	defer mu.Unlock()
	ids, err := log.AppendIDs(context.Background(), ms[0].AppID, p, entries, now)
	if err != nil || len(ids) != len(ms) {
		// Delivered without positions: a recovery over them fails closed
		// (the log does not hold them). Not appended again by the caller.
		h.log.Warn("events are delivered but not kept in their channel's history", zap.String("app_id", ms[0].AppID), zap.Error(err))
		return true, h.Publish(ms...)
	}
	for i := range ms {
		ms[i].Position = ids[i]
		h.enqueue(ms[i])
	}
	return true, nil
}

func cloneMessages(ms []Message) []Message { return append([]Message(nil), ms...) }

// keepLock is app's lock of kept publishes and recoveries. Every message of
// a PublishKept call is of one app (an HTTP API call's).
func (h *Hub) keepLock(app string) *sync.Mutex {
	return &h.keepMu[workerOf(app, "", len(h.keepMu))]
}

// deliverPositioned is Deliver's loop for a kept event on a channel with
// recoverable subscribers, which get its position first. The caller holds
// ch.mu; it returns how many got the event.
func deliverPositioned(ch *channel, m Message, frame []byte) int {
	var mark, excluded []byte
	sent := 0
	for i, c := range ch.subs {
		st := ch.recovs[i]
		switch {
		case st == nil:
			if c.socketID == m.ExcludeSocketID {
				continue
			}
		case !st.upTo.IsZero() && !st.upTo.Less(m.Position):
			continue // its recovery, queued behind, replays it
		case c.socketID == m.ExcludeSocketID:
			if excluded == nil {
				excluded = positionFrame(m.Channel, m.Position, true)
			}
			c.Send(excluded)
			continue
		default:
			if mark == nil {
				mark = positionFrame(m.Channel, m.Position, false)
			}
			c.send(mark, frame)
			sent++
			continue
		}
		c.Send(frame)
		sent++
	}
	return sent
}

// recoverable marks c's new subscription to ch recoverable and returns
// its recovery's worker item, which the caller queues once it has let go
// of ch.mu but still holds its app's keepLock (Subscribe holds both, and
// took the keepLock first): the item comes right after the channel's last kept
// event, upTo. A resume that will replay leaves the kept events up to it
// to the replay.
func (h *Hub) recoverable(a *appState, ch *channel, c *Conn, rec *Recovery) fanoutItem {
	upTo := rec.Log.Last(a.id, ch.name)
	st := markRecoverable(ch, c)
	if rec.replays() {
		st.upTo = upTo
	}
	return fanoutItem{recover: &recoverItem{app: a.id, channel: ch.name, conn: c, rec: rec, upTo: upTo}}
}

// recover runs a recovery in its channel's worker: every kept event before
// it has gone out, every one after it is queued behind it. It sends the
// missed events then pusher:recovered, or pusher:recovery_failed, then the
// secret for the next recovery.
func (h *Hub) recover(it *recoverItem) {
	a := h.app(it.app, false)
	if a == nil {
		return
	}
	a.mu.RLock()
	ch := a.channels[it.channel]
	a.mu.RUnlock()
	if ch == nil {
		return
	}
	var (
		events []eventlog.Event
		reason string
	)
	rec := it.rec
	if rec.Resume {
		reason = rec.Refused
		if reason == "" {
			events, reason = h.missed(it, h.now())
		}
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	i, ok := ch.index[it.conn]
	if !ok || ch.recovs == nil || ch.recovs[i] == nil {
		return // unsubscribed meanwhile
	}
	ch.recovs[i].upTo = eventlog.ID{}
	if rec.Resume {
		events = slices.DeleteFunc(events, func(ev eventlog.Event) bool {
			return ev.Exclude != "" && ev.Exclude == rec.OldSocket // not delivered to it live either
		})
		h.sendRecovery(it.conn, it.channel, events, reason)
	}
	it.conn.Send(RecoveryFrame(it.channel, rec.Token(it.upTo, rec.Log.Epoch()), it.upTo.String()))
}

// sendRecovery sends c the outcome of its resume on channel: the events
// it missed, each after its position, then pusher:recovered; or, with a
// reason, pusher:recovery_failed. It counts it first, so that a client
// that saw it finds it in the metrics.
func (h *Hub) sendRecovery(c *Conn, channel string, events []eventlog.Event, reason string) {
	h.recoveries.count(reason)
	if reason != "" {
		c.Send(EventFrame("pusher:recovery_failed", channel, `{"reason":"`+reason+`"}`, ""))
		return
	}
	for _, ev := range events {
		c.Send(positionFrame(channel, ev.ID, false))
		c.Send(EventFrame(ev.Name, channel, ev.Data, ""))
	}
	c.Send(EventFrame("pusher:recovered", channel, `{"replayed":`+strconv.Itoa(len(events))+`}`, ""))
}

// markRecoverable makes c's subscription to ch recoverable: fan-out gives
// it positions. The caller holds ch.mu, and c is on ch.
func markRecoverable(ch *channel, c *Conn) *recovering {
	st := &recovering{}
	if ch.recovs == nil {
		ch.recovs = make([]*recovering, len(ch.subs))
	}
	ch.recovs[ch.index[c]] = st
	ch.recoverable++
	return st
}

// recoverClustered completes a clustered subscription that asked for
// recovery with the cluster's answer (nil: the cluster cannot recover),
// in the channel's worker, right after subscription_succeeded: the events
// the cluster read when the subscription took effect are exactly those
// before the channel's next message. The caller holds ch.mu.
func (h *Hub) recoverClustered(ch *channel, c *Conn, rec *Recovery, got *SnapshotRecovery) {
	if got == nil {
		if rec.Resume {
			h.sendRecovery(c, ch.name, nil, RecoveryError)
		}
		c.Send(RecoveryFrame(ch.name, "", ""))
		return
	}
	markRecoverable(ch, c)
	if rec.Resume {
		reason := rec.Refused
		if reason == "" {
			reason = got.Reason
		}
		h.sendRecovery(c, ch.name, got.Events, reason)
	}
	c.Send(RecoveryFrame(ch.name, rec.Token(got.Position, got.Mark), got.Position.String()))
}

// missed returns the events the old subscription missed, or why they
// cannot all be had.
func (h *Hub) missed(it *recoverItem, now time.Time) ([]eventlog.Event, string) {
	rec := it.rec
	if rec.Mark != rec.Log.Epoch() {
		return nil, RecoveryGap // the log that gave the position is gone (a restart)
	}
	if it.upTo.Less(rec.After) {
		return nil, RecoveryRefused // a position the channel never reached
	}
	events, complete, err := rec.Log.Since(context.Background(), it.app, it.channel, rec.Policy, rec.After, it.upTo, now)
	switch {
	case err != nil:
		return nil, RecoveryError
	case !complete:
		return nil, RecoveryGap
	}
	// A window past the TTL needs no cap: events older than the TTL are
	// gone from the log, and Since said so (a gap).
	if len(events) > 0 && events[0].Time().Before(now.Add(-rec.Window)) {
		return nil, RecoveryExpired
	}
	return events, ""
}
