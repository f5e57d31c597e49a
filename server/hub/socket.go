package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/signing"
	"github.com/heraldrt/herald/server/ws/socket"
	"github.com/heraldrt/herald/storage"
)

// SocketOptions tune the WebSocket side. Zero values take the defaults.
type SocketOptions struct {
	// ActivityTimeout is sent to clients as activity_timeout; a client silent
	// this long is pinged by the server. Default 120 s.
	ActivityTimeout time.Duration
	// PongTimeout is how long a pinged client has to answer before it is
	// closed with 4201. Default 30 s.
	PongTimeout time.Duration
	// MaxQueueBytes bounds each connection's outbound queue; a client that
	// falls further behind is closed with 4100. Default 1 MiB.
	MaxQueueBytes int
	// WriteTimeout bounds one socket write; a client that does not read for
	// this long is dropped. Default 10 s.
	WriteTimeout time.Duration
	// MaxMessageBytes is the largest client message handled; larger ones are
	// answered with pusher:error and dropped. Default 16 KiB.
	MaxMessageBytes int
	// MaxChannelsPerConn bounds one connection's subscriptions. Default 1000.
	MaxChannelsPerConn int
}

func (o SocketOptions) withDefaults() SocketOptions {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.ActivityTimeout, 120*time.Second)
	def(&o.PongTimeout, 30*time.Second)
	def(&o.WriteTimeout, 10*time.Second)
	defInt(&o.MaxQueueBytes, DefaultMaxQueueBytes)
	defInt(&o.MaxMessageBytes, 16*1024)
	defInt(&o.MaxChannelsPerConn, 1000)
	return o
}

// Limits of client messages.
const (
	// MaxClientEventDataBytes is the largest client event data relayed.
	MaxClientEventDataBytes = 10 * 1024
	// ClientEventsPerSecond is the client event rate allowed per connection.
	ClientEventsPerSecond = 10
	// hardReadLimit is where the WebSocket library gives up on a message and
	// closes the connection (1009); below it, oversized messages are only
	// refused with a pusher:error.
	hardReadLimit = 1 << 20
)

// AppLookup finds apps for the socket side.
type AppLookup interface {
	ByKey(key string) *storage.App
	ByID(id string) *storage.App
}

// SocketHandler serves GET /app/<key>: the Pusher WebSocket protocol 7.
type SocketHandler struct {
	hub  *Hub
	apps AppLookup
	log  *zap.Logger
	opts SocketOptions

	mu       sync.Mutex
	sessions map[*session]struct{}
	closing  bool
	wg       sync.WaitGroup

	slowClosed atomic.Int64
	stopWatch  chan struct{}
	poller     *socket.Poller // nil: each connection waits on its own goroutine
	pool       *socket.Pool   // runs write loops and the handling of parked connections' input
}

// The pool's bounds: the goroutines a busy server reuses, gone a second
// after traffic stops (an idle connection holds none). The cap is above the
// subscribers one broadcast usually reaches, because a broadcast starts a
// writer for each of them at once: with 1,024, a 10,000-subscriber channel
// started 9,000 goroutines per event and grew each one's stack, 13 % of the
// server's CPU at two events a second. Waiting goroutines cost a few KiB of
// stack each, and only for the second after such a burst.
const (
	maxIdleGoroutines = 16384
	goroutineLinger   = time.Second
)

// NewSocketHandler returns the WebSocket endpoint over h.
func NewSocketHandler(h *Hub, apps AppLookup, log *zap.Logger, opts SocketOptions) *SocketHandler {
	s := &SocketHandler{hub: h, apps: apps, log: log, opts: opts.withDefaults(), sessions: make(map[*session]struct{}), stopWatch: make(chan struct{})}
	s.pool = socket.NewPool(maxIdleGoroutines, goroutineLinger)
	s.poller = socket.NewPoller(s.stopWatch, s.pool)
	go s.watchWrites()
	return s
}

