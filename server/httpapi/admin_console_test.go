package httpapi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/gen/adminclient"
	"github.com/heraldrt/herald/server/console/traffic"
)

// The console reads a channel's history through the admin API: the events
// triggered, newest first, in pages; an app without history is refused.
func TestAdminChannelEvents(t *testing.T) {
	s := newAdminServer(t)
	ctx := context.Background()
	if res, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr("42"), HistoryEvents: ptr(10)}); err != nil || res.JSON201 == nil {
		t.Fatalf("create: %v %s", err, res.Body)
	}
	if res, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr("43")}); err != nil || res.JSON201 == nil {
		t.Fatalf("create: %v %s", err, res.Body)
	}
	for _, data := range []string{"one", "two", "three"} {
		if res, err := s.client.TriggerAppEventWithResponse(ctx, "42", adminclient.AdminTrigger{Name: "ev", Channels: []string{"news"}, Data: data}); err != nil || res.StatusCode() != 200 {
			t.Fatalf("trigger: %v %s", err, res.Body)
		}
	}
	two := 2
	res, err := s.client.GetAppChannelEventsWithResponse(ctx, "42", "news", &adminclient.GetAppChannelEventsParams{Limit: &two})
	if err != nil || res.JSON200 == nil || len(res.JSON200.Events) != 2 || res.JSON200.Events[0].Data != "three" || res.JSON200.Events[1].Data != "two" || res.JSON200.NextCursor == nil {
		t.Fatalf("first page: %v %s, want three, two and a cursor", err, res.Body)
	}
	res, err = s.client.GetAppChannelEventsWithResponse(ctx, "42", "news", &adminclient.GetAppChannelEventsParams{Cursor: res.JSON200.NextCursor})
	if err != nil || res.JSON200 == nil || len(res.JSON200.Events) != 1 || res.JSON200.Events[0].Data != "one" || res.JSON200.NextCursor != nil {
		t.Fatalf("second page: %v %s, want one and no cursor", err, res.Body)
	}
	if res, err := s.client.GetAppChannelEventsWithResponse(ctx, "43", "news", nil); err != nil || res.JSON400 == nil || res.JSON400.Error != KindHistoryDisabled {
		t.Fatalf("an app without history: %v %d %s, want 400 %s", err, res.StatusCode(), res.Body, KindHistoryDisabled)
	}
	if res, err := s.client.GetAppChannelEventsWithResponse(ctx, "44", "news", nil); err != nil || res.StatusCode() != 404 {
		t.Fatalf("an unknown app: %v %d %s, want 404", err, res.StatusCode(), res.Body)
	}
}

