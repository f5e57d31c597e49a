package httpapi

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gin-gonic/gin/binding"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ginSettings sets gin's process-wide settings, once, before the first
// engine is built.
var ginSettings sync.Once

// NewEngine returns a gin engine with an access log, panic recovery and the
// error body on NoRoute and NoMethod, and no routes: Mount puts them on. It
// trusts no proxy's X-Forwarded-For: call SetTrustedProxies with the
// operator's list.
func NewEngine(log *zap.Logger) *gin.Engine {
	ginSettings.Do(func() {
		// Keep gin from printing its debug banner and route table; routes
		// are registered by generated code and logged nowhere else.
		gin.SetMode(gin.ReleaseMode)
		// The generated strict handlers decode bodies with gin's binding,
		// which then walks every struct with go-playground's validator
		// looking for `binding` tags. Herald's types have none (the handlers
		// validate against the spec's limits themselves), so the walk is
		// pure cost on the signed trigger path.
		binding.Validator = nil
		// Bodies must be one JSON value, nothing after it (body.go).
		binding.JSON = strictJSON{}
	})
	r := gin.New()
	// gin believes X-Forwarded-For from any peer by default, so any client
	// could name its own address in the access log and to the per-IP
	// limits (c.ClientIP). Trust none: the client is the connection's peer
	// until the node names its reverse proxies (HERALD_TRUSTED_PROXIES) with
	// SetTrustedProxies. Cannot fail for an empty list.
	_ = r.SetTrustedProxies(nil)
	// Channel names in paths may hold escaped characters (#server-to-user-…);
	// match on the raw path and unescape parameter values.
	r.UseRawPath = true
	r.UnescapePathValues = true
	r.ContextWithFallback = true
	r.HandleMethodNotAllowed = true
	r.Use(accessLog(log), recovery(log))
	r.NoRoute(func(c *gin.Context) {
		writeError(c, newError(http.StatusNotFound, KindNotFound, "No endpoint at %s %s.", c.Request.Method, c.Request.URL.Path))
	})
	r.NoMethod(func(c *gin.Context) {
		writeError(c, newError(http.StatusMethodNotAllowed, KindMethodNotAllowed, "%s is not allowed on %s.", c.Request.Method, c.Request.URL.Path))
	})
	return r
}

// ReadyCheck is one thing GET /readyz checks before it calls the node ready:
// the database, and in cluster mode the broker. Check returns nil when the
// dependency answers.
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// ReadyTimeout bounds each readiness check: a dependency that hangs (a
// database stuck behind a lock, an unreachable broker) makes the node
// unready instead of holding the probe until the prober gives up.
const ReadyTimeout = 2 * time.Second

// readyBody is the answer of GET /readyz: "status" and "checks" (each
// check's name and "ok" or its error) when ready; the error body plus
// "checks" otherwise.
type readyBody struct {
	Status      string            `json:"status,omitempty"`
	Error       string            `json:"error,omitempty"`
	Description string            `json:"description,omitempty"`
	Checks      map[string]string `json:"checks"`
}

// Ready returns the handler of GET /readyz, beside /healthz (the process is
// up): 200 when every check passes within ReadyTimeout, else 503 with the
// error body naming the failed checks. The checks run concurrently, so the
// probe takes as long as the slowest, at most ReadyTimeout.
func Ready(checks ...ReadyCheck) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), ReadyTimeout)
		defer cancel()
		results := make([]error, len(checks))
		var wg sync.WaitGroup
		for i, check := range checks {
			wg.Go(func() { results[i] = check.Check(ctx) })
		}
		wg.Wait()
		body := readyBody{Checks: make(map[string]string, len(checks))}
		var failed []string
		for i, check := range checks {
			if err := results[i]; err != nil {
				body.Checks[check.Name] = err.Error()
				failed = append(failed, check.Name+": "+err.Error())
				continue
			}
			body.Checks[check.Name] = "ok"
		}
		if len(failed) > 0 {
			body.Error, body.Description = KindNotReady, "Not ready: "+strings.Join(failed, "; ")+"."
			c.AbortWithStatusJSON(http.StatusServiceUnavailable, body)
			return
		}
		body.Status = "ok"
		c.JSON(http.StatusOK, body)
	}
}

// LongLived lifts the server's read and write deadlines for the rest of the
// request; put it in front of a route whose connection outlives one exchange
// (the WebSocket upgrade, the console's event stream).
//
// The node's http.Server has ReadTimeout and WriteTimeout, so a client that
// sends its headers or body slowly, or reads its answer slowly, cannot hold a
// connection: the deadlines cover every route, including 404s and whatever
// net/http answers itself, without a route having to opt in. The few
// long-lived routes opt out here instead, before the deadlines can hit. What
// would end them is mostly the write deadline (a stream's writes fail once it
// passes); net/http lifts the read deadline itself once a body has been read,
// and both on a hijack, but its documentation does not promise the latter.
// A handler behind LongLived bounds its own writes where it needs to (the
// console gives each write of its stream a deadline).
//
// A request that announces a body (Content-Length above 0, or chunked) is
// refused first, with 400 and Connection: close, while the deadlines still
// hold: none of these routes takes a body, and net/http reads what is left
// of one before it answers or hijacks, a read that would otherwise have no
// deadline and could hold the connection for as long as the client likes.
func LongLived(c *gin.Context) {
	if c.Request.ContentLength != 0 {
		c.Header("Connection", "close")
		writeError(c, badRequest(KindUnexpectedBody, "%s %s takes no request body.", c.Request.Method, c.Request.URL.Path))
		return
	}
	rc := http.NewResponseController(c.Writer)
	// Errors only mean that this writer has no connection deadlines (a
	// test recorder): there is nothing to lift then.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	c.Next()
}

// recovery turns a panic in a handler into a logged 500 with the error body.
func recovery(log *zap.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.Error("panic in handler", zap.Any("panic", p), zap.String("method", c.Request.Method),
					zap.String("path", c.Request.URL.Path), zap.Stack("stack"))
				if !c.Writer.Written() {
					writeError(c, internalError)
				}
			}
		}()
		c.Next()
	}
}

// accessLog logs each request once it is answered: successes at debug level
// (the signed trigger path is hot), client errors at info, server errors at
// error. The query is left out: it carries signatures.
func accessLog(log *zap.Logger) gin.HandlerFunc {
	log = log.Named("http")
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		status := c.Writer.Status()
		level := zapcore.DebugLevel
		switch {
		case status >= 500:
			level = zapcore.ErrorLevel
		case status >= 400:
			level = zapcore.InfoLevel
		}
		if ce := log.Check(level, "request"); ce != nil {
			ce.Write(
				zap.String("method", c.Request.Method),
				zap.String("path", c.Request.URL.Path),
				zap.Int("status", status),
				zap.Duration("duration", time.Since(start)),
				zap.Int("bytes", c.Writer.Size()),
				zap.String("remote", c.ClientIP()),
			)
		}
	}
}
