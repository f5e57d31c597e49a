// Package console is Herald's live debug console: a page at /console (plain
// HTML, JavaScript and CSS embedded in the binary, no build step) that reads
// the admin API with the admin token, and an event stream at
// /console/events?app=<id>&ticket=<ticket> (Server-Sent Events) of what
// happens on an app's channels as it happens: HTTP triggers, client events,
// channels occupied and vacated, members added and removed, subscription
// counts, cache misses and webhook attempts.
//
// EventSource cannot send an Authorization header, and the admin token must
// not go in a URL (access logs and proxies record URLs). The page therefore
// asks for a ticket first (POST /console/tickets with the token in the
// header) and opens the stream with it: a ticket is random, opens one stream
// and expires after ticketTTL unused, so a logged URL opens nothing.
//
// The console observes the hub through the hub's observer slot (shared with
// webhooks through hub.Observers), so it must never block: each watcher has a
// bounded queue and misses events, counted, when it falls behind. With nobody
// watching, an event costs one atomic load (two in a cluster).
//
// In a cluster (SetRelay, relay.go) each event names the node that saw it,
// goes to the other nodes through a Relay while one of them has a stream of
// its app open, and the other nodes' events come in through Deliver.
package console

import (
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/heraldrt/herald/server/httpapi"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/text"
	"github.com/heraldrt/herald/server/webhook"
)

// Limits of the stream.
const (
	// watcherQueue is how many events wait for one slow watcher before
	// further ones are dropped for it.
	watcherQueue = 256
	// maxDataBytes is how much of an event's data the stream shows.
	maxDataBytes = 1024
	// keepAlive is how often an idle stream gets a comment, so proxies and
	// browsers keep it open.
	keepAlive = 15 * time.Second
	// defaultWriteTimeout is how long one write to a stream may take: the
	// server's write timeout does not apply to a stream (it would end it),
	// this does, so a page that stops reading is dropped rather than held
	// forever.
	defaultWriteTimeout = 30 * time.Second
	// ticketTTL is how long a ticket opens a stream; the page asks for one
	// right before it opens the stream.
	ticketTTL = 30 * time.Second
	// maxTickets bounds the tickets issued and not yet used or expired.
	maxTickets = 1024
)

//go:embed static
var static embed.FS

// The kinds of the stream's entries that are not hub events (whose kinds
// are the hub's: client_event, channel_occupied, …).
const (
	KindTrigger = "trigger" // an event triggered through the HTTP API
	KindWebhook = "webhook" // a webhook attempt
)

// Event is one entry of the live stream, as JSON.
type Event struct {
	Time    int64  `json:"time_ms"`
	AppID   string `json:"app_id"`
	Kind    string `json:"kind"` // trigger, client_event, channel_occupied, …, webhook
	Channel string `json:"channel,omitempty"`
	Event   string `json:"event,omitempty"`
	Data    string `json:"data,omitempty"`
	UserID  string `json:"user_id,omitempty"`
	Socket  string `json:"socket_id,omitempty"`
	Count   *int   `json:"count,omitempty"`
	URL     string `json:"url,omitempty"`    // webhook
	Status  int    `json:"status,omitempty"` // webhook
	Error   string `json:"error,omitempty"`  // webhook
	Node    string `json:"node,omitempty"`   // in a cluster: the node that saw it
}

// watcher is one open event stream.
type watcher struct {
	appID   string
	queue   chan []byte
	dropped atomic.Int64
}

// Console fans events out to the open streams.
type Console struct {
	now          func() time.Time
	writeTimeout time.Duration // for one write to a stream
	watching     atomic.Int32  // open streams; 0 makes publishing free

	// In a cluster (SetRelay): the node's id, put in each event, and the
	// relay to and from the other nodes.
	node  string
	relay Relay

	mu       sync.RWMutex
	watchers map[*watcher]struct{}
	apps     map[string]int // open streams per app
	closed   chan struct{}
	once     sync.Once

	ticketMu sync.Mutex
	tickets  map[[sha256.Size]byte]time.Time // SHA-256 of an unused ticket → its expiry
}

// New returns a console with no watchers.
func New() *Console {
	return &Console{
		now:          time.Now,
		writeTimeout: defaultWriteTimeout,
		watchers:     make(map[*watcher]struct{}),
		apps:         make(map[string]int),
		closed:       make(chan struct{}),
		tickets:      make(map[[sha256.Size]byte]time.Time),
	}
}

var _ hub.Observer = (*Console)(nil)