// The event creator's endpoint publishes through the Channels API's trigger
// path: subscribers get the event, the trigger hook (the console) is told, and the Channels API's limits answer with its errors.
func TestAdminTriggerEvent(t *testing.T) {
	s := newAdminServer(t)
	ctx := context.Background()
	if res, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr("42")}); err != nil || res.JSON201 == nil {
		t.Fatalf("create: %v %s", err, res.Body)
	}
	c := subscriber(t, s.hub, "42", "", "news")
	defer s.hub.Remove(c)

	t.Run("OK", func(t *testing.T) {
		res, err := s.client.TriggerAppEventWithResponse(ctx, "42", adminclient.AdminTrigger{
			Name: "greeting", Channels: []string{"news", "other"}, Data: `{"hello":"world"}`,
		})
		if err != nil || res.StatusCode() != 200 || strings.TrimSpace(string(res.Body)) != "{}" {
			t.Fatalf("trigger: %v %d %s", err, res.StatusCode(), res.Body)
		}
		if got := received(t, s.hub, c); len(got) != 1 || got[0] != `news:greeting:{"hello":"world"}` {
			t.Fatalf("subscriber got %q", got)
		}
		s.triggeredMu.Lock()
		told := strings.Join(s.triggered, "; ")
		s.triggeredMu.Unlock()
		if told != `42 news greeting {"hello":"world"}; 42 other greeting {"hello":"world"}` {
			t.Fatalf("the trigger hook was told %q", told)
		}
	})

	many := make([]string, MaxTriggerChannels+1)
	for i := range many {
		many[i] = fmt.Sprint("ch-", i)
	}
	errs := []struct {
		name   string
		app    string
		body   adminclient.AdminTrigger
		raw    string // sent instead of body when set
		status int
		kind   string
	}{
		{"ErrUnknownApp", "404", adminclient.AdminTrigger{Name: "e", Channels: []string{"news"}, Data: "{}"}, "", 404, "app_not_found"},
		{"ErrNotJSON", "42", adminclient.AdminTrigger{}, `{"name":`, 400, "invalid_request"},
		{"ErrWrongType", "42", adminclient.AdminTrigger{}, `{"name":"e","channels":"news","data":"{}"}`, 400, "invalid_request"},
		{"ErrNoBody", "42", adminclient.AdminTrigger{}, " ", 400, "invalid_request"},
		{"ErrMissingName", "42", adminclient.AdminTrigger{Channels: []string{"news"}, Data: "{}"}, "", 400, "missing_name"},
		{"ErrReservedName", "42", adminclient.AdminTrigger{Name: "pusher:x", Channels: []string{"news"}, Data: "{}"}, "", 400, "invalid_event_name"},
		{"ErrNoChannels", "42", adminclient.AdminTrigger{Name: "e", Channels: []string{}, Data: "{}"}, "", 400, "missing_channels"},
		{"ErrTooManyChannels", "42", adminclient.AdminTrigger{Name: "e", Channels: many, Data: "{}"}, "", 400, "too_many_channels"},
		{"ErrChannelName", "42", adminclient.AdminTrigger{Name: "e", Channels: []string{"my channel"}, Data: "{}"}, "", 400, "invalid_channel_name"},
		{"ErrDataTooLarge", "42", adminclient.AdminTrigger{Name: "e", Channels: []string{"news"}, Data: strings.Repeat("x", MaxEventDataBytes+1)}, "", 413, "data_too_large"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			var status int
			var body []byte
			var err error
			if tt.raw != "" {
				r, e := s.client.TriggerAppEventWithBodyWithResponse(ctx, tt.app, "application/json", strings.NewReader(strings.TrimSpace(tt.raw)))
				status, body, err = r.StatusCode(), r.Body, e
			} else {
				r, e := s.client.TriggerAppEventWithResponse(ctx, tt.app, tt.body)
				status, body, err = r.StatusCode(), r.Body, e
			}
			if err != nil {
				t.Fatal(err)
			}
			if status != tt.status || errKind(body) != tt.kind {
				t.Fatalf("got %d %s, want %d %s", status, body, tt.status, tt.kind)
			}
		})
	}
	t.Run("ErrDisabled", func(t *testing.T) {
		if res, err := s.client.DisableAppWithResponse(ctx, "42"); err != nil || res.JSON200 == nil {
			t.Fatalf("disable: %v", err)
		}
		defer s.client.EnableAppWithResponse(ctx, "42")
		res, err := s.client.TriggerAppEventWithResponse(ctx, "42", adminclient.AdminTrigger{Name: "e", Channels: []string{"news"}, Data: "{}"})
		if err != nil || res.StatusCode() != 403 || errKind(res.Body) != "app_disabled" {
			t.Fatalf("disabled app: %v %d %s", err, res.StatusCode(), res.Body)
		}
	})
	t.Run("ErrNoToken", func(t *testing.T) {
		res, err := s.anon.TriggerAppEventWithResponse(ctx, "42", adminclient.AdminTrigger{Name: "e", Channels: []string{"news"}, Data: "{}"})
		if err != nil || res.StatusCode() != 401 || errKind(res.Body) != "unauthorized" {
			t.Fatalf("no token: %v %d %s", err, res.StatusCode(), res.Body)
		}
	})
	s.triggeredMu.Lock()
	defer s.triggeredMu.Unlock()
	if len(s.triggered) != 2 {
		t.Fatalf("refused triggers reached the hook: %q", s.triggered)
	}
}