// appSubscriptionCount reports the app's subscription_count switch.
func (s *SocketHandler) appSubscriptionCount(appID string) bool {
	app := s.apps.ByID(appID)
	return app != nil && app.SubscriptionCount
}

// SlowConsumersClosed is how many connections were closed with 4100 because
// they could not keep up.
func (s *SocketHandler) SlowConsumersClosed() int64 { return s.slowClosed.Load() }

// Sessions is the number of open WebSocket connections.
func (s *SocketHandler) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// session is one WebSocket connection: the registry's Conn plus the socket,
// its writer goroutine and its idle timer.
type session struct {
	s     *SocketHandler
	conn  *Conn
	ws    *websocket.Conn
	sock  *socket.Conn  // what ws reads and writes
	br    *bufio.Reader // ws's read buffer, over sock
	appID string
	key   string

	// readGate orders the reader's look at the read buffers (inputPending)
	// before a close handshake, in which the library reads them from the
	// writer's goroutine; handshaking is set, under it, once that starts.
	readGate    sync.Mutex
	handshaking bool

	// The connection's registration with the input poller.
	poll socket.Handle

	// writeStarted is when the write in progress began (unix nanoseconds),
	// 0 between writes. Writes carry no context of their own, because a
	// deadline per write costs a timer on the fan-out hot path; the
	// handler's watchdog closes a socket whose write is stuck instead.
	writeStarted atomic.Int64

	// authorized: signed in or subscribed to a private or presence channel,
	// which the app's user-authentication timeout asks for.
	authorized atomic.Bool

	lastActivity atomic.Int64 // unix nanoseconds of the last client message
	pingSent     atomic.Bool
	idle         *time.Timer
	authTimer    *time.Timer // the app's user-authentication timeout, if any

	writers sync.WaitGroup // the writer goroutine, while one runs

	// Client event rate limiting; touched only by the reader goroutine.
	rateWindow time.Time
	rateCount  int
}

// ServeHTTP upgrades the request and starts the connection (Shutdown waits
// for it). The key is the last path segment (/app/<key>).
//
// The upgrade runs on a pooled goroutine while this one waits. net/http
// serves each connection on a new goroutine with a small stack, and the
// upgrade goes deep (the hijack, the handshake, the first messages): it grew
// that stack several times, copying it each time, a sixth of the CPU of
// accepting a connection. A pooled goroutine has the stack already. The
// handler must not return before the hijack, hence the wait; a panic is
// raised again here, where the router's recovery sees it.
func (s *SocketHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	done := make(chan any, 1)
	s.pool.Go(func() {
		defer func() { done <- recover() }()
		s.upgrade(w, r)
	})
	if p := <-done; p != nil {
		panic(p)
	}
}

