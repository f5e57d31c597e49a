package ws

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/recovery"
	"github.com/heraldrt/herald/server/ws/socket"
)

// Handler serves GET /app/<key>: the Pusher WebSocket protocol 7.
type Handler struct {
	hub   *hub.Hub
	apps  AppLookup
	log   *zap.Logger
	opts  Options
	stats stats // counters for metrics (stats.go)

	mu         sync.Mutex
	sessions   map[*session]struct{}
	xhr        map[string]*xhrSession // the HTTP fallback's sessions, by id (xhr.go)
	closing    bool
	xhrClosing bool           // the fallback refuses new sessions
	xhrGone    chan struct{}  // closed once the last fallback session is gone, while CloseHTTPSessions waits
	wg         sync.WaitGroup // sessions of both transports

	slowClosed atomic.Int64
	panics     recovery.Counter // panics recovered in handling a client's input
	connects   *connectLimiter  // nil: no limit on new connections per address
	stopWatch  chan struct{}
	poller     *socket.Poller // nil: each connection waits on its own goroutine
	pool       *socket.Pool   // runs write loops and the handling of parked connections' input
}

// The pool's bounds: the goroutines a busy server reuses, gone a second
// after traffic stops (an idle connection holds none), and at most
// maxGoroutines at once (socket.Pool.Bound says why), more only while all
// are stuck in a blocking write or read for stallAfter. Without the bound a
// broadcast to 10,000 parked subscribers started about 4,000 writers at
// once, each growing a fresh stack, and the runtime kept that memory as
// free heap afterwards: 4.6 KiB per subscriber of resident memory. With 256
// a broadcast queued for few goroutines, but a channel of 1,000 subscribers
// under four publishers then wrote its frames one system call each instead
// of corking them (30 % more CPU per delivery); at 1,024 a thousand
// subscribers' writers still start at once.
const (
	maxGoroutines   = 1024
	goroutineLinger = time.Second
	stallAfter      = 2 * time.Millisecond
)

// NewHandler returns the WebSocket endpoint over h.
func NewHandler(h *hub.Hub, apps AppLookup, log *zap.Logger, opts Options) *Handler {
	s := &Handler{hub: h, apps: apps, log: log, opts: opts.WithDefaults(), sessions: make(map[*session]struct{}), xhr: make(map[string]*xhrSession), stopWatch: make(chan struct{})}
	s.connects = newConnectLimiter(s.opts.ConnectRateLimit)
	s.pool = socket.NewPool(maxGoroutines, goroutineLinger)
	s.pool.Bound(maxGoroutines, stallAfter)
	s.poller = socket.NewPoller(s.stopWatch, s.pool)
	go s.watchWrites()
	return s
}

// Go runs f on the transport's pool of goroutines, whose stacks have grown
// on the upgrade and read paths already: server/upgrade serves upgrade
// requests on it.
func (s *Handler) Go(f func()) { s.pool.Go(f) }

// SlowConsumersClosed is how many connections were closed with 4100 because
// they could not keep up.
func (s *Handler) SlowConsumersClosed() int64 { return s.slowClosed.Load() }

// Sessions is the number of open WebSocket connections.
func (s *Handler) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// ServeHTTP serves a client whose address is the request's peer: GET with
// ServeClient, anything else with ServeFallback. Behind a router that knows
// the client's address better (trusted proxies), mount those instead.
func (s *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		s.ServeFallback(w, r, remoteIP(r))
		return
	}
	s.ServeClient(w, r, remoteIP(r))
}

