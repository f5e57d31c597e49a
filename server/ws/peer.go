package ws

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/heraldrt/herald/server/hub"
)

// peer is one client of Pusher protocol 7, whatever carries its messages:
// the registry's Conn, the app it belongs to, the idle ping and the
// user-authentication timers, and the per-connection rate state. The
// WebSocket session and the HTTP fallback's session both embed one; its
// message handling is in protocol.go.
//
// handle and the methods it calls are not safe for concurrent use: each
// transport hands a peer one message at a time (the WebSocket reader; the
// HTTP session under its input lock).
type peer struct {
	s     *Handler
	conn  *hub.Conn
	appID string

	// authorized: signed in or subscribed to a private or presence channel,
	// which the app's user-authentication timeout asks for.
	authorized atomic.Bool

	lastActivity atomic.Int64 // unix nanoseconds of the last client message
	pingSent     atomic.Bool
	idle         *time.Timer
	authTimer    *time.Timer // the app's user-authentication timeout, if any

	// Client event rate limiting; touched only by the one handling messages.
	rateWindow time.Time
	rateCount  int

	// subscribes is the bucket of subscribes to channels with webhooks
	// (Options.SubscribeRate), made on first use; handling only.
	subscribes *rate.Limiter
	// resumes counts the recoveries the connection asked for (recovery.go);
	// handling only.
	resumes int
}

// start sets the connection of app up and greets the client.
func (p *peer) start(app App) {
	p.touch()
	p.idle = time.AfterFunc(p.s.opts.ActivityTimeout, p.onIdle)
	p.s.hub.SetSubscriptionCount(p.appID, app.SubscriptionCount)
	if app.UserAuthTimeout > 0 {
		p.authTimer = time.AfterFunc(app.UserAuthTimeout, func() {
			if !p.authorized.Load() {
				p.conn.Close(hub.CloseAuthTimeout)
			}
		})
	}
	p.conn.Send(hub.JSONFrame("pusher:connection_established", "", struct {
		SocketID        string `json:"socket_id"`
		ActivityTimeout int    `json:"activity_timeout"`
	}{p.conn.SocketID(), activitySeconds(p.s.opts.ActivityTimeout)}))
}

// leave takes the connection out of the registry once its transport is
// done (its channels see it go: member_removed, webhooks) and closes it,
// which ends its writer or wakes one that ends at once; the caller then
// waits for that (Conn.WaitWriter).
func (p *peer) leave() {
	if p.idle != nil { // nil: not started
		p.idle.Stop()
	}
	if p.authTimer != nil {
		p.authTimer.Stop()
	}
	p.s.hub.Remove(p.conn)
	p.conn.Close(hub.CloseGone)
}

// touch records client activity, which postpones the server's ping.
func (p *peer) touch() {
	p.lastActivity.Store(time.Now().UnixNano())
	p.pingSent.Store(false)
}

// onIdle runs on the idle timer: ping a client silent for the activity
// timeout, close one that did not answer the ping in time.
func (p *peer) onIdle() {
	opts := p.s.opts
	idleFor := time.Since(time.Unix(0, p.lastActivity.Load()))
	switch {
	case idleFor < opts.ActivityTimeout && !p.pingSent.Load():
		p.idle.Reset(opts.ActivityTimeout - idleFor)
	case !p.pingSent.Load():
		p.pingSent.Store(true)
		p.conn.Send(pingFrame)
		p.idle.Reset(opts.PongTimeout)
	default:
		p.conn.Close(hub.ClosePongTimeout)
	}
}

// handleSafely handles one client message; a panic there (code a client's
// input steers) is recovered, logged and counted, and closes only this
// connection, with 1011. It reports whether the message was handled
// without one.
func (p *peer) handleSafely(what string, msg []byte) bool {
	if p.s.panics.Do(p.s.log, what, func() { p.handle(msg) }) {
		p.closeAfterPanic()
		return false
	}
	return true
}

// closeAfterPanic closes the connection whose message handling panicked,
// with 1011.
func (p *peer) closeAfterPanic() {
	p.s.log.Warn("closing a connection whose message handling panicked",
		zap.String("app_id", p.appID), zap.String("socket_id", p.conn.SocketID()))
	p.conn.Close(hub.CloseInternalError)
}

// activitySeconds is the activity timeout in whole seconds, at least 1, as
// the protocol carries it.
func activitySeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

var (
	pingFrame = hub.EventFrame("pusher:ping", "", "{}", "")
	pongFrame = hub.EventFrame("pusher:pong", "", "{}", "")
)