// Observe takes a channel event from the hub without blocking.
func (c *Console) Observe(ev hub.Event) {
	want, remote := c.wanted(ev.AppID)
	if !want {
		return
	}
	e := Event{AppID: ev.AppID, Kind: string(ev.Kind), Channel: ev.Channel, UserID: ev.UserID}
	switch ev.Kind {
	case hub.ClientEvent:
		e.Event, e.Data, e.Socket = ev.Name, ev.Data, ev.SocketID
	case hub.SubscriptionCount:
		n := ev.Count
		e.Count = &n
	}
	c.publish(e, remote)
}

// Triggered records an event published through the HTTP API on one channel.
func (c *Console) Triggered(appID, channel, event, data string) {
	if want, remote := c.wanted(appID); want {
		c.publish(Event{AppID: appID, Kind: KindTrigger, Channel: channel, Event: event, Data: data}, remote)
	}
}

// WebhookAttempt records the outcome of a webhook request; it has the
// signature of webhook.Options.OnAttempt.
func (c *Console) WebhookAttempt(a webhook.Attempt) {
	if want, remote := c.wanted(a.AppID); want {
		c.publish(Event{AppID: a.AppID, Kind: KindWebhook, URL: a.URL, Status: a.Status, Error: a.Error}, remote)
	}
}

// wanted reports whether a stream here or, through the relay, on another
// node (remote) watches appID: with none open anywhere, an event costs an
// atomic load or two. The relay is asked once per event.
func (c *Console) wanted(appID string) (want, remote bool) {
	remote = c.relay != nil && c.relay.Wanted(appID)
	return remote || c.watching.Load() != 0, remote
}

// publish shows e on this node's streams of its app and, when remote, sends
// it to the other nodes.
func (c *Console) publish(e Event, remote bool) {
	e.Time = c.now().UnixMilli()
	e.Node = c.node
	e.Data = text.Truncate(e.Data, maxDataBytes) // whole UTF-8 characters
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	if remote {
		c.relay.Send(e.AppID, b)
	}
	c.fanOut(e.AppID, b, 0)
}

// fanOut queues the event b (JSON) on every stream of appID, with dropped
// events lost before it (elsewhere) added to each stream's drops.
func (c *Console) fanOut(appID string, b []byte, dropped int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for w := range c.watchers {
		if w.appID != appID {
			continue
		}
		if dropped > 0 {
			w.dropped.Add(int64(dropped))
		}
		if b == nil {
			continue
		}
		select {
		case w.queue <- b:
		default:
			w.dropped.Add(1)
		}
	}
}

func (c *Console) watch(appID string) *watcher {
	w := &watcher{appID: appID, queue: make(chan []byte, watcherQueue)}
	c.mu.Lock()
	c.watchers[w] = struct{}{}
	c.apps[appID]++
	if c.apps[appID] == 1 && c.relay != nil {
		c.relay.Watch(appID) // under mu, so Watch and Unwatch keep their order
	}
	c.mu.Unlock()
	c.watching.Add(1)
	return w
}

func (c *Console) unwatch(w *watcher) {
	c.mu.Lock()
	delete(c.watchers, w)
	if c.apps[w.appID]--; c.apps[w.appID] == 0 {
		delete(c.apps, w.appID)
		if c.relay != nil {
			c.relay.Unwatch(w.appID)
		}
	}
	c.mu.Unlock()
	c.watching.Add(-1)
}

// Close ends every open stream; a server must call it before its graceful
// shutdown, which otherwise waits for the streams forever.
func (c *Console) Close() { c.once.Do(func() { close(c.closed) }) }

// Routes are the console's handlers, which httpapi.Mount puts on the
// node: the page and its assets, tickets and the event stream.
func (c *Console) Routes() *httpapi.ConsoleRoutes {
	files, _ := fs.Sub(static, "static")
	page := func(name, contentType string) gin.HandlerFunc {
		body, err := fs.ReadFile(files, name)
		if err != nil {
			panic("console: missing embedded " + name)
		}
		return func(ctx *gin.Context) {
			ctx.Header("Cache-Control", "no-cache")
			ctx.Header("X-Frame-Options", "DENY")
			ctx.Data(http.StatusOK, contentType, body)
		}
	}
	return &httpapi.ConsoleRoutes{
		Files: map[string]gin.HandlerFunc{
			"/console":             page("index.html", "text/html; charset=utf-8"),
			"/console/console.js":  page("console.js", "text/javascript; charset=utf-8"),
			"/console/console.css": page("console.css", "text/css; charset=utf-8"),
		},
		IssueTicket: c.issueTicket,
		// A client that can send headers (curl, tests) may send the token
		// instead of a ticket.
		TicketOrToken: func(auth gin.HandlerFunc) gin.HandlerFunc {
			return func(ctx *gin.Context) {
				if ctx.GetHeader("Authorization") != "" {
					auth(ctx)
					return
				}
				c.requireTicket(ctx)
			}
		},
		Stream: c.stream,
	}
}

