package httpapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A handler that panics is answered with a logged 500; http.ErrAbortHandler
// goes on to net/http, which aborts the response.
func TestRecovery(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	engine := NewEngine(zap.New(core))
	engine.GET("/panic", func(*gin.Context) { panic("boom") })
	engine.GET("/abort", func(*gin.Context) { panic(http.ErrAbortHandler) })
	rec := httptest.NewRecorder()
	engine.ServeHTTP(rec, httptest.NewRequest("GET", "/panic", nil))
	if rec.Code != 500 || errKind(rec.Body.Bytes()) != "internal_error" || logs.FilterMessage("panic in handler").Len() != 1 {
		t.Fatalf("status %d, body %s, %d panics logged", rec.Code, rec.Body, logs.FilterMessage("panic in handler").Len())
	}
	defer func() {
		if p := recover(); p != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", p)
		}
	}()
	engine.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/abort", nil))
	t.Fatal("http.ErrAbortHandler was swallowed")
}

// Answered requests are logged at debug below 400, info from 400 and error
// from 500.
func TestAccessLogLevels(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	engine := NewEngine(zap.New(core))
	engine.GET("/status/:code", func(c *gin.Context) {
		var code int
		fmt.Sscan(c.Param("code"), &code)
		c.Status(code)
	})
	want := map[int]zapcore.Level{200: zapcore.DebugLevel, 399: zapcore.DebugLevel, 400: zapcore.InfoLevel, 499: zapcore.InfoLevel,
		500: zapcore.ErrorLevel, 503: zapcore.ErrorLevel}
	for code, level := range want {
		engine.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", fmt.Sprintf("/status/%d", code), nil))
		entries := logs.TakeAll()
		if len(entries) != 1 || entries[0].Message != "request" || entries[0].Level != level || entries[0].ContextMap()["status"] != int64(code) {
			t.Errorf("status %d logged %v, want one request entry at %v", code, entries, level)
		}
	}
}
