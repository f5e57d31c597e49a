package httpapi

import (
	"net/http"
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

// NewEngine returns a gin engine with panic recovery, an access log and the
// error body on NoRoute and NoMethod, plus GET /healthz.
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
	})
	r := gin.New()
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
	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	return r
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
