// Package httpapi is Herald's HTTP layer: the gin engine, the one error body,
// and one handler type per API implementing its generated strict interface.
// Handlers translate between generated types and the domain; they hold no SQL.
package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/gen/common"
	"github.com/heraldrt/herald/storage"
)

// Error is an API error: an HTTP status and the body {"error","description"}.
// Handlers return it as their error; the error hooks write it.
type Error struct {
	Status      int
	Kind        string // short snake_case kind, the body's "error"
	Description string // one sentence, the body's "description"
	// RetryAfter, when set, is sent as the Retry-After header, in seconds.
	RetryAfter int
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Kind, e.Description) }

func newError(status int, kind, format string, args ...any) *Error {
	return &Error{Status: status, Kind: kind, Description: fmt.Sprintf(format, args...)}
}

func badRequest(kind, format string, args ...any) *Error {
	return newError(http.StatusBadRequest, kind, format, args...)
}

// writeError is the one function that writes an error body, used by every
// failure path: handlers, generated error hooks, NoRoute, NoMethod, recovery.
func writeError(c *gin.Context, e *Error) {
	if e.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	c.AbortWithStatusJSON(e.Status, common.Error{Error: e.Kind, Description: e.Description})
}

// errorHooks turns any error reaching a generated hook into the error body:
// an *Error as it is, anything else as a logged 500 without internals.
func errorHooks(log *zap.Logger) func(c *gin.Context, err error) {
	return func(c *gin.Context, err error) {
		var apiErr *Error
		if errors.As(err, &apiErr) {
			writeError(c, apiErr)
			return
		}
		if errors.Is(err, storage.ErrUnavailable) {
			// Not the request's fault, nor a bug: the database cannot
			// write now (a failover). The client retries.
			warnUnavailable(log, unavailableWarnings, c, err)
			writeError(c, databaseUnavailable)
			return
		}
		if errors.Is(err, storage.ErrInvalidText) {
			// What the API's own checks let through (refuseNUL): still the
			// client's mistake, and the same answer on both databases.
			writeError(c, nulRefused)
			return
		}
		var je *storage.JSONError
		if errors.As(err, &je) && !je.Syntax {
			// What storage refused of the JSON the API's checks let
			// through (refuseUnstorable): the client's, on both databases.
			writeError(c, unstorableJSON(je))
			return
		}
		log.Error("request failed", zap.String("method", c.Request.Method), zap.String("path", c.Request.URL.Path), zap.Error(err))
		writeError(c, internalError)
	}
}

// warnLimit lets a warning through at most once every `every`, by its
// clock: a database failing over would otherwise write a warning per
// request. What it holds back is logged at debug.
type warnLimit struct {
	every time.Duration
	now   func() time.Time // time.Now; tests set their own
	last  atomic.Int64     // when the last warning went through, unix ms
}

// allow reports whether a warning goes through now, and if so starts the
// quiet time from now.
func (l *warnLimit) allow() bool { return l.allowAt(l.now()) }

// allowAt is allow at now, for a caller that has read its own clock.
func (l *warnLimit) allowAt(t time.Time) bool {
	now := t.UnixMilli()
	last := l.last.Load()
	return now-last >= l.every.Milliseconds() && l.last.CompareAndSwap(last, now)
}

// unavailableWarnings spaces the warnings of answers 503
// database_unavailable, over every API of the process.
var unavailableWarnings = &warnLimit{every: limitWarnEvery, now: time.Now}

// warnUnavailable logs a request answered 503 database_unavailable: at warn
// when limit lets it through, else at debug.
func warnUnavailable(log *zap.Logger, limit *warnLimit, c *gin.Context, err error) {
	fields := []zap.Field{zap.String("method", c.Request.Method), zap.String("path", c.Request.URL.Path), zap.Error(err)}
	if limit.allow() {
		log.Warn("the database is unavailable: requests that need it are answered 503", append(fields, zap.Duration("quiet_for", limit.every))...)
		return
	}
	log.Debug("the database is unavailable; request answered 503", fields...)
}

// databaseUnavailable is the answer to every request that needed the
// database while it could not be reached or could not write
// (storage.ErrUnavailable): during a PostgreSQL failover, until a primary
// answers. Whatever the request was, nothing of it is half-written; a
// request whose commit was lost on the way may have been carried out, so a
// publish is best retried with its Idempotency-Key.
var databaseUnavailable = &Error{Status: http.StatusServiceUnavailable, Kind: KindDatabaseUnavailable, RetryAfter: 1,
	Description: "The database cannot be reached or cannot write now (it may be failing over); retry after the time in Retry-After."}

var internalError = &Error{Status: http.StatusInternalServerError, Kind: KindInternalError, Description: "The server failed to handle the request; it has been logged."}

// requestErrorHook answers bodies that cannot be decoded, naming the field
// and the type it needs without Go's internals.
func requestErrorHook(c *gin.Context, err error) {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		writeError(c, badRequest(KindInvalidRequest, "Field %q must be %s, not %s.", typeErr.Field, jsonKind(typeErr.Type.Kind()), typeErr.Value))
	case errors.As(err, &typeErr):
		writeError(c, badRequest(KindInvalidRequest, "The body must be a JSON object, not %s.", typeErr.Value))
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		writeError(c, badRequest(KindInvalidRequest, "The body is not valid JSON."))
	case errors.Is(err, errTrailingData):
		writeError(c, badRequest(KindInvalidRequest, "The body must be one JSON value; something follows it."))
	case errors.Is(err, io.EOF):
		writeError(c, badRequest(KindInvalidRequest, "The request needs a JSON body."))
	default:
		writeError(c, badRequest(KindInvalidRequest, "The request body could not be decoded."))
	}
}

// jsonKind names a Go kind the way a JSON author thinks of it.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	default:
		return "a number"
	}
}

// paramErrorHook answers path or query parameters of the wrong format.
func paramErrorHook(c *gin.Context, err error, status int) {
	writeError(c, newError(status, KindInvalidParameter, "%s.", err.Error()))
}
