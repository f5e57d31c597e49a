package httpapi

import (
	"bytes"
	"net/http"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/idempotency"
)

// The headers of idempotent publishing (README, Idempotent publishing).
const (
	// IdempotencyKeyHeader carries the client's key on a publishing request.
	IdempotencyKeyHeader = "Idempotency-Key"
	// IdempotentReplayedHeader is set to "true" on an answer replayed for a
	// repeated key.
	IdempotentReplayedHeader = "Idempotent-Replayed"
)

// idempotentRequest is how the idempotency middleware of one API sees a
// request: whether it is one of the API's publishing operations, the scope
// its keys live in (app or instance) and its body.
type idempotentRequest struct {
	applies func(c *gin.Context) bool
	scope   func(c *gin.Context) string
	body    func(c *gin.Context) []byte
	// unavailable is the answer when the key store fails: nothing is
	// done then, since doing it unguarded could deliver twice.
	unavailable *Error
}

// idempotent returns the middleware that honours Idempotency-Key on the
// requests r says it applies to, once they are authenticated (a key is only
// looked at for a caller entitled to publish in its scope). Without the
// header it costs one header lookup.
func idempotent(g *idempotency.Guard, log *zap.Logger, r idempotentRequest) gin.HandlerFunc {
	return func(c *gin.Context) {
		key, ok := c.Request.Header[IdempotencyKeyHeader]
		if !ok || !r.applies(c) {
			c.Next()
			return
		}
		if len(key) != 1 || !idempotency.ValidKey(key[0]) {
			writeError(c, badRequest(KindInvalidIdempotencyKey, "Idempotency-Key must be given once, as 1 to %d printable ASCII characters.", idempotency.MaxKeyLength))
			return
		}
		req := c.Request
		fp := idempotency.SumRequest(req.Method, req.URL.EscapedPath(), req.URL.RawQuery, r.body(c))
		scope := r.scope(c)
		outcome, claim, res, err := g.Begin(req.Context(), scope, key[0], fp)
		if err != nil {
			log.Warn("the idempotency key store failed; the request was refused", zap.String("scope", scope), zap.Error(err))
			writeError(c, r.unavailable)
			return
		}
		switch outcome {
		case idempotency.Replay:
			h := c.Writer.Header()
			h["Content-Type"] = jsonContentType
			h.Set(IdempotentReplayedHeader, "true")
			c.Writer.WriteHeader(res.Status)
			_, _ = c.Writer.Write(res.Body)
			c.Abort()
			return
		case idempotency.InFlight:
			writeError(c, newError(http.StatusConflict, KindIdempotencyKeyInUse, "A request with this Idempotency-Key is still being processed; retry once it is answered."))
			return
		case idempotency.Mismatch:
			writeError(c, unprocessable(KindIdempotencyKeyReused, "This Idempotency-Key was used for a request with another body; use a new key for a new request."))
			return
		}
		w := &recordingWriter{ResponseWriter: c.Writer}
		c.Writer = w
		answered := false
		defer func() {
			c.Writer = w.ResponseWriter
			res := idempotency.Response{Status: w.Status(), Body: w.body.Bytes()}
			if !answered {
				res.Status = http.StatusInternalServerError // a panic: release the key (recovery answers)
			}
			if err := g.Finish(req.Context(), claim, res); err != nil {
				log.Warn("the idempotency key store failed to record an answer; a retry of the request may be refused with 409 until the claim lapses",
					zap.String("scope", scope), zap.Error(err))
			}
		}()
		c.Next()
		answered = true
	}
}

// recordingWriter passes an answer on and keeps a copy of its body.
type recordingWriter struct {
	gin.ResponseWriter
	body bytes.Buffer
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *recordingWriter) WriteString(s string) (int, error) {
	w.body.WriteString(s)
	return w.ResponseWriter.WriteString(s)
}
