package ws

import (
	"strings"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/signing"
)

// recoveryData is the recovery of a pusher:subscribe, which Herald's
// recovery plugin adds: empty to ask for a recoverable subscription, else
// the connection that had it, the secret that connection was given for it
// (pusher_internal:recovery) and the position of the last event it got.
type recoveryData struct {
	SocketID string `json:"socket_id"`
	Token    string `json:"token"`
	Position string `json:"position"`
}

// recovery is the hub's Recovery of a subscription of app's channel that
// asks for it; nil when the app or the node does not recover. A resume
// whose token is not the old connection's for this channel, or from
// before what it proves, is refused (the subscription is still made,
// recoverable, and the client told); so is one past the connection's
// share of recoveries.
func (p *peer) recovery(app App, channel string, d *recoveryData) *hub.Recovery {
	if p.unrecoverable(app) != "" {
		return nil
	}
	log := p.s.opts.History
	socket, secret := p.conn.SocketID(), app.Secret
	rec := &hub.Recovery{
		Log: log, Policy: app.History, Window: app.RecoveryWindow,
		Token: func(position eventlog.ID, mark string) string {
			return signing.RecoveryToken(secret, socket, channel, position.String()+"/"+mark)
		},
	}
	if *d == (recoveryData{}) {
		return rec
	}
	rec.Resume = true
	from, ok := signing.VerifyRecoveryToken(d.Token, secret, d.SocketID, channel)
	// The token's position is "<id>/<mark>": the mark is what the log
	// said of itself then (hub.Recovery.Mark).
	from, mark, _ := strings.Cut(from, "/")
	start, err1 := eventlog.ParseID(from)
	after, err2 := eventlog.ParseID(d.Position)
	switch {
	case !ok || err1 != nil || err2 != nil || after.Less(start):
		rec.Refused = hub.RecoveryRefused
	case p.resumes >= p.s.opts.MaxChannelsPerConn:
		// Each resume reads a channel's history: a connection gets as
		// many as it may hold channels, not one per unsubscribe.
		rec.Refused = hub.RecoveryRefused
	default:
		p.resumes++
		rec.After, rec.Mark, rec.OldSocket = after, mark, d.SocketID
	}
	return rec
}

// unrecoverable is why subscriptions of app cannot be recovered here: off
// (the app keeps no history or has no window), unavailable (a node of its
// own whose history gives no positions); empty when they can.
func (p *peer) unrecoverable(app App) string {
	switch {
	case app.RecoveryWindow <= 0 || !app.History.On():
		return hub.RecoveryOff
	case !p.s.hub.Clustered() && p.s.opts.History == nil:
		// A cluster reads its own history where each subscription takes
		// effect, and answers a Join it cannot recover without one
		// (hub.Snapshot.Recovery).
		return hub.RecoveryError
	}
	return ""
}

// refuseRecovery answers a subscription that asked for recovery where
// there is none, so that the plugin can tell the app after a reconnect
// rather than leave a silent gap: pusher:recovery_failed when it asked to
// resume, then a recovery secret that recovers nothing.
func (p *peer) refuseRecovery(channel string, d *recoveryData, reason string) {
	if *d != (recoveryData{}) {
		// Counted before it is sent, so that a client that got it finds it
		// in the metrics.
		p.s.hub.RecoveryRefusedHere(reason)
		p.conn.Send(hub.EventFrame("pusher:recovery_failed", channel, `{"reason":"`+reason+`"}`, ""))
	}
	p.conn.Send(hub.RecoveryFrame(channel, "", ""))
}
