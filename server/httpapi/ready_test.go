package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestReady(t *testing.T) {
	ok := ReadyCheck{Name: "database", Check: func(context.Context) error { return nil }}
	down := ReadyCheck{Name: "broker", Check: func(context.Context) error { return errors.New("connection refused") }}
	// hangs answers only when the probe's deadline passes, as a dependency
	// stuck behind a lock would. The test's request carries a short deadline
	// of its own, which the checks' ReadyTimeout deadline is derived from.
	hangs := ReadyCheck{Name: "database", Check: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}}
	tests := []struct {
		name       string
		checks     []ReadyCheck
		wantStatus int
		wantBody   map[string]any
		noDeadline bool // the request carries no deadline of its own
	}{
		{
			name: "OKEveryCheckPasses", checks: []ReadyCheck{ok}, wantStatus: http.StatusOK,
			wantBody: map[string]any{"status": "ok", "checks": map[string]any{"database": "ok"}},
		},
		{
			name: "ErrOneCheckFails", checks: []ReadyCheck{ok, down}, wantStatus: http.StatusServiceUnavailable,
			wantBody: map[string]any{
				"error": "not_ready", "description": "Not ready: broker: connection refused.",
				"checks": map[string]any{"database": "ok", "broker": "connection refused"},
			},
		},
		{
			// Each check gets ReadyTimeout, 2 s, from the probe's start:
			// this one says whether its deadline is about that far.
			name: "OKChecksGetTwoSeconds", checks: []ReadyCheck{{Name: "database", Check: func(ctx context.Context) error {
				if d, ok := ctx.Deadline(); !ok || time.Until(d) < time.Second || time.Until(d) > 2*time.Second {
					return errors.New("not 2 s")
				}
				return nil
			}}}, wantStatus: http.StatusOK, noDeadline: true,
			wantBody: map[string]any{"status": "ok", "checks": map[string]any{"database": "ok"}},
		},
		{
			name: "ErrCheckTimesOut", checks: []ReadyCheck{hangs}, wantStatus: http.StatusServiceUnavailable,
			wantBody: map[string]any{
				"error": "not_ready", "description": "Not ready: database: context deadline exceeded.",
				"checks": map[string]any{"database": "context deadline exceeded"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewEngine(zap.NewNop())
			r.GET("/readyz", Ready(tt.checks...))
			w := httptest.NewRecorder()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			if tt.noDeadline {
				ctx, cancel = context.WithCancel(context.Background())
			}
			defer cancel()
			r.ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodGet, "/readyz", nil))
			var body map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			if w.Code != tt.wantStatus || !reflect.DeepEqual(body, tt.wantBody) {
				t.Fatalf("got %d %v, want %d %v", w.Code, body, tt.wantStatus, tt.wantBody)
			}
		})
	}
}