// Ticket is the answer to POST /console/tickets.
type Ticket struct {
	Ticket    string `json:"ticket"`     // for /console/events?ticket=
	ExpiresIn int    `json:"expires_in"` // seconds it stays valid unused
}

// issueTicket answers POST /console/tickets (behind the token check) with a
// new ticket.
func (c *Console) issueTicket(ctx *gin.Context) {
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails
	t := base64.RawURLEncoding.EncodeToString(raw[:])
	now := c.now()
	c.ticketMu.Lock()
	if len(c.tickets) >= maxTickets {
		for h, exp := range c.tickets {
			if !now.Before(exp) {
				delete(c.tickets, h)
			}
		}
	}
	full := len(c.tickets) >= maxTickets
	if !full {
		c.tickets[sha256.Sum256([]byte(t))] = now.Add(ticketTTL)
	}
	c.ticketMu.Unlock()
	if full {
		httpapi.AbortWithError(ctx, http.StatusTooManyRequests, httpapi.KindTooManyRequests,
			"Too many unused tickets; open a stream with one or let them expire.")
		return
	}
	ctx.Header("Cache-Control", "no-store")
	ctx.JSON(http.StatusOK, Ticket{Ticket: t, ExpiresIn: int(ticketTTL / time.Second)})
}

// requireTicket lets the request through when its ?ticket= is one issued,
// unused and unexpired, and uses it up; otherwise 401. Tickets are kept by
// their hash, so the lookup says nothing through its timing.
func (c *Console) requireTicket(ctx *gin.Context) {
	t := ctx.Query("ticket")
	if t == "" {
		ctx.Header("WWW-Authenticate", `Bearer realm="herald"`)
		httpapi.AbortWithError(ctx, http.StatusUnauthorized, httpapi.KindUnauthorized,
			"The stream needs a ticket: POST /console/tickets with Authorization: Bearer <HERALD_ADMIN_TOKEN>, then GET /console/events?app=<id>&ticket=<ticket>.")
		return
	}
	h := sha256.Sum256([]byte(t))
	c.ticketMu.Lock()
	exp, ok := c.tickets[h]
	delete(c.tickets, h)
	c.ticketMu.Unlock()
	if !ok || !c.now().Before(exp) {
		ctx.Header("WWW-Authenticate", `Bearer realm="herald"`)
		httpapi.AbortWithError(ctx, http.StatusUnauthorized, httpapi.KindUnauthorized,
			"The ticket is unknown, used or expired; POST /console/tickets for a new one.")
		return
	}
	ctx.Next()
}

// stream serves GET /console/events?app=<id> as Server-Sent Events: one
// `data:` line of JSON (an Event) per event, `event: dropped` when events
// were lost because the page fell behind. httpapi.Mount puts LongLived in
// front of it; each write gets c.writeTimeout of its own instead.
func (c *Console) stream(ctx *gin.Context) {
	appID := ctx.Query("app")
	if appID == "" {
		httpapi.AbortWithError(ctx, http.StatusBadRequest, httpapi.KindMissingApp, "Name the app: /console/events?app=<id>.")
		return
	}
	w := c.watch(appID)
	defer c.unwatch(w)
	h := ctx.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	ctx.Status(http.StatusOK)
	rc := http.NewResponseController(ctx.Writer)
	// send writes and flushes msg within writeTimeout; false once the
	// stream is broken (a failed flush shows in the next write).
	send := func(msg string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
		if _, err := ctx.Writer.WriteString(msg); err != nil {
			return false
		}
		ctx.Writer.Flush()
		return true
	}
	if !send(": watching app " + appID + "\n\n") {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	var reported int64
	for {
		select {
		case b := <-w.queue:
			msg := "data: " + string(b) + "\n\n"
			if d := w.dropped.Load(); d != reported {
				msg = "event: dropped\ndata: " + itoa(d-reported) + "\n\n" + msg
				reported = d
			}
			if !send(msg) {
				return
			}
		case <-tick.C:
			if !send(": keep-alive\n\n") {
				return
			}
		case <-ctx.Request.Context().Done():
			return
		case <-c.closed:
			return
		}
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
