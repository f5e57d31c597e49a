// Package metrics exposes a Herald node's Prometheus metrics. Live sizes
// (connections, channels, outbox depth, …) are read from the node's parts at
// scrape time by a collector; counters kept by the parts themselves (the
// WebSocket transport, the webhook dispatcher) are read the same way, so the hot paths only ever
// pay one atomic add. What only this package counts (HTTP requests, SQLite
// transactions) is recorded through its methods.
//
// Labels are bounded: app ids (as many as the operator creates), close codes,
// routes (the route patterns, never raw paths), methods, statuses, gateways
// and outcomes. Channel names and user ids never become labels.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/heraldrt/herald/server/cluster"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/httpapi"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/server/webhook"
	"github.com/heraldrt/herald/server/ws"
)

// Namespace prefixes every Herald metric.
const Namespace = "herald"

// HubSource is the Channels registry as the metrics read it.
type HubSource interface {
	AppStats() []hub.AppStats
	// ObserverPanics counts the panics of the hub's observers (webhooks,
	// console) it recovered.
	ObserverPanics() int64
	// RecoveryStats counts the recoveries of subscriptions by outcome.
	RecoveryStats() hub.RecoveryStats
}

// AnonLimitSource is the per-address limit of the anonymous Push APIs.
type AnonLimitSource interface {
	Stats() httpapi.AnonLimiterStats
}

// PublishLimitSource is the Publish API's per-instance rate limit.
type PublishLimitSource interface {
	LimitStats() httpapi.PublishLimitStats
}

// SocketSource is the WebSocket endpoint as the metrics read it.
type SocketSource interface {
	Counters() ws.Counters
	SlowConsumersClosed() int64
}

// UpgradeSource is the fast path of WebSocket upgrade requests
// (server/upgrade) as the metrics read it.
type UpgradeSource interface {
	Panics() int64
}

// WebhookSource is the webhook dispatcher as the metrics read it.
type WebhookSource interface {
	Stats() webhook.Stats
}

// OutboxSource counts the webhook requests waiting in the durable outbox
// (storage.DB does).
type OutboxSource interface {
	CountWebhookOutbox(ctx context.Context) (int, error)
}

// PushSource is the hook for the push dispatcher: when set, its queue depth
// and counters are exported as herald_push_*. A node without push delivery
// leaves it nil and those metrics are absent.
type PushSource interface {
	PushCounters() push.Counters
}

// ClusterSource is the node's membership of a cluster: when set, its
// figures are exported as herald_cluster_*.
type ClusterSource interface {
	Stats() cluster.Stats
}

// HistorySource is the store of the apps' channel histories.
type HistorySource interface {
	Stats() eventlog.Stats
}

// Sources are the parts of a node read at scrape time. Nil ones are skipped.
type Sources struct {
	Cluster  ClusterSource
	Hub      HubSource
	Sockets  SocketSource
	Upgrades UpgradeSource
	Webhooks WebhookSource
	Outbox   OutboxSource
	Push     PushSource
	Anon     AnonLimitSource
	Publish  PublishLimitSource
	History  HistorySource
}

// Metrics is one node's metrics registry.
type Metrics struct {
	reg          *prometheus.Registry
	httpDuration *prometheus.HistogramVec
	dbDuration   *prometheus.HistogramVec
}

// New returns the registry of a node reading src, with the Go runtime and
// process collectors.
func New(src Sources) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by route pattern, method and status. WebSocket and event-stream routes are left out.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "method", "status"}),
		dbDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "sqlite_transaction_duration_seconds",
			Help:    "Time of SQLite transactions run by the storage layer, waiting for the connection included, by kind (read, write).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"kind"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.httpDuration, m.dbDuration,
		newCollector(src),
	)
	return m
}

// Registry is the registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// ObserveTransaction records one SQLite transaction; it has the signature
// storage.DB.ObserveTransactions takes.
func (m *Metrics) ObserveTransaction(kind string, d time.Duration) {
	m.dbDuration.WithLabelValues(kind).Observe(d.Seconds())
}

// Middleware times every request answered by the gin engine, except those on
// the routes in skip (long-lived WebSocket and event streams). Requests that
// match no route are labelled "unmatched"; unusual methods "OTHER".
func (m *Metrics) Middleware(skip ...string) gin.HandlerFunc {
	skipped := make(map[string]bool, len(skip))
	for _, r := range skip {
		skipped[r] = true
	}
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if skipped[route] {
			return
		}
		if route == "" {
			route = "unmatched"
		}
		m.httpDuration.WithLabelValues(route, method(c.Request.Method), strconv.Itoa(c.Writer.Status())).Observe(time.Since(start).Seconds())
	}
}

// method keeps the method label bounded.
func method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}
