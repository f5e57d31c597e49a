package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/storage"
)

// An error of the database's availability (storage.ErrUnavailable, however
// deep it is wrapped) reaching any API's handler hook is 503
// database_unavailable with Retry-After, never the 500 of an unexpected
// error; anything else unexpected stays a 500.
func TestDatabaseUnavailableIs503(t *testing.T) {
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel+1))
	hook := errorHooks(log)
	for _, tt := range []struct {
		name       string
		err        error
		status     int
		kind       string
		retryAfter string
	}{
		{"Unavailable", fmt.Errorf("register device: %w", fmt.Errorf("x: %w", storage.ErrUnavailable)), 503, KindDatabaseUnavailable, "1"},
		{"Other", errors.New("a bug"), 500, KindInternalError, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(w)
			c.Request = httptest.NewRequest(http.MethodPost, "/device_api/v1/instances/x/devices/fcm", nil)
			hook(c, tt.err)
			var body struct{ Error, Description string }
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != tt.status || body.Error != tt.kind || body.Description == "" {
				t.Fatalf("%d %s, want %d %s with the error body", w.Code, w.Body, tt.status, tt.kind)
			}
			if got := w.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, tt.retryAfter)
			}
		})
	}
}

// Answers 503 database_unavailable are logged at warn once every
// limitWarnEvery, by the limit's clock, and at debug in between: a database
// failing over does not write a warning per request.
func TestDatabaseUnavailableWarnsOnceEveryPeriod(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	limit := &warnLimit{every: limitWarnEvery, now: func() time.Time { return now }}
	core, logs := observer.New(zap.DebugLevel)
	log := zap.New(core)
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequest(http.MethodPost, "/device_api/v1/instances/x/devices/fcm", nil)
	for i, tt := range []struct {
		after time.Duration // since the first answer
		want  zapcore.Level
	}{
		{0, zap.WarnLevel},
		{0, zap.DebugLevel},
		{limitWarnEvery - time.Millisecond, zap.DebugLevel},
		{limitWarnEvery, zap.WarnLevel},
		{2*limitWarnEvery - time.Millisecond, zap.DebugLevel},
		{2 * limitWarnEvery, zap.WarnLevel},
	} {
		now = time.Unix(1_800_000_000, 0).Add(tt.after)
		warnUnavailable(log, limit, c, storage.ErrUnavailable)
		all := logs.TakeAll()
		if len(all) != 1 || all[0].Level != tt.want {
			t.Fatalf("answer %d, %v after the first: logged %+v, want one entry at %v", i, tt.after, all, tt.want)
		}
	}
}
