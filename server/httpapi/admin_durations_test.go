package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/heraldrt/herald/gen/adminclient"
)

// A duration in milliseconds that a time.Duration cannot hold is refused
// with the admin API's 400, on create and update, in both duration fields:
// converted, it would wrap around (288230376151712744 ms to exactly 1 s)
// and be stored as something else than was asked. What was stored stays.
func TestAdminDurationsBeyondADurationAreRefused(t *testing.T) {
	s := newAdminServer(t)
	ctx := context.Background()
	if res, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr("dur"), UserAuthTimeoutMs: ptr(30000)}); err != nil || res.JSON201 == nil {
		t.Fatalf("create: %v %s", err, res.Body)
	}
	const wraps = 288230376151712744 // × 1,000,000 ns wraps around to 1 s
	for _, tt := range []struct {
		name string
		do   func() (int, []byte, error)
	}{
		{"CreateUserAuthTimeout", func() (int, []byte, error) {
			res, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr("dur2"), UserAuthTimeoutMs: ptr(wraps)})
			return res.StatusCode(), res.Body, err
		}},
		{"CreateHistoryTTL", func() (int, []byte, error) {
			res, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr("dur3"), HistoryEvents: ptr(10), HistoryTTLMs: ptr(wraps)})
			return res.StatusCode(), res.Body, err
		}},
		{"UpdateUserAuthTimeout", func() (int, []byte, error) {
			res, err := s.client.UpdateAppWithResponse(ctx, "dur", adminclient.AppUpdate{UserAuthTimeoutMs: ptr(wraps)})
			return res.StatusCode(), res.Body, err
		}},
		{"UpdateNegative", func() (int, []byte, error) {
			res, err := s.client.UpdateAppWithResponse(ctx, "dur", adminclient.AppUpdate{UserAuthTimeoutMs: ptr(-wraps)})
			return res.StatusCode(), res.Body, err
		}},
		{"UpdateHistoryTTL", func() (int, []byte, error) {
			res, err := s.client.UpdateAppWithResponse(ctx, "dur", adminclient.AppUpdate{HistoryEvents: ptr(10), HistoryTTLMs: ptr(wraps)})
			return res.StatusCode(), res.Body, err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body, err := tt.do()
			if err != nil || status != http.StatusBadRequest || errKind(body) != KindInvalidApp {
				t.Fatalf("answered %d %s (%v), want 400 %s", status, body, err, KindInvalidApp)
			}
		})
	}
	got, err := s.client.GetAppWithResponse(ctx, "dur")
	if err != nil || got.JSON200 == nil || got.JSON200.UserAuthTimeoutMs != 30000 || got.JSON200.HistoryTTLMs != 0 {
		t.Fatalf("after the refusals: %v %s, want userAuthTimeoutMs 30000 and no history", err, got.Body)
	}
	for _, id := range []string{"dur2", "dur3"} {
		if res, err := s.client.GetAppWithResponse(ctx, id); err != nil || res.StatusCode() != http.StatusNotFound {
			t.Errorf("app %s: %v %d, want none created", id, err, res.StatusCode())
		}
	}
}

// The longest duration a time.Duration holds is taken as it is, and its
// negative is refused as a negative limit, not as beyond a duration.
func TestAdminTheLongestDurationIsADuration(t *testing.T) {
	s := newAdminServer(t)
	ctx := context.Background()
	longest := int(maxDurationMs)
	res, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr("longest"), UserAuthTimeoutMs: ptr(longest)})
	if err != nil || res.JSON201 == nil || res.JSON201.UserAuthTimeoutMs != longest {
		t.Fatalf("create with userAuthTimeoutMs %d: %v %s, want it taken", longest, err, res.Body)
	}
	neg, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr("negative"), UserAuthTimeoutMs: ptr(-longest)})
	if err != nil || neg.StatusCode() != http.StatusBadRequest || errKind(neg.Body) != KindInvalidApp || !strings.Contains(string(neg.Body), "may not be negative") {
		t.Fatalf("create with userAuthTimeoutMs %d: %v %d %s, want 400 %s, a negative limit", -longest, err, neg.StatusCode(), neg.Body, KindInvalidApp)
	}
}
