package webhook

import (
	"sort"
	"time"

	"github.com/heraldrt/herald/server/hub"
)

// Hold is the webhook hold: a channel_vacated or member_removed (a
// departure) waits a while for the channel to be occupied again or the
// member to be added again (its return), and when that comes within the
// hold neither is reported, as Pusher does (a page reload is not worth two
// webhooks). The dispatcher hands every event to Take, in the order the
// hub reported them, and asks Due for the departures whose hold has
// passed, all from one goroutine.
//
// A node alone holds them in memory (MemoryHold, the default); a cluster
// node's are held in Redis across the nodes, and its hold is the
// cluster's (server/cluster's WebhookHold, given as Options.Holder).
type Hold interface {
	// Take is given an event at now and answers whether it goes out now.
	// A departure it keeps comes out of Due later, unless its return
	// comes first: then neither goes out (Take answers false for the
	// return too).
	Take(ev hub.Event, now time.Time) bool
	// Due returns the departures kept whose hold has passed at now, or
	// every one kept with all (at shutdown), in the order Take was given
	// them.
	Due(now time.Time, all bool) []hub.Event
}

// MemoryHold is the hold of a node alone: the departures wait in a map.
// It is not safe for concurrent use (the dispatcher's collector owns it).
type MemoryHold struct {
	hold time.Duration
	held map[string]pending // by holdKey
	seq  int
}

// pending is a held channel_vacated or member_removed.
type pending struct {
	ev  hub.Event
	due time.Time
	seq int // arrival order, kept when held events are released together
}

// NewMemoryHold returns a hold of hold's length.
func NewMemoryHold(hold time.Duration) *MemoryHold {
	return &MemoryHold{hold: hold, held: map[string]pending{}}
}

// Take implements Hold.
func (h *MemoryHold) Take(ev hub.Event, now time.Time) bool {
	switch ev.Kind {
	case hub.ChannelVacated, hub.MemberRemoved:
		h.seq++
		h.held[holdKey(ev)] = pending{ev, now.Add(h.hold), h.seq}
		return false
	case hub.ChannelOccupied, hub.MemberAdded:
		// Back within the hold: neither the leaving nor the coming back
		// is reported.
		if p, ok := h.held[holdKey(ev)]; ok && opposite(p.ev.Kind, ev.Kind) {
			delete(h.held, holdKey(ev))
			return false
		}
	}
	return true
}

// Due implements Hold.
func (h *MemoryHold) Due(now time.Time, all bool) []hub.Event {
	var released []pending
	for k, p := range h.held {
		if all || !now.Before(p.due) {
			released = append(released, p)
			delete(h.held, k)
		}
	}
	sort.Slice(released, func(i, j int) bool { return released[i].seq < released[j].seq })
	evs := make([]hub.Event, len(released))
	for i, p := range released {
		evs[i] = p.ev
	}
	return evs
}

// holdKey identifies what a held event is about: the channel, and for
// members the user.
func holdKey(ev hub.Event) string {
	return ev.AppID + "\x00" + ev.Channel + "\x00" + ev.UserID
}

func opposite(held, arrived hub.EventKind) bool {
	return held == hub.ChannelVacated && arrived == hub.ChannelOccupied ||
		held == hub.MemberRemoved && arrived == hub.MemberAdded
}