// upgrade is ServeHTTP's work.
func (s *SocketHandler) upgrade(w http.ResponseWriter, r *http.Request) {
	hj := &hijacker{ResponseWriter: w}
	ws, err := websocket.Accept(hj, r, &websocket.AcceptOptions{
		// Pusher has no origin policy: browsers connect from any site and the
		// app key is public. Private data is guarded by channel authorization.
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		return // Accept has answered the HTTP request
	}
	ws.SetReadLimit(hardReadLimit)
	key := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	app := s.apps.ByKey(key)
	switch {
	case r.URL.Query().Get("protocol") != "7":
		s.reject(ws, CloseUnsupportedProtocol)
		return
	case app == nil:
		s.reject(ws, CloseUnknownApp)
		return
	case !app.Enabled:
		s.reject(ws, CloseAppDisabled)
		return
	}
	conn, err := s.hub.Connect(app.ID, app.MaxConnections, s.opts.MaxQueueBytes)
	if err != nil {
		s.reject(ws, CloseOverConnectionQuota)
		return
	}
	sess := &session{s: s, conn: conn, ws: ws, sock: hj.sock, br: hj.br, appID: app.ID, key: app.Key}
	sess.poll = socket.NewHandle(socket.FD(hj.sock.Conn), sess)
	hj.sock.OnClose(sess.socketClosing)
	conn.onOverflow = sess.overflowed
	conn.writers = &sess.writers
	writeLoop := sess.writeLoop // one closure for the connection's life
	conn.startWriter = func() { s.pool.Go(writeLoop) }
	if !s.add(sess) {
		s.hub.Remove(conn)
		s.reject(ws, CloseShuttingDown)
		return
	}
	s.hub.stats.connOpened()
	sess.start()
	// The HTTP handler returns: the hijacked socket needs nothing from
	// net/http or gin any more, and the handler's goroutine, whose stack
	// grew while serving HTTP, ends. The connection is parked with the
	// poller until it has input (see Resume), or, without a poller, waits on
	// a small goroutine of its own (see readLoop).
	if s.poller != nil && sess.poll.Parkable() {
		sess.Resume(false)
		return
	}
	go sess.waitAlone()
}

// hijacker hijacks the connection for the WebSocket library with a
// socket.Conn and tiny bufio buffers instead of net/http's 4 KiB ones, which the library
// would keep for the connection's life: most of the memory of an idle
// connection. It remembers what it handed out.
type hijacker struct {
	http.ResponseWriter
	sock *socket.Conn
	br   *bufio.Reader
}

// Hijack implements http.Hijacker.
func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hub: the response writer cannot be hijacked")
	}
	// gin holds the status back until WriteHeaderNow; the WebSocket library
	// calls it only on a writer it recognises as gin's, which this is not.
	if g, ok := h.ResponseWriter.(interface{ WriteHeaderNow() }); ok {
		g.WriteHeaderNow()
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	// The 101 response may still sit in net/http's buffer.
	if err := brw.Writer.Flush(); err != nil {
		conn.Close()
		return nil, nil, err
	}
	// Bytes the client sent right after the handshake, if any.
	pending, _ := brw.Reader.Peek(brw.Reader.Buffered())
	h.sock = socket.NewConn(conn, pending)
	rw := h.sock.LibBuffers()
	h.br = rw.Reader
	return h.sock, rw, nil
}

// reject tells a client why it cannot connect, as a pusher:error and as the
// close code, and closes.
func (s *SocketHandler) reject(ws *websocket.Conn, reason CloseReason) {
	s.hub.stats.connRejected(reason.Code)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout)
	defer cancel()
	_ = ws.Write(ctx, websocket.MessageText, errorFrame(reason.Code, reason.Message))
	_ = ws.Close(websocket.StatusCode(reason.Code), reason.Message)
}

func (s *SocketHandler) add(sess *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.sessions[sess] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *SocketHandler) remove(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	s.mu.Unlock()
	s.wg.Done()
}

// shutdownGrace is how long connections get to take their 4200 close before
// the ones still stuck (a client not reading) are dropped.
const shutdownGrace = 2 * time.Second

