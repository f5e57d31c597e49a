package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	dto "github.com/prometheus/client_model/go"

	"github.com/heraldrt/herald/server/cluster"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/httpapi"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/server/webhook"
	"github.com/heraldrt/herald/server/ws"
)

type fakeHub struct{}

func (fakeHub) AppStats() []hub.AppStats {
	return []hub.AppStats{
		{AppID: "1", Connections: 3, Channels: 2, Subscriptions: 5, PresenceMembers: 1, Triggered: 2},
		{AppID: "2", Connections: 0, Channels: 0, Subscriptions: 0, PresenceMembers: 0, Triggered: 1},
	}
}

func (fakeHub) ObserverPanics() int64 { return 1 }

func (fakeHub) RecoveryStats() hub.RecoveryStats {
	return hub.RecoveryStats{Recovered: 26, Refused: 27, Expired: 28, Gap: 29, Error: 30, Off: 31}
}

type fakeSockets struct{}

func (fakeSockets) Counters() ws.Counters {
	return ws.Counters{
		ConnectionsOpened: 7, HTTPSessionsOpened: 2, ClientEvents: 4, FramesDelivered: 40,
		Closed:   []ws.CodeCount{{Code: 0, Count: 3}, {Code: 4100, Count: 1}, {Code: ws.CloseCodeOther, Count: 2}},
		Rejected: []ws.CodeCount{{Code: 4001, Count: 1}},

		ConnectRateLimited: 8, SubscribeRateLimited: 9, AppSubscriptionsCapped: 10, Panics: 2,
	}
}

func (fakeSockets) SlowConsumersClosed() int64 { return 1 }

type fakeWebhooks struct{}

func (fakeWebhooks) Stats() webhook.Stats {
	return webhook.Stats{Delivered: 10, Failed: 2, Abandoned: 1, Dropped: 3, OverCap: 13, Expired: 14, Unwritten: 15, Panics: 16}
}

type fakeOutbox struct{ err error }

func (o fakeOutbox) CountWebhookOutbox(context.Context) (int, error) { return 6, o.err }

type fakePush struct{}

func (fakePush) PushCounters() push.Counters {
	return push.Counters{QueueDepth: 12, Publishes: 2, Deliveries: []push.DeliveryCount{
		{Gateway: "apns", Outcome: "delivered", Count: 5}, {Gateway: "fcm", Outcome: "dead_token", Count: 1},
	}, Panics: 3}
}

type fakePublishLimit struct{}

func (fakePublishLimit) LimitStats() httpapi.PublishLimitStats {
	return httpapi.PublishLimitStats{Refused: 17, DatabaseErrors: 18}
}

type fakeCluster struct{}

func (fakeCluster) Stats() cluster.Stats {
	return cluster.Stats{Up: true, Nodes: 2, Published: 33, PublishCalls: 30, Received: 20, Panics: 19}
}

type fakeHistory struct{}

func (fakeHistory) Stats() eventlog.Stats {
	return eventlog.Stats{Apps: []eventlog.AppStats{{AppID: "1", Events: 21, Bytes: 2100}}, Dropped: [4]int64{22, 23, 24, 25}}
}

type fakeAnon struct{}

func (fakeAnon) Stats() httpapi.AnonLimiterStats {
	return httpapi.AnonLimiterStats{Refused: 11, Tracked: 4}
}

