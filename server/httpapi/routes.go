package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/heraldrt/herald/gen/device"
	"github.com/heraldrt/herald/gen/reporting"
	"github.com/heraldrt/herald/server/docs"
)

// Routes are the parts Mount puts on an engine. A nil part is not mounted,
// so a test can mount one API alone.
type Routes struct {
	// Timer times each request for the metrics.
	Timer gin.HandlerFunc
	// Ready is what GET /readyz checks; nil: no /readyz.
	Ready []ReadyCheck
	// Metrics serves GET /metrics; nil when it has a listener of its own.
	Metrics http.Handler
	// Socket accepts the WebSocket connections of GET /app/{key}, and
	// Fallback pusher-js's HTTP fallback transports at FallbackRoute.
	Socket, Fallback gin.HandlerFunc

	Channels  *ChannelsAPI
	Device    *DeviceAPI
	Reporting *ReportingAPI
	Publish   *PublishAPI
	Admin     *AdminAPI
	Console   *ConsoleRoutes

	// AdminToken guards the admin API and the console; they are mounted
	// only with one.
	AdminToken string
}

// ConsoleRoutes are the debug console's handlers (server/console).
type ConsoleRoutes struct {
	// Files serve the page and its assets, by path.
	Files map[string]gin.HandlerFunc
	// IssueTicket answers POST /console/tickets behind the admin token.
	IssueTicket gin.HandlerFunc
	// TicketOrToken lets a request with a ticket through, or one that
	// passes auth (the admin token) when it sends an Authorization header.
	TicketOrToken func(auth gin.HandlerFunc) gin.HandlerFunc
	// Stream is the console's event stream.
	Stream gin.HandlerFunc
}

// FallbackRoute is where pusher-js's HTTP fallback transports reach a node:
// its default httpPath, /pusher, then the app key, the session pusher-js
// made up and the transport (ws.Handler.ServeFallback).
const FallbackRoute = "/pusher/app/:key/:server/:session/:transport"

// Mount puts every route of a node on e, which NewEngine made: each group
// below lists its middleware in the order a request meets it, after the
// engine's own (the access log, then panic recovery) and r.Timer. The
// generated routers bind each API's operations inside its group.
func Mount(e *gin.Engine, r Routes) {
	if r.Timer != nil {
		e.Use(r.Timer)
	}

	// Probes, metrics and the API reference: open, no body.
	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	if r.Ready != nil {
		e.GET("/readyz", Ready(r.Ready...))
	}
	if r.Metrics != nil {
		e.GET("/metrics", gin.WrapH(r.Metrics))
	}
	e.GET(docs.Prefix+"/*file", gin.WrapH(docs.Handler())) // /docs redirects to /docs/

	// Pusher clients: the WebSocket, and the HTTP fallback, whose receiving
	// requests lift the timeouts themselves (xhr_send keeps them). Both
	// authenticate in protocol messages, not in HTTP.
	if r.Socket != nil {
		e.GET("/app/:key", LongLived, r.Socket) // the connection outlives the HTTP timeouts
	}
	if r.Fallback != nil {
		e.POST(FallbackRoute, r.Fallback)
		e.OPTIONS(FallbackRoute, r.Fallback)
	}

	// Channels HTTP API (/apps/{app_id}/…): the request signature, then
	// the Idempotency-Key of triggers and batches (after the signature,
	// which drops the signing parameters: a retry signed anew has the same
	// fingerprint).
	if api := r.Channels; api != nil {
		g := e.Group("", api.authenticate)
		if api.idem != nil {
			g.Use(api.idempotencyKeys())
		}
		api.mount(g)
	}

	// Beams Device and Reporting APIs, anonymous (browsers and phones):
	// CORS (its preflights outside the limit), the budget per client
	// address, the instance, then a JSON body of bounded size.
	if api := r.Device; api != nil {
		registerPreflights(e, device.GetSpec)
		api.mount(e.Group("", cors, api.anon.handler, pushInstance(api.instances), jsonBody(MaxDeviceBodyBytes)))
	}
	if api := r.Reporting; api != nil {
		registerPreflights(e, reporting.GetSpec)
		api.mount(e.Group("", cors, api.anon.handler, pushInstance(api.instances), jsonBody(MaxReportBodyBytes)))
	}

	// Beams Publish API: the instance, its secret key, the publish rate
	// limit, the body, then the Idempotency-Key of the publishing
	// operations.
	if api := r.Publish; api != nil {
		g := e.Group("", pushInstance(api.instances), secretKeyAuth, api.rateLimit, publishBody)
		if api.idem != nil {
			g.Use(api.idempotencyKeys())
		}
		api.mount(g)
	}

	if r.AdminToken == "" {
		return
	}
	token := RequireAdminToken(r.AdminToken)

	// Admin API (/admin/…): the token, then a bounded body.
	if api := r.Admin; api != nil {
		api.mount(e.Group("", token, limitBody(MaxAdminBodyBytes)))
	}

	// The debug console: the page open to all (it holds nothing until the
	// token is given), tickets behind the token, the event stream behind a
	// ticket or the token.
	if con := r.Console; con != nil {
		for path, serve := range con.Files {
			e.GET(path, serve)
		}
		e.POST("/console/tickets", token, con.IssueTicket)
		e.GET("/console/events", con.TicketOrToken(token), LongLived, con.Stream)
	}
}