// Shutdown closes every connection with 4200 (reconnect) and waits until they
// are gone or ctx ends; sockets that have not closed within shutdownGrace are
// dropped. New connections are refused from now on.
func (s *SocketHandler) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		close(s.stopWatch)
	}
	s.closing = true
	for sess := range s.sessions {
		sess.conn.Close(CloseShuttingDown)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-grace.C:
			s.mu.Lock()
			for sess := range s.sessions {
				go sess.ws.CloseNow() //nolint:errcheck // the session cleans up
			}
			s.mu.Unlock()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// start sets the connection up and greets the client.
func (sess *session) start() {
	sess.touch()
	sess.idle = time.AfterFunc(sess.s.opts.ActivityTimeout, sess.onIdle)
	s := sess.s
	s.hub.SetSubscriptionCount(sess.appID, s.appSubscriptionCount(sess.appID))
	if app := s.apps.ByID(sess.appID); app != nil && app.UserAuthTimeout > 0 {
		sess.authTimer = time.AfterFunc(app.UserAuthTimeout, func() {
			if !sess.authorized.Load() {
				sess.conn.Close(CloseAuthTimeout)
			}
		})
	}
	sess.conn.Send(jsonFrame("pusher:connection_established", "", struct {
		SocketID        string `json:"socket_id"`
		ActivityTimeout int    `json:"activity_timeout"`
	}{sess.conn.SocketID(), activitySeconds(sess.s.opts.ActivityTimeout)}))
}

// finish cleans up once the socket has failed or closed: it returns when the
// writer is done, and the connection is gone.
func (sess *session) finish() {
	defer sess.s.remove(sess)
	sess.idle.Stop()
	if sess.authTimer != nil {
		sess.authTimer.Stop()
	}
	sess.s.hub.Remove(sess.conn)
	sess.conn.Close(closeGone) // ends the writer, or starts one that ends at once
	sess.writers.Wait()
	_ = sess.ws.CloseNow()
	sess.s.hub.stats.connClosed(sess.conn.closeCode())
}

// overflowGrace is how long a writer stuck on a full socket gets to finish
// its write after the queue overflowed, so that the 4100 close can still be
// sent to a client that is slow but reading.
const overflowGrace = time.Second

// overflowed runs once when the connection's queue overflows. If the writer
// is still stuck on the full socket after the grace period, the socket is
// dropped without ceremony.
func (sess *session) overflowed() {
	sess.s.slowClosed.Add(1)
	time.AfterFunc(overflowGrace, func() {
		if sess.writeStarted.Load() != 0 {
			_ = sess.ws.CloseNow()
		}
	})
}

// writeLoop is the connection's only writer, started when there is something
// to write: it drains the queue onto the socket and exits when the queue is
// empty; once the connection is closing, it sends the reason and closes.
func (sess *session) writeLoop() {
	defer sess.writers.Done()
	var frames [][]byte // drain lends the connection's buffer
	for {
		var reason *CloseReason
		var idle bool
		frames, reason, idle = sess.conn.drain(frames)
		if idle {
			return
		}
		sess.s.hub.stats.framesDelivered(len(frames))
		// Several frames leave together (socket.Conn's cork).
		corked := len(frames) > 1
		if corked {
			sess.sock.Cork()
		}
		for i, f := range frames {
			if err := sess.write(f); err != nil {
				_ = sess.ws.CloseNow()
				clear(frames)
				return
			}
			frames[i] = nil
		}
		frames = frames[:0]
		if corked {
			if err := sess.uncork(); err != nil {
				_ = sess.ws.CloseNow()
				return
			}
		}
		if reason == nil {
			continue
		}
		if reason.Code != 0 {
			_ = sess.write(errorFrame(reason.Code, reason.Message))
			sess.closeHandshake(websocket.StatusCode(reason.Code), reason.Message)
		} else {
			_ = sess.ws.CloseNow()
		}
		return
	}
}

// closeHandshake sends a close frame and waits for the client's. The library
// reads the answer on this goroutine unless the reader is inside the library
// already; either way the reader then sees the socket closed and cleans up.
func (sess *session) closeHandshake(code websocket.StatusCode, reason string) {
	sess.readGate.Lock()
	sess.handshaking = true
	sess.readGate.Unlock()
	_ = sess.ws.Close(code, reason)
}

func (sess *session) write(frame []byte) error {
	sess.writeStarted.Store(time.Now().UnixNano())
	err := sess.ws.Write(context.Background(), websocket.MessageText, frame)
	sess.writeStarted.Store(0)
	return err
}

// uncork sends the frames the socket held while corked, timed like write.
func (sess *session) uncork() error {
	sess.writeStarted.Store(time.Now().UnixNano())
	err := sess.sock.Uncork()
	sess.writeStarted.Store(0)
	return err
}

// watchWrites closes, every second, the sockets whose current write has taken
// longer than WriteTimeout: their client stopped reading. It runs until the
// handler shuts down.
func (s *SocketHandler) watchWrites() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stopWatch:
			return
		case now := <-t.C:
			limit := now.Add(-s.opts.WriteTimeout).UnixNano()
			s.mu.Lock()
			for sess := range s.sessions {
				if started := sess.writeStarted.Load(); started != 0 && started < limit {
					go sess.ws.CloseNow() //nolint:errcheck // the writer sees the failure
				}
			}
			s.mu.Unlock()
		}
	}
}

