package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/cluster"
	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/console"
	"github.com/heraldrt/herald/server/console/traffic"
	"github.com/heraldrt/herald/server/directory"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/httpapi"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/metrics"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/server/upgrade"
	"github.com/heraldrt/herald/server/webhook"
	"github.com/heraldrt/herald/server/ws"
	"github.com/heraldrt/herald/storage"
)

// ops is the operations side of a node: metrics, the admin API and the
// debug console.
type ops struct {
	cfg     config.Config
	log     *zap.Logger
	db      *storage.DB
	hub     *hub.Hub
	metrics *metrics.Metrics
	console *console.Console
	// traffic is the console's charts; nil without an admin token, where
	// nothing could read it, so nothing pays for it.
	traffic *traffic.Recorder
	timer   gin.HandlerFunc // times HTTP requests; set by start
	// reload re-reads the node's directories of apps and instances, after
	// the admin API changed one (httpapi.AdminOptions.OnChange).
	reload func(context.Context) error

	mu  sync.Mutex
	srv *http.Server // the separate metrics listener, when HERALD_METRICS_ADDR is set
}

// routes that stay open for a connection's life; timing them says nothing.
var longLivedRoutes = []string{"/app/:key", httpapi.FallbackRoute, "/console/events"}

func newOps(cfg config.Config, db *storage.DB, h *hub.Hub, apps *directory.Apps, instances *directory.Instances, log *zap.Logger, trafficOpts traffic.Options) *ops {
	o := &ops{cfg: cfg, log: log, db: db, hub: h, console: console.New()}
	o.reload = func(ctx context.Context) error { return errors.Join(apps.Reload(ctx), instances.Reload(ctx)) }
	if cfg.AdminToken == "" {
		return o
	}
	o.traffic = traffic.New(traffic.Sources{
		Apps: traffic.HubApps(h),
		// The directories follow the database within a second: a deleted
		// app's or instance's series go at the next sample after that.
		Exists: func(k traffic.Kind, id string) bool {
			if k == traffic.App {
				return apps.ByID(id) != nil
			}
			return instances.ByID(id) != nil
		},
	}, trafficOpts)
	return o
}

// start creates the metrics over the node's parts; call it once they exist
// and before the database is shared with background goroutines.
func (o *ops) start(sockets *ws.Handler, upgrades *upgrade.Server, hook *webhook.Dispatcher, publishes *push.Dispatcher, publishAPI *httpapi.PublishAPI, anon *httpapi.AnonLimiter, cl cluster.Cluster, history eventlog.Store) {
	src := metrics.Sources{Hub: o.hub, Sockets: sockets, Upgrades: upgrades, Webhooks: hook, Outbox: o.db, Push: publishes, Publish: publishAPI, History: history}
	if cl != nil { // nil: a single node, and no herald_cluster_* series
		src.Cluster = cl
	}
	if anon != nil { // nil: no limit, and no series for it
		src.Anon = anon
	}
	o.metrics = metrics.New(src)
	o.timer = o.metrics.Middleware(longLivedRoutes...)
	o.db.ObserveTransactions(o.metrics.ObserveTransaction)
}

// webhookAttempt goes into webhook.Options.OnAttempt.
func (o *ops) webhookAttempt(a webhook.Attempt) {
	if o.traffic != nil {
		series := traffic.AppWebhooksSent
		if a.Error != "" {
			series = traffic.AppWebhooksFailed
		}
		o.traffic.Count(traffic.App, a.AppID, series, 1)
	}
	o.console.WebhookAttempt(a)
}

// pushOutcome goes into push.Options.OnOutcome.
func (o *ops) pushOutcome(instanceID string, outcome storage.DeliveryOutcome) {
	if o.traffic == nil {
		return
	}
	if series, ok := instanceSeries[outcome]; ok {
		o.traffic.Count(traffic.Instance, instanceID, series, 1)
	}
}

// instanceSeries is the traffic charts' series of each recorded push outcome.
var instanceSeries = map[storage.DeliveryOutcome]int{
	storage.DeliverySent:      traffic.InstanceDelivered,
	storage.DeliveryFailed:    traffic.InstanceFailed,
	storage.DeliveryRetry:     traffic.InstanceRetried,
	storage.DeliveryDeadToken: traffic.InstanceDeadToken,
}

// middleware times requests; install it on the engine before any route. It
// works once start has run, which is before the node serves.
func (o *ops) middleware() gin.HandlerFunc {
	return func(c *gin.Context) { o.timer(c) }
}

// routes adds the operations side to r: /metrics (unless it has its own
// listener), and, with an admin token, the admin API and the console;
// channelsAPI is the trigger path of the console's event creator, node the
// node's id in a cluster.
func (o *ops) routes(r *httpapi.Routes, channelsAPI *httpapi.ChannelsAPI, node string) {
	r.Timer = o.middleware()
	if o.cfg.MetricsAddr == "" {
		r.Metrics = o.metrics.Handler()
	}
	if o.cfg.AdminToken == "" {
		return
	}
	console := httpapi.ConsoleParts{Channels: channelsAPI, History: o.traffic, Node: node}
	r.Admin = httpapi.NewAdminAPI(o.db, o.hub, console, o.log, httpapi.AdminOptions{OnChange: o.reload})
	r.Console = o.console.Routes()
	r.AdminToken = o.cfg.AdminToken
}

// listen starts the separate metrics listener when one is configured.
func (o *ops) listen() error {
	if o.cfg.MetricsAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", o.cfg.MetricsAddr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", o.metrics.Handler())
	read, write := httpTimeouts(o.cfg)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: min(maxHeaderTimeout, read), ReadTimeout: read, WriteTimeout: write}
	o.mu.Lock()
	o.srv = srv
	o.mu.Unlock()
	o.log.Info("metrics listening", zap.String("addr", ln.Addr().String()))
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			o.log.Error("metrics listener failed", zap.Error(err))
		}
	}()
	return nil
}

// close ends the console's streams, which a graceful HTTP shutdown would
// otherwise wait for, and stops the metrics listener.
func (o *ops) close(ctx context.Context) error {
	o.console.Close()
	o.mu.Lock()
	srv := o.srv
	o.mu.Unlock()
	if srv != nil {
		return srv.Shutdown(ctx)
	}
	return nil
}