// ServeClient upgrades the request of the client at clientIP and starts the
// connection (Shutdown waits for it). The key is the last path segment
// (/app/<key>). A client over Options.ConnectRateLimit is answered 429
// before any upgrade.
//
// The upgrade runs on a pooled goroutine while this one waits. net/http
// serves each connection on a new goroutine with a small stack, and the
// upgrade goes deep (the hijack, the handshake, the first messages): it grew
// that stack several times, copying it each time, a sixth of the CPU of
// accepting a connection. A pooled goroutine has the stack already. The
// handler must not return before the hijack, hence the wait; a panic is
// raised again here, where the router's recovery sees it.
//
// Every answer but the 101 closes the connection (the connect limiter's
// refusal, and hijacker.WriteHeader for the WebSocket library's): a client
// refused an upgrade has nothing more to ask on it, and nothing it sent
// after the head is read as another request.
func (s *Handler) ServeClient(w http.ResponseWriter, r *http.Request, clientIP string) {
	if !s.allowConnect(w, clientIP) {
		return
	}
	if headHijackerOf(w) != nil {
		// A request from server/upgrade, which runs them on this pool
		// already (the node and the tests give it Handler.Go).
		s.upgrade(w, r)
		return
	}
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
func (s *Handler) upgrade(w http.ResponseWriter, r *http.Request) {
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
	sess := &session{peer: peer{s: s}, ws: ws, sock: hj.sock, br: hj.br}
	sess.writeLoopFn = sess.writeLoop // one closure for the connection's life
	app, refusal := s.admit(r, r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:], &sess.peer, sess)
	if refusal != nil {
		s.reject(ws, *refusal)
		return
	}
	sess.poll = socket.NewHandle(socket.FD(hj.sock.Conn), sess)
	hj.sock.OnClose(sess.socketClosing)
	if !s.add(sess) {
		s.hub.Remove(sess.conn)
		s.reject(ws, hub.CloseShuttingDown)
		return
	}
	s.stats.connOpened()
	sess.start(app)
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

// WriteHeader closes the connection after any answer but the 101 (a
// refused handshake), and writes the status.
func (h *hijacker) WriteHeader(code int) {
	if code != http.StatusSwitchingProtocols {
		h.Header().Set("Connection", "close")
	}
	h.ResponseWriter.WriteHeader(code)
}

// Hijack implements http.Hijacker.
func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	// gin holds the status back until WriteHeaderNow; the WebSocket library
	// calls it only on a writer it recognises as gin's, which this is not.
	if g, ok := h.ResponseWriter.(interface{ WriteHeaderNow() }); ok {
		g.WriteHeaderNow()
	}
	conn, pending, head, err := h.take()
	if err != nil {
		return nil, nil, err
	}
	h.sock = socket.NewConn(conn, pending)
	if head != nil {
		h.sock.Hold(head) // the 101 leaves with connection_established, in one write
	}
	rw := h.sock.LibBuffers()
	h.br = rw.Reader
	return h.sock, rw, nil
}

// take hijacks the connection from the writer beneath: with the response
// head still to write when that writer allows it (server/upgrade's), else
// from net/http with the head written.
func (h *hijacker) take() (conn net.Conn, pending, head []byte, err error) {
	if hw := headHijackerOf(h.ResponseWriter); hw != nil {
		return hw.HijackWithHead()
	}
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, nil, errors.New("ws: the response writer cannot be hijacked")
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, nil, err
	}
	// The 101 response may still sit in net/http's buffer.
	if err := brw.Writer.Flush(); err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	// Bytes the client sent right after the handshake, if any.
	pending, _ = brw.Reader.Peek(brw.Reader.Buffered())
	return conn, pending, nil, nil
}

// headHijacker is a ResponseWriter that hands the connection over with the
// 101 response head unwritten (server/upgrade's, beneath gin's): the head is
// sent with the first frame instead of in a write of its own.
type headHijacker interface {
	HijackWithHead() (c net.Conn, pending, head []byte, err error)
}

// headHijackerOf finds a headHijacker in w or the writers it wraps.
func headHijackerOf(w http.ResponseWriter) headHijacker {
	for {
		if hw, ok := w.(headHijacker); ok {
			return hw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

// reject tells a client why it cannot connect, as a pusher:error and as the
// close code, and closes.
func (s *Handler) reject(ws *websocket.Conn, reason hub.CloseReason) {
	s.stats.connRejected(reason.Code)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout)
	defer cancel()
	_ = ws.Write(ctx, websocket.MessageText, errorFrame(reason.Code, reason.Message))
	_ = ws.Close(websocket.StatusCode(reason.Code), reason.Message)
}

func (s *Handler) add(sess *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.sessions[sess] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Handler) remove(sess *session) {
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
func (s *Handler) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		close(s.stopWatch)
	}
	s.closing = true
	for sess := range s.sessions {
		sess.conn.Close(hub.CloseShuttingDown)
	}
	s.closeHTTPSessionsLocked()
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
			for _, x := range s.xhr {
				go x.finish() // a poller that did not come back in time
			}
			s.mu.Unlock()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// watchWrites closes, every second, the sockets whose current write has taken
// longer than WriteTimeout: their client stopped reading. It also gives back
// the memory of a connect storm once it has passed (stormWatch). It runs
// until the handler shuts down.
func (s *Handler) watchWrites() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	storm := newStormWatch()
	for {
		select {
		case <-s.stopWatch:
			return
		case now := <-t.C:
			storm.tick(s.stats.opened.Load())
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