// touch records client activity, which postpones the server's ping.
func (sess *session) touch() {
	sess.lastActivity.Store(time.Now().UnixNano())
	sess.pingSent.Store(false)
}

// onIdle runs on the idle timer: ping a client silent for the activity
// timeout, close one that did not answer the ping in time.
func (sess *session) onIdle() {
	opts := sess.s.opts
	idleFor := time.Since(time.Unix(0, sess.lastActivity.Load()))
	switch {
	case idleFor < opts.ActivityTimeout && !sess.pingSent.Load():
		sess.idle.Reset(opts.ActivityTimeout - idleFor)
	case !sess.pingSent.Load():
		sess.pingSent.Store(true)
		sess.conn.Send(pingFrame)
		sess.idle.Reset(opts.PongTimeout)
	default:
		sess.conn.Close(ClosePongTimeout)
	}
}

// activitySeconds is the activity timeout in whole seconds, at least 1, as
// the protocol carries it.
func activitySeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

var (
	pingFrame = eventFrame("pusher:ping", "", "{}", "")
	pongFrame = eventFrame("pusher:pong", "", "{}", "")
)

// clientMessage is a frame sent by a client.
type clientMessage struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
}

// Resume handles the connection's input until none is buffered (readable:
// the poller saw the socket readable), then parks the connection with the
// poller and returns; the poller calls it again, on a pooled goroutine, when
// there is input. Once the socket is done it finishes the connection.
func (sess *session) Resume(readable bool) {
	woken := readable
	for {
		if !woken && !sess.inputPending() {
			switch err := sess.s.poller.Park(&sess.poll); {
			case err == nil:
				return
			case errors.Is(err, socket.ErrClosed):
				sess.finish()
				return
			default: // the poller cannot take it
				go sess.waitAlone()
				return
			}
		}
		woken = false
		if !sess.readMessages(true) {
			sess.finish()
			return
		}
	}
}

// socketClosing runs when the WebSocket library closes the socket. A parked
// connection has no goroutine to see that, so it is finished from here.
func (sess *session) socketClosing() {
	if sess.s.poller != nil && sess.s.poller.Closed(&sess.poll) {
		go sess.finish()
	}
}

// waitAlone serves the connection on a goroutine of its own, when there is
// no poller to park it with.
func (sess *session) waitAlone() {
	sess.readLoop()
	sess.finish()
}

// readLoop handles client messages until the socket fails or closes.
//
// Without the poller, it runs on the connection's long-lived goroutine, which
// spends nearly all its life waiting, so it must stay small: handling a message (JSON, channel
// authorization, subscribing, encoding answers) would grow its stack to
// several KiB, kept for the connection's life as Go shrinks a stack only when
// three quarters of it are unused. So this goroutine only waits for input,
// without reading it, and each burst of input is handled on a short-lived
// goroutine that ends once nothing more is buffered.
func (sess *session) readLoop() {
	for {
		if !sess.inputPending() {
			switch err := socket.WaitReadable(sess.sock.Conn); {
			case errors.Is(err, socket.ErrNoWait):
				sess.readMessages(false) // read (and wait) on this goroutine
				return
			case err != nil:
				return
			}
		}
		more := make(chan bool, 1)
		go func() { more <- sess.readMessages(true) }()
		if !<-more {
			return
		}
	}
}