// gather returns the families by name.
func gather(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// get is the value of the series with the labels (name, value pairs), or -1.
func get(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		if len(m.Label) != len(labels)/2 {
			continue
		}
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func TestCollector(t *testing.T) {
	m := New(Sources{Hub: fakeHub{}, Sockets: fakeSockets{}, Webhooks: fakeWebhooks{}, Outbox: fakeOutbox{}, Push: fakePush{}, Anon: fakeAnon{}, Publish: fakePublishLimit{}, Cluster: fakeCluster{}, History: fakeHistory{}})
	fams := gather(t, m)
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"herald_connections", []string{"app_id", "1"}, 3},
		{"herald_connections", []string{"app_id", "2"}, 0},
		{"herald_channels", []string{"app_id", "1"}, 2},
		{"herald_subscriptions", []string{"app_id", "1"}, 5},
		{"herald_presence_members", []string{"app_id", "1"}, 1},
		{"herald_events_triggered_total", []string{"app_id", "1"}, 2},
		{"herald_events_triggered_total", []string{"app_id", "2"}, 1},
		{"herald_connections_opened_total", []string{"transport", "ws"}, 5},
		{"herald_connections_opened_total", []string{"transport", "xhr"}, 2},
		{"herald_connections_closed_total", []string{"code", "0"}, 3},
		{"herald_connections_closed_total", []string{"code", "4100"}, 1},
		{"herald_connections_closed_total", []string{"code", "other"}, 2},
		{"herald_connections_rejected_total", []string{"code", "4001"}, 1},
		{"herald_client_events_total", nil, 4},
		{"herald_frames_delivered_total", nil, 40},
		{"herald_slow_consumers_closed_total", nil, 1},
		{"herald_webhook_outbox_depth", nil, 6},
		{"herald_webhook_requests_total", []string{"outcome", "delivered"}, 10},
		{"herald_webhook_requests_total", []string{"outcome", "failed"}, 2},
		{"herald_webhooks_abandoned_total", nil, 1},
		{"herald_webhook_events_dropped_total", nil, 3},
		{"herald_push_dispatch_queue_depth", nil, 12},
		{"herald_push_publishes_total", nil, 2},
		{"herald_push_deliveries_total", []string{"gateway", "apns", "outcome", "delivered"}, 5},
		{"herald_push_deliveries_total", []string{"gateway", "fcm", "outcome", "dead_token"}, 1},
		{"herald_panics_total", []string{"part", "hub_observer"}, 1},
		{"herald_panics_total", []string{"part", "ws"}, 2},
		{"herald_panics_total", []string{"part", "push"}, 3},
		{"herald_panics_total", []string{"part", "webhook"}, 16},
		{"herald_panics_total", []string{"part", "cluster"}, 19},
		{"herald_cluster_up", nil, 1},
		{"herald_cluster_nodes", nil, 2},
		{"herald_cluster_messages_received_total", nil, 20},
		{"herald_cluster_messages_published_total", nil, 33},
		{"herald_cluster_publish_calls_total", nil, 30},
		{"herald_webhook_requests_dropped_total", []string{"reason", "over_cap"}, 13},
		{"herald_webhook_requests_dropped_total", []string{"reason", "expired"}, 14},
		{"herald_webhook_requests_dropped_total", []string{"reason", "unwritten"}, 15},
		{"herald_rate_limited_total", []string{"limit", "ws_connect"}, 8},
		{"herald_rate_limited_total", []string{"limit", "ws_subscribe"}, 9},
		{"herald_rate_limited_total", []string{"limit", "app_subscriptions"}, 10},
		{"herald_rate_limited_total", []string{"limit", "anon_push_api"}, 11},
		{"herald_rate_limited_total", []string{"limit", "publish_api"}, 17},
		{"herald_publish_rate_limit_errors_total", nil, 18},
		{"herald_history_events", []string{"app_id", "1"}, 21},
		{"herald_history_bytes", []string{"app_id", "1"}, 2100},
		{"herald_history_events_dropped_total", []string{"reason", "events"}, 22},
		{"herald_history_events_dropped_total", []string{"reason", "age"}, 23},
		{"herald_history_events_dropped_total", []string{"reason", "bytes"}, 24},
		{"herald_history_events_dropped_total", []string{"reason", "channels"}, 25},
		{"herald_recoveries_total", []string{"outcome", "recovered"}, 26},
		{"herald_recoveries_total", []string{"outcome", "refused"}, 27},
		{"herald_recoveries_total", []string{"outcome", "expired"}, 28},
		{"herald_recoveries_total", []string{"outcome", "gap"}, 29},
		{"herald_recoveries_total", []string{"outcome", "unavailable"}, 30},
		{"herald_recoveries_total", []string{"outcome", "off"}, 31},
	} {
		if got := get(fams, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if fams["go_goroutines"] == nil || fams["process_open_fds"] == nil && fams["process_cpu_seconds_total"] == nil {
		t.Error("the Go runtime and process collectors are missing")
	}
	if fams["herald_connections"].GetType() != dto.MetricType_GAUGE || fams["herald_push_deliveries_total"].GetType() != dto.MetricType_COUNTER {
		t.Error("wrong metric types")
	}
}

func TestCollectorSkipsNilSources(t *testing.T) {
	fams := gather(t, New(Sources{}))
	for name := range fams {
		if strings.HasPrefix(name, "herald_") {
			t.Errorf("%s exported without a source", name)
		}
	}
}

func TestCollectorOutboxError(t *testing.T) {
	m := New(Sources{Outbox: fakeOutbox{err: errors.New("database is locked")}})
	if _, err := m.Registry().Gather(); err == nil || !strings.Contains(err.Error(), "database is locked") {
		t.Fatalf("gather error %v, want the outbox error", err)
	}
}

func TestRecorded(t *testing.T) {
	m := New(Sources{})
	m.ObserveTransaction("write", 3*time.Millisecond)
	m.ObserveTransaction("read", time.Millisecond)
	m.ObserveTransaction("read", time.Millisecond)

	gin.SetMode(gin.TestMode)
	engine := gin.New()
	engine.Use(m.Middleware("/stream"))
	engine.GET("/items/:id", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	engine.GET("/stream", func(c *gin.Context) { c.Status(http.StatusOK) })
	for _, r := range []struct{ method, path string }{
		{"GET", "/items/1"}, {"GET", "/items/2"}, {"GET", "/stream"}, {"GET", "/nowhere"}, {"BREW", "/items/3"},
	} {
		engine.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(r.method, r.path, nil))
	}

	fams := gather(t, m)
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"herald_sqlite_transaction_duration_seconds", []string{"kind", "read"}, 2},
		{"herald_sqlite_transaction_duration_seconds", []string{"kind", "write"}, 1},
		// Route patterns, not paths: both items requests in one series.
		{"herald_http_request_duration_seconds", []string{"route", "/items/:id", "method", "GET", "status", "204"}, 2},
		{"herald_http_request_duration_seconds", []string{"route", "unmatched", "method", "GET", "status", "404"}, 1},
		{"herald_http_request_duration_seconds", []string{"route", "unmatched", "method", "OTHER", "status", "404"}, 1},
		{"herald_http_request_duration_seconds", []string{"route", "/stream", "method", "GET", "status", "200"}, -1},
	} {
		if got := get(fams, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `herald_sqlite_transaction_duration_seconds_count{kind="write"} 1`) {
		t.Errorf("handler: %d %.300s", rec.Code, rec.Body.String())
	}
}
