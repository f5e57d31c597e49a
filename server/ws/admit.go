package ws

import (
	"net/http"
	"time"

	"github.com/heraldrt/herald/server/hub"
)

// The admission of a new connection, whichever transport carries it (a
// WebSocket upgrade in handler.go, a new HTTP fallback session in xhr.go):
// the same checks, in the same order, with the same close codes.

// allowConnect takes a token of Options.ConnectRateLimit for a new
// connection of the client at clientIP. Over the limit it answers the
// request with 429 and reports false.
func (s *Handler) allowConnect(w http.ResponseWriter, clientIP string) bool {
	if s.connects == nil {
		return true
	}
	ok, wait := s.connects.take(clientIP, time.Now())
	if !ok {
		s.stats.connectRefused()
		s.connects.refuse(w, wait)
	}
	return ok
}

// admit checks a new connection's request (protocol 7, the app of key,
// enabled) and registers p, whose frames w writes, as a connection of that
// app within its connection quota; p then has its app and Conn, in no
// channel yet. It returns the app, or the close reason to refuse with.
func (s *Handler) admit(r *http.Request, key string, p *peer, w hub.Writer) (App, *hub.CloseReason) {
	app, found := s.apps.ByKey(key)
	switch {
	case r.URL.Query().Get("protocol") != "7":
		return App{}, &hub.CloseUnsupportedProtocol
	case !found:
		return App{}, &hub.CloseUnknownApp
	case !app.Enabled:
		return App{}, &hub.CloseAppDisabled
	}
	conn, err := s.hub.Connect(app.ID, hub.ConnectOptions{MaxConns: app.MaxConnections, MaxQueueBytes: s.opts.MaxQueueBytes, Writer: w})
	if err != nil {
		return App{}, &hub.CloseOverConnectionQuota
	}
	p.appID, p.conn = app.ID, conn
	return app, nil
}
