// Package upgrade takes WebSocket upgrade requests straight off the
// listener, without net/http's machinery for a connection, and hands every
// other connection to the http.Server unchanged.
//
// A connect storm (every client of a node reconnecting after a deploy or a
// network blip) is mostly upgrade requests, and for each of them net/http
// starts a goroutine whose stack grows on the way down, allocates 4 KiB
// read and write buffers that a hijacked connection never gives back (12 KiB
// of garbage per connection, with the writer Hijack makes), starts a
// background read to notice the client going away and stops it again to
// hijack, and writes the 101 response in a system call of its own. A
// profile of 18,500 connections opening showed a third of the server's CPU
// there. Here a connection's first bytes are read into a pooled buffer; a
// request that is plainly a WebSocket upgrade (GET, HTTP/1.1, a path under
// the prefix, Upgrade: websocket, a valid Host and headers, no body, a head
// of at most one buffer) is parsed by net/http's own parser and served by
// the same handler (the gin engine: its middleware, routes, trusted proxies
// and recovery) through a small ResponseWriter whose Hijack hands the
// connection over with the 101 response not yet written, so that it leaves
// with the first frame. Anything else — another path, another method, a
// malformed or unusual request, TLS — goes to the http.Server with the bytes
// already read put back in front, and net/http answers it exactly as it
// would have.
package upgrade

import (
	"cmp"
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/internal/recovery"
)

// Options tune a Server. Zero values take the defaults.
type Options struct {
	// PathPrefix is what an upgrade request's path starts with to be served
	// here. Default "/app/".
	PathPrefix string
	// HeaderTimeout bounds the wait for a request head, as
	// http.Server.ReadHeaderTimeout does. Default 10 s.
	HeaderTimeout time.Duration
	// ReadTimeout is the http.Server's ReadTimeout, which bounds a request's
	// head and body together: the first request of a connection handed
	// over has it from accept, not from when net/http started on it
	// (replayConn). Zero: none.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing an answer that is not an upgrade (a 429,
	// a 400). Default 10 s.
	WriteTimeout time.Duration
	// Now is the clock that times a connection from its accept (tests set
	// it). Default time.Now.
	Now func() time.Time
	// Go runs an upgrade request, once its head is read, on another
	// goroutine, which should be a pooled one: the upgrade goes deep, and a
	// fresh goroutine would grow its stack on the way. Default: a new
	// goroutine.
	Go func(func())
	// Log receives the panics recovered in serving a request.
	Log *zap.Logger
}

// WithDefaults returns o with the defaults in place of its zero fields.
func (o Options) WithDefaults() Options {
	o.PathPrefix = cmp.Or(o.PathPrefix, "/app/")
	o.HeaderTimeout = cmp.Or(o.HeaderTimeout, 10*time.Second)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, 10*time.Second)
	if o.Go == nil {
		o.Go = func(f func()) { go f() }
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Server serves the upgrade requests of the listeners it wraps.
type Server struct {
	handler http.Handler
	opts    Options

	inFlight sync.WaitGroup   // connections being read or served here
	panics   recovery.Counter // panics recovered in serving a request
}

// NewServer returns a Server whose upgrade requests handler serves: the
// http.Server's handler, so that they pass the same middleware as every
// request.
func NewServer(handler http.Handler, opts Options) *Server {
	return &Server{handler: handler, opts: opts.WithDefaults()}
}

// Panics is how many panics were recovered in serving a request here (the
// handler's own recovery answers most before they get here).
func (s *Server) Panics() int64 { return s.panics.Count() }

// Wait waits until no connection is being read or served here, or ctx ends.
// Each is bounded by HeaderTimeout and the handler.
func (s *Server) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.inFlight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Listener is the listener to give the http.Server: its Accept returns the
// connections that are not WebSocket upgrades, while those are served as
// they arrive.
type Listener struct {
	s      *Server
	inner  net.Listener
	toHTTP chan net.Conn // connections for the http.Server
	done   chan struct{} // closed by Close, or when inner fails for good
	once   sync.Once

	mu  sync.Mutex
	err error // why the accept loop stopped, for Accept
}

// Listen starts taking connections from inner.
func (s *Server) Listen(inner net.Listener) *Listener {
	l := &Listener{s: s, inner: inner, toHTTP: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

// Accept returns the next connection for the http.Server (net.Listener).
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.toHTTP:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, cmp.Or(l.err, net.ErrClosed)
	}
}

// Close stops accepting connections (net.Listener). Requests being served
// here go on; Server.Wait waits for them.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		err = l.inner.Close()
		l.stop(nil)
	})
	return err
}

// Addr is the address listened on (net.Listener).
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// stop ends Accept with err (nil after Close).
func (l *Listener) stop(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.done:
	default:
		l.err = err
		close(l.done)
	}
}

// acceptLoop takes connections from inner until it fails for good, backing
// off on temporary failures (out of descriptors, say) as the http.Server
// does.
func (l *Listener) acceptLoop() {
	var delay time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			if isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-l.done:
					return
				}
			}
			l.stop(err)
			return
		}
		delay = 0
		l.s.inFlight.Add(1)
		go l.serveConn(c, l.s.opts.Now())
	}
}

// isTemporary reports an accept error worth retrying (net/http's test).
func isTemporary(err error) bool {
	te, ok := err.(interface{ Temporary() bool })
	return ok && te.Temporary()
}

// serveConn reads c's first request head and has it served when it is an
// upgrade, or hands c to the http.Server. It runs on a goroutine of its own:
// waiting for a head (up to HeaderTimeout) is shallow, and must not hold one
// of Options.Go's, which serve the request once it is there. The
// connection's deadlines run from accepted, whichever side serves it.
func (l *Listener) serveConn(c net.Conn, accepted time.Time) {
	s := l.s
	head, err := readHead(c, accepted, s.opts)
	switch {
	case err != nil: // the client went away or stayed silent past the timeout
		head.release()
		c.Close()
		s.inFlight.Done()
	case head.req == nil: // not for here: net/http reads it again
		l.handOver(newReplayConn(c, head, accepted, s.opts.ReadTimeout))
		s.inFlight.Done()
	default:
		s.opts.Go(func() {
			defer s.inFlight.Done()
			s.serve(c, head)
		})
	}
}

// serve has the handler serve the upgrade request of head, read from c.
func (s *Server) serve(c net.Conn, head head) {
	w := newResponseWriter(c, head)
	if s.panics.Do(s.opts.Log, "WebSocket upgrade request", func() { s.handler.ServeHTTP(w, head.req) }) {
		// The handler's own recovery answers its panics; this is one in the
		// middleware around it or in this package.
		w.abandon()
		return
	}
	w.finish(s.opts.WriteTimeout)
}

// handOver gives c to the http.Server, or closes it once the listener is
// closed.
func (l *Listener) handOver(c net.Conn) {
	select {
	case l.toHTTP <- c:
	case <-l.done:
		c.Close()
	}
}