// readMessages reads and handles client messages. With untilDrained it
// returns true once no more input is buffered (it may still wait inside the
// library for the rest of a frame); otherwise, or on a failed or closed
// socket, it returns false once the socket is done.
func (sess *session) readMessages(untilDrained bool) bool {
	for {
		typ, r, err := sess.ws.Reader(context.Background())
		if err != nil {
			return false
		}
		sess.touch()
		buf, tooBig, err := readMessage(r, sess.s.opts.MaxMessageBytes)
		if err != nil {
			return false
		}
		switch {
		case typ != websocket.MessageText:
			sess.sendError(0, "Binary frames are not supported; send JSON text.")
		case tooBig:
			sess.sendError(0, "Message too large: the limit is "+itoa(sess.s.opts.MaxMessageBytes)+" bytes.")
		default:
			sess.handle(buf)
		}
		if untilDrained && !sess.inputPending() {
			return true
		}
	}
}

// inputPending reports whether bytes already read from the socket wait to be
// handled. Once a close handshake has started, the library reads them, so
// they are not looked at (and not reported).
func (sess *session) inputPending() bool {
	sess.readGate.Lock()
	defer sess.readGate.Unlock()
	return !sess.handshaking && (sess.br.Buffered() > 0 || sess.sock.Buffered())
}

// sendError queues a non-fatal pusher:error; code 0 is sent as null, as
// Pusher does for protocol misuse that has no code of its own.
func (sess *session) sendError(code int, message string) {
	sess.conn.Send(errorFrame(code, message))
}

// handle dispatches one client message.
func (sess *session) handle(raw []byte) {
	msg, problem := parseClientMessage(raw)
	if problem != "" {
		sess.sendError(0, problem)
		return
	}
	switch {
	case msg.Event == "pusher:ping":
		sess.conn.Send(pongFrame)
	case msg.Event == "pusher:pong":
		// activity already recorded
	case msg.Event == "pusher:subscribe":
		sess.subscribe(msg)
	case msg.Event == "pusher:unsubscribe":
		sess.unsubscribe(msg)
	case msg.Event == "pusher:signin":
		sess.signin(msg)
	case strings.HasPrefix(msg.Event, "client-"):
		sess.clientEvent(msg)
	default:
		sess.sendError(0, "Unsupported event received on socket: "+truncate(msg.Event, 64))
	}
}

// parseClientMessage decodes a client frame, which must be a JSON object with
// a string event; otherwise it returns the problem, to be sent to the client.
func parseClientMessage(raw []byte) (msg clientMessage, problem string) {
	if err := json.Unmarshal(raw, &msg); err != nil {
		return msg, "Invalid message: expected a JSON object with an event"
	}
	if msg.Event == "" {
		return msg, "Invalid message: the event field is missing"
	}
	return msg, ""
}

// subscribeData is the data of pusher:subscribe.
type subscribeData struct {
	Channel     string `json:"channel"`
	Auth        string `json:"auth"`
	ChannelData string `json:"channel_data"`
}

// decodeData unmarshals a message's data into v, accepting both an object
// and a JSON string holding one (clients send either).
func decodeData(data json.RawMessage, v any) error {
	var s string
	if len(data) > 0 && data[0] == '"' {
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		data = json.RawMessage(s)
	}
	return json.Unmarshal(data, v)
}

// channelData is the channel_data of a presence subscription.
type channelData struct {
	UserID   json.RawMessage `json:"user_id"`
	UserInfo json.RawMessage `json:"user_info"`
}

// userIDString accepts a user_id given as a string or a number.
func userIDString(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, s != ""
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return n.String(), true
	}
	return "", false
}

func (sess *session) subscriptionError(channel, typ, message string, status int) {
	sess.conn.Send(jsonFrame("pusher:subscription_error", channel, struct {
		Type   string `json:"type"`
		Error  string `json:"error"`
		Status int    `json:"status"`
	}{typ, message, status}))
}

