package cluster

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
)

// holdTick is how often a node looks for held-back webhooks that are due: a
// channel_vacated goes out at most this much after its hold.
const holdTick = 100 * time.Millisecond

// releaseDue reports, while Redis answers, the held-back channel_vacated
// and member_removed webhooks whose hold has passed. Every node runs it
// every holdTick; each held event is taken out by one of them (see
// scripts.go).
func (c *Cluster) releaseDue() {
	if c.healthy.Load() {
		c.releaseHeld(c.ctx, false)
	}
}

// releaseHeld takes the due held-back webhooks (all of them, with all) out
// of Redis and hands them to the hub's observer, a page at a time. A failure
// leaves them for the next round.
func (c *Cluster) releaseHeld(ctx context.Context, all bool) {
	const page = 256
	flag := ""
	if all {
		flag = "a"
	}
	for {
		cl := &call{script: releaseScript, args: []any{c.p, globalStream, page, flag}}
		c.exec(ctx, []*call{cl})
		if cl.err != nil {
			if ctx.Err() == nil {
				c.log.Debug("releasing held-back webhooks failed; retrying", zap.Error(cl.err))
			}
			return
		}
		list, _ := cl.val.([]any)
		for _, v := range list {
			s, _ := v.(string)
			if ev, ok := decodeHeld(s); ok {
				c.hub.Notify(ev)
			}
		}
		if len(list) < page {
			return
		}
	}
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
	ev := hub.Event{AppID: f[0], Channel: f[1], UserID: f[2], Held: true}
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