// The history endpoints give the recorder's points as named series, 404 for
// an unknown app or instance. The recorder reads the hub as a node's does
// (traffic.HubApps): the triggers show through the hub's running total.
func TestAdminHistory(t *testing.T) {
	s := newAdminServer(t)
	ctx := context.Background()
	if res, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr("42")}); err != nil || res.JSON201 == nil {
		t.Fatalf("create: %v %s", err, res.Body)
	}
	const instance = "6f2b8a8e-3c1d-4a55-9a0e-1c2d3e4f5a6b"
	if res, err := s.client.CreateInstanceWithResponse(ctx, adminclient.InstanceCreate{ID: ptr(instance)}); err != nil || res.JSON201 == nil {
		t.Fatalf("create instance: %v %s", err, res.Body)
	}
	t0 := time.Now()
	s.traffic.Sample(t0)
	for range 10 {
		res, err := s.client.TriggerAppEventWithResponse(ctx, "42", adminclient.AdminTrigger{Name: "e", Channels: []string{"news"}, Data: "{}"})
		if err != nil || res.StatusCode() != 200 {
			t.Fatalf("trigger: %v %s", err, res.Body)
		}
	}
	s.traffic.Count(traffic.Instance, instance, traffic.InstanceFailed, 5)
	s.traffic.Sample(t0.Add(5 * time.Second))

	t.Run("OKApp", func(t *testing.T) {
		res, err := s.client.GetAppHistoryWithResponse(ctx, "42")
		if err != nil || res.JSON200 == nil {
			t.Fatalf("history: %v %s", err, res.Body)
		}
		h := res.JSON200
		if h.Scope != "node" || h.Node != "node-a" || h.IntervalSeconds != 5 || !h.Tracked || len(h.Times) != 2 || len(h.Series) != 5 {
			t.Fatalf("history %+v", h)
		}
		for i, want := range []struct {
			name, unit string
			last       float32
		}{{"connections", "count", 0}, {"triggered", "per_second", 2}, {"delivered", "per_second", 0}, {"webhooksSent", "per_second", 0}, {"webhooksFailed", "per_second", 0}} {
			got := h.Series[i]
			if got.Name != want.name || string(got.Unit) != want.unit || len(got.Values) != 2 || got.Values[1] != want.last {
				t.Errorf("series %d: %+v, want %s in %s ending with %v", i, got, want.name, want.unit, want.last)
			}
		}
	})
	t.Run("OKInstance", func(t *testing.T) {
		res, err := s.client.GetInstanceHistoryWithResponse(ctx, instance)
		if err != nil || res.JSON200 == nil {
			t.Fatalf("history: %v %s", err, res.Body)
		}
		h := res.JSON200
		if len(h.Series) != 4 || h.Series[1].Name != "failed" || h.Series[1].Values[1] != 1 || h.Series[0].Values[1] != 0 {
			t.Fatalf("history %+v", h.Series)
		}
	})
	t.Run("ErrUnknownApp", func(t *testing.T) {
		res, err := s.client.GetAppHistoryWithResponse(ctx, "404")
		if err != nil || res.StatusCode() != 404 || errKind(res.Body) != "app_not_found" {
			t.Fatalf("unknown app: %v %d %s", err, res.StatusCode(), res.Body)
		}
	})
	t.Run("ErrUnknownInstance", func(t *testing.T) {
		res, err := s.client.GetInstanceHistoryWithResponse(ctx, "00000000-0000-4000-8000-000000000000")
		if err != nil || res.StatusCode() != 404 || errKind(res.Body) != "instance_not_found" {
			t.Fatalf("unknown instance: %v %d %s", err, res.StatusCode(), res.Body)
		}
	})
	t.Run("ErrBadInstanceID", func(t *testing.T) {
		res, err := s.client.GetInstanceHistoryWithResponse(ctx, "not-a-uuid")
		if err != nil || res.StatusCode() != 404 {
			t.Fatalf("bad instance id: %v %d %s", err, res.StatusCode(), res.Body)
		}
	})
	t.Run("ErrNoToken", func(t *testing.T) {
		res, err := s.anon.GetAppHistoryWithResponse(ctx, "42")
		if err != nil || res.StatusCode() != 401 {
			t.Fatalf("no token: %v %d", err, res.StatusCode())
		}
	})
}