func (sess *session) subscribe(msg clientMessage) {
	var d subscribeData
	if err := decodeData(msg.Data, &d); err != nil || d.Channel == "" {
		sess.sendError(0, "Invalid pusher:subscribe: data must hold the channel name")
		return
	}
	name := d.Channel
	if !ValidChannelName(name) {
		sess.subscriptionError(name, "InvalidChannel", "Invalid channel name: use 1 to 200 characters of A-Z a-z 0-9 _ - = @ , . ;", 400)
		return
	}
	app := sess.s.apps.ByID(sess.appID)
	if app == nil || !app.Enabled {
		sess.conn.Close(CloseAppDisabled)
		return
	}
	if _, already := sess.conn.Subscription(name); !already && sess.conn.SubscriptionCount() >= sess.s.opts.MaxChannelsPerConn {
		sess.subscriptionError(name, "LimitReached", "This connection is subscribed to the maximum of "+itoa(sess.s.opts.MaxChannelsPerConn)+" channels.", 403)
		return
	}
	kind, _ := ChannelKind(name)
	opts := SubscribeOptions{MaxMembers: app.MaxPresenceMembers}
	switch kind {
	case ServerToUser:
		// Only the connection's own signed-in user, and only after sign-in.
		if user := sess.conn.UserID(); user == "" || name != ServerToUserPrefix+user {
			sess.subscriptionError(name, "AuthError", "Server-to-user channels are only for the signed-in user's own id.", 403)
			return
		}
	case Private, PrivateEncrypted:
		if !verifyChannelAuth(d.Auth, app, sess.conn.SocketID(), name, "") {
			sess.subscriptionError(name, "AuthError", "Invalid signature: the auth string does not authorize this socket for this channel.", 401)
			return
		}
	case Presence:
		if !verifyChannelAuth(d.Auth, app, sess.conn.SocketID(), name, d.ChannelData) {
			sess.subscriptionError(name, "AuthError", "Invalid signature: the auth string does not authorize this socket and channel_data for this channel.", 401)
			return
		}
		var pd channelData
		if err := json.Unmarshal([]byte(d.ChannelData), &pd); err != nil {
			sess.subscriptionError(name, "AuthError", "Invalid channel_data: it must be a JSON object with a user_id.", 400)
			return
		}
		userID, ok := userIDString(pd.UserID)
		if !ok {
			sess.subscriptionError(name, "AuthError", "Invalid channel_data: user_id must be a non-empty string or a number.", 400)
			return
		}
		if len(pd.UserInfo) > app.MaxPresenceUserInfoBytes {
			sess.subscriptionError(name, "LimitReached", "user_info is larger than "+itoa(app.MaxPresenceUserInfoBytes)+" bytes.", 400)
			return
		}
		opts.Member = &Member{UserID: userID, Info: pd.UserInfo}
	}
	err := sess.s.hub.Subscribe(sess.conn, name, opts)
	if err == nil && (kind == Private || kind == PrivateEncrypted || kind == Presence) {
		sess.authorized.Store(true)
	}
	switch {
	case errors.Is(err, ErrPresenceFull):
		sess.subscriptionError(name, "LimitReached", "The presence channel has the maximum of "+itoa(app.MaxPresenceMembers)+" members.", 403)
	case err != nil && !errors.Is(err, ErrConnRemoved):
		sess.s.log.Error("subscribe failed", zap.String("channel", name), zap.Error(err))
		sess.subscriptionError(name, "ServerError", "The subscription failed.", 500)
	}
}

// signinData is the data of pusher:signin.
type signinData struct {
	Auth     string `json:"auth"`
	UserData string `json:"user_data"`
}

// userData is the part of the signed user_data Herald reads.
type userData struct {
	ID        json.RawMessage `json:"id"`
	Watchlist []string        `json:"watchlist"`
}

