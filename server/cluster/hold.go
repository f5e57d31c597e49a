package cluster

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
)

// WebhookHold is a cluster node's webhook hold (the webhook dispatcher's
// Options.Holder): the departures (channel_vacated, member_removed) are
// held in Redis, for every node at once, so that leaving on one node and
// coming back on another within the hold cancels out as on one node. The
// scripts do what a hold's Take does, atomically with the change itself
// (see scripts.go): a leave adds its departure to P held and reports
// nothing, a join that finds its departure there takes it out and reports
// neither. The release loop below does what Due does, handing the due
// departures to the hub's observer; a cluster node's hub reports none of
// its own. So every event that reaches the dispatcher on a cluster node
// has been through the hold already: Take lets each one through, and Due
// has none of its own.
type WebhookHold struct{}

// Take lets every event through: the scripts held or cancelled it already.
func (WebhookHold) Take(hub.Event, time.Time) bool { return true }

// Due returns nothing: the release loop hands the due departures over.
func (WebhookHold) Due(time.Time, bool) []hub.Event { return nil }

// holdTick is how often a node that cannot reach Redis looks again for
// held-back webhooks that are due, and the least it waits between two
// looks.
const holdTick = 100 * time.Millisecond

// releaseLoop releases, while Redis answers, the held-back channel_vacated
// and member_removed webhooks whose hold has passed. Every node runs it;
// each held event is taken out by one of them (see scripts.go). A node
// looks again when the earliest held event is due, and at the latest one
// hold (Options.Hold, the same on every node) after it looked: what any
// node holds back from then on is due no sooner. So a node looks about
// once a hold while nothing is held, rather than on a fixed tick, and an
// event goes out when its hold has passed.
func (c *member) releaseLoop() {
	for {
		wait := holdTick
		if c.healthy.Load() {
			next, ok := c.releaseHeld(c.ctx, false)
			wait = nextLook(next, ok, c.opts.Hold)
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.opts.after(wait):
		}
	}
}

// nextLook is how long releaseLoop waits to look again after releaseHeld
// answered next (the time until the earliest held event is due, negative
// when none is held) or did not answer (answered false): until that event
// is due, but at least holdTick/20 and at most a hold; holdTick when Redis
// did not answer.
func nextLook(next time.Duration, answered bool, hold time.Duration) time.Duration {
	switch {
	case !answered:
		return holdTick
	case next < 0:
		return hold
	}
	return min(max(next, holdTick/20), hold)
}

// releaseHeld takes the due held-back webhooks (all of them, with all) out
// of Redis and hands them to the hub's observer, a page at a time. It
// returns how long until the earliest one left is due (a negative duration
// when none is left), and false when Redis failed to answer: the others
// are left for the next round.
func (c *member) releaseHeld(ctx context.Context, all bool) (time.Duration, bool) {
	const page = 256
	flag := ""
	if all {
		flag = "a"
	}
	for {
		cl := &call{script: releaseScript, args: []any{c.scriptCtx, globalStream, page, flag}}
		c.exec(ctx, []*call{cl})
		list, _ := cl.val.([]any)
		if cl.err == nil && len(list) == 0 {
			cl.err = errors.New("no answer")
		}
		if cl.err != nil {
			if ctx.Err() == nil {
				c.log.Debug("releasing held-back webhooks failed; retrying", zap.Error(cl.err))
			}
			return 0, false
		}
		for _, v := range list[1:] {
			s, _ := v.(string)
			if ev, ok := decodeHeld(s); ok {
				c.hub.Notify(ev)
			}
		}
		if len(list)-1 < page {
			return untilDue(list[0]), true
		}
	}
}

// untilDue is the release script's first answer, the milliseconds until the
// earliest held event left is due, as a duration: negative when none is
// left (-1), or when the answer is not a number.
func untilDue(v any) time.Duration {
	s, _ := v.(string)
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// decodeHeld decodes a held-back webhook as the scripts write it: v or m,
// then the app, channel and user fields.
func decodeHeld(s string) (hub.Event, bool) {
	if s == "" {
		return hub.Event{}, false
	}
	f, err := fields(s[1:])
	if err != nil || len(f) != 3 {
		return hub.Event{}, false
	}
	ev := hub.Event{AppID: f[0], Channel: f[1], UserID: f[2]}
	switch s[0] {
	case 'v':
		ev.Kind, ev.UserID = hub.ChannelVacated, ""
	case 'm':
		ev.Kind = hub.MemberRemoved
	default:
		return hub.Event{}, false
	}
	return ev, true
}