// signin authenticates the connection as a user. A bad signature or user_data
// without an id closes the connection with 4009, as Pusher does.
func (sess *session) signin(msg clientMessage) {
	var d signinData
	if err := decodeData(msg.Data, &d); err != nil {
		sess.sendError(0, "Invalid pusher:signin: data must hold auth and user_data")
		return
	}
	if sess.conn.UserID() != "" {
		sess.sendError(0, "This connection is already signed in.")
		return
	}
	app := sess.s.apps.ByID(sess.appID)
	if app == nil || !signing.VerifyUserAuth(d.Auth, app.Key, app.Secret, sess.conn.SocketID(), d.UserData) {
		sess.conn.Close(CloseReason{CloseUnauthorized.Code, "Invalid signature: the auth string does not sign this socket and user_data"})
		return
	}
	var ud userData
	if err := json.Unmarshal([]byte(d.UserData), &ud); err != nil {
		sess.conn.Close(CloseReason{CloseUnauthorized.Code, "Invalid user_data: it must be a JSON object"})
		return
	}
	id, ok := userIDString(ud.ID)
	if !ok {
		sess.conn.Close(CloseReason{CloseUnauthorized.Code, "Invalid user_data: the id field is required"})
		return
	}
	sess.conn.Send(jsonFrame("pusher:signin_success", "", struct {
		UserData string `json:"user_data"`
	}{d.UserData}))
	if len(ud.Watchlist) > MaxWatchlist {
		sess.sendError(4302, "The watchlist holds more than "+itoa(MaxWatchlist)+" user ids; only the first "+itoa(MaxWatchlist)+" are watched.")
	}
	if err := sess.s.hub.SignIn(sess.conn, id, ud.Watchlist); err != nil {
		return // removed meanwhile
	}
	sess.authorized.Store(true)
}

func (sess *session) unsubscribe(msg clientMessage) {
	var d subscribeData
	if err := decodeData(msg.Data, &d); err != nil || d.Channel == "" {
		sess.sendError(0, "Invalid pusher:unsubscribe: data must hold the channel name")
		return
	}
	sess.s.hub.Unsubscribe(sess.conn, d.Channel)
}

// clientEvent relays a client- event to the channel's other subscribers.
func (sess *session) clientEvent(msg clientMessage) {
	app := sess.s.apps.ByID(sess.appID)
	if app == nil || !app.ClientEvents {
		sess.sendError(0, "Client events are not enabled for this app.")
		return
	}
	kind, _ := ChannelKind(msg.Channel)
	if kind != Private && kind != Presence {
		sess.sendError(0, "Client events are only allowed on private and presence channels (not encrypted ones).")
		return
	}
	userID, subscribed := sess.conn.Subscription(msg.Channel)
	if !subscribed {
		sess.sendError(0, "Client event rejected: the connection is not subscribed to "+truncate(msg.Channel, 200)+".")
		return
	}
	if len(msg.Event) > MaxEventNameLength {
		sess.sendError(0, "Client event rejected: the event name is longer than 200 characters.")
		return
	}
	data := dataString(msg.Data)
	if len(data) > MaxClientEventDataBytes {
		sess.sendError(0, "Client event rejected: data is larger than 10 KB.")
		return
	}
	now := time.Now()
	if now.Sub(sess.rateWindow) >= time.Second {
		sess.rateWindow, sess.rateCount = now, 0
	}
	if sess.rateCount >= ClientEventsPerSecond {
		sess.sendError(4301, "Client event rejected: more than 10 client events per second.")
		return
	}
	sess.rateCount++
	sess.s.hub.Publish(Message{AppID: sess.appID, Channel: msg.Channel, Event: msg.Event, Data: data, UserID: userID, ExcludeSocketID: sess.conn.SocketID()})
	sess.s.hub.stats.clientEvent()
	sess.s.hub.notify(Event{AppID: sess.appID, Kind: ClientEvent, Channel: msg.Channel, Name: msg.Event, Data: data, SocketID: sess.conn.SocketID(), UserID: userID})
}

// dataString returns client event data as the string to relay: a JSON string
// as its contents, anything else as its JSON text. Receivers get it as the
// data string of the frame, as with events triggered over HTTP.
func dataString(raw json.RawMessage) string {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}

// errorFrame is a pusher:error with code (0 sent as null) and message.
func errorFrame(code int, message string) []byte {
	var c *int
	if code != 0 {
		c = &code
	}
	return jsonFrame("pusher:error", "", struct {
		Code    *int   `json:"code"`
		Message string `json:"message"`
	}{c, message})
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
