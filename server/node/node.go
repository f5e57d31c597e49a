// Package node assembles one Herald node from its parts (database, app
// directory, hub, HTTP APIs) and runs it until it is shut down. The binary and
// the in-process tests both start nodes through it.
package node

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/bootstrap"
	"github.com/heraldrt/herald/server/cluster"
	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/directory"
	"github.com/heraldrt/herald/server/docs"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/history"
	"github.com/heraldrt/herald/server/httpapi"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/netguard"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/server/upgrade"
	"github.com/heraldrt/herald/server/webhook"
	"github.com/heraldrt/herald/server/ws"
	"github.com/heraldrt/herald/storage"
)

// How often the node looks for app changes made by `herald apps`, and sweeps
// expired cache-channel events.
const (
	appReloadInterval = time.Second
	cacheSweepEvery   = time.Minute
)

// FallbackRoute is where pusher-js's HTTP fallback transports reach the node:
// its default httpPath, /pusher, then the app key, the session pusher-js
// made up and the transport (ws.Handler.ServeFallback).
const FallbackRoute = "/pusher/app/:key/:server/:session/:transport"

// HTTP timeouts: the defaults of HERALD_HTTP_READ_TIMEOUT and
// HERALD_HTTP_WRITE_TIMEOUT, and the most the request headers may take.
const (
	DefaultReadTimeout  = 30 * time.Second
	DefaultWriteTimeout = 30 * time.Second
	maxHeaderTimeout    = 10 * time.Second
)

// httpTimeouts returns the configured read and write timeouts, with the
// defaults for 0.
func httpTimeouts(cfg config.Config) (read, write time.Duration) {
	read, write = cfg.BodyReadTimeout, cfg.WriteTimeout
	if read <= 0 {
		read = DefaultReadTimeout
	}
	if write <= 0 {
		write = DefaultWriteTimeout
	}
	return read, write
}

// Node is one running Herald server.
type Node struct {
	log  *zap.Logger
	db   *storage.DB
	apps *directory.Apps
	hub  *hub.Hub
	http *http.Server
	// upgrades serves WebSocket upgrade requests straight off a plain
	// listener, ahead of http.
	upgrades *upgrade.Server
	ws       *ws.Handler
	hook     *webhook.Dispatcher
	ops      *ops // metrics, admin API, console (ops.go)
	push     *push.Dispatcher
	cert     *certReloader // nil: plain HTTP (tls.go)
	// cluster is the node's membership of a cluster over Redis; nil on a
	// single node.
	cluster *cluster.Cluster
	// relay carries the console's events to and from the other nodes; nil
	// on a single node and without an admin token (no console to show them).
	relay *cluster.ConsoleRelay

	// keys are the stores of the Idempotency-Key headers that the node
	// sweeps of expired keys (idempotency.go).
	keys keySweepers
	// eventlog is the channel history kept in memory, swept with the
	// cache; nil in cluster mode, where Redis keeps it (eventlog.go).
	eventlog *eventlog.Memory

	// ready is what GET /readyz checks; cluster mode adds Redis here,
	// before the route is registered.
	ready []httpapi.ReadyCheck

	stop context.CancelFunc // stops the background loops
	bg   sync.WaitGroup
}

// Option tunes a node beyond what the operator's configuration says; tests
// and benchmarks use them.
type Option func(*options)

type options struct {
	push     push.Options
	history  history.Options
	certPoll time.Duration
	reload   time.Duration // how often the directories check the database; 0: appReloadInterval

	clusterPrefix                    string
	clusterHeartbeat, clusterNodeTTL time.Duration
}

// WithClusterKeys sets the prefix of the node's Redis keys and channels in
// cluster mode, so that tests can run several clusters on one Redis.
func WithClusterKeys(prefix string) Option {
	return func(opts *options) { opts.clusterPrefix = prefix }
}

// WithClusterHeartbeat sets how often a node renews its heartbeat and how
// long one lasts before the node counts as dead (cluster.Options).
func WithClusterHeartbeat(every, ttl time.Duration) Option {
	return func(opts *options) { opts.clusterHeartbeat, opts.clusterNodeTTL = every, ttl }
}

// WithCertPoll sets how often the TLS certificate files are checked for a
// change (default certPollInterval); tests of SIGHUP make it long.
func WithCertPoll(d time.Duration) Option { return func(opts *options) { opts.certPoll = d } }

// WithDirectoryReload sets how often the directories of apps and instances
// check the database for changes (default appReloadInterval); tests of what
// takes effect without that check make it long.
func WithDirectoryReload(d time.Duration) Option { return func(opts *options) { opts.reload = d } }

// WithHistory sets the console's history tuning (interval, points, keys);
// zero fields take history's defaults. Tests make the interval long and
// call the recorder's Sample themselves.
func WithHistory(h history.Options) Option { return func(opts *options) { opts.history = h } }

// WithPush sets the push delivery tuning; zero fields take push.Options'
// defaults.
func WithPush(o push.Options) Option { return func(opts *options) { opts.push = o } }

// New opens the database, prepares the default app and instance, and wires the
// APIs. It does not listen yet; see Serve.
func New(ctx context.Context, cfg config.Config, log *zap.Logger, opts ...Option) (*Node, error) {
	o := options{certPoll: certPollInterval}
	for _, opt := range opts {
		opt(&o)
	}
	// The certificate first: a bad pair should stop the start before the
	// database is touched.
	var cert *certReloader
	if cfg.TLSCertFile != "" {
		var err error
		if cert, err = newCertReloader(cfg.TLSCertFile, cfg.TLSKeyFile, log.Named("tls")); err != nil {
			return nil, err
		}
	}
	db, err := storage.Open(ctx, cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("opening database %s: %w", storage.Name(cfg.DB), err)
	}
	if err := bootstrap.Run(ctx, db, cfg, log); err != nil {
		db.Close()
		return nil, err
	}
	apps, err := directory.NewApps(ctx, db, log.Named("apps"))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("loading apps: %w", err)
	}
	instances, err := directory.NewInstances(ctx, db, log.Named("instances"))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("loading instances: %w", err)
	}
	n := &Node{log: log, db: db, apps: apps, hub: hub.New(log.Named("hub")), cert: cert}
	n.ready = []httpapi.ReadyCheck{{Name: "database", Check: func(ctx context.Context) error {
		_, err := db.DataVersion(ctx) // one row from a reader: the file answers
		return err
	}}}
	n.ops = newOps(cfg, db, n.hub, apps, instances, log, o.history)
	hookOpts := webhook.Options{OnAttempt: n.ops.webhookAttempt, MaxQueued: cfg.WebhookMaxQueued}
	if cfg.WebhookBlockPrivate {
		// Webhook URLs are the operator's, so private ones are allowed by
		// default; when refused, they get the Web Push endpoints' guard
		// with no host exempt, and so do publish webhooks.
		guard := (*netguard.Policy)(nil)
		hookOpts.DialContext = guard.DialContext
		o.push.WebhookDialContext = guard.DialContext
	}
	n.hook = webhook.New(db, apps, log.Named("webhook"), hookOpts)
	n.hub.SetObserver(hub.Observers{n.hook, n.ops.console})
	n.hook.Start()
	nodeID := "" // the node's id in a cluster, named by the console's events and history
	if cfg.RedisURL != "" {
		n.cluster, err = cluster.New(log.Named("cluster"), n.hub, cluster.Options{
			URL: cfg.RedisURL, CAFile: cfg.RedisCAFile, NodeID: cfg.NodeID, Prefix: o.clusterPrefix,
			Heartbeat: o.clusterHeartbeat, NodeTTL: o.clusterNodeTTL,
			Settings: func(appID string) cluster.AppSettings {
				app := apps.ByID(appID)
				if app == nil {
					return cluster.AppSettings{}
				}
				return cluster.AppSettings{SubscriptionCount: app.SubscriptionCount, MaxPresenceMembers: app.MaxPresenceMembers}
			},
		})
		if err != nil {
			n.hook.Close()
			db.Close()
			return nil, err
		}
		nodeID = n.cluster.ID()
		if cfg.AdminToken != "" {
			// The console's live list shows what every node sees.
			n.relay = n.cluster.ConsoleRelay(n.ops.console.Deliver)
			n.ops.console.SetRelay(nodeID, n.relay)
		}
		n.cluster.Start()
		n.ready = append(n.ready, httpapi.ReadyCheck{Name: "redis", Check: n.cluster.Ready})
	}

	engine := httpapi.NewEngine(log)
	// X-Forwarded-For names the client only when the peer is one of these.
	if err := engine.SetTrustedProxies(cfg.TrustedProxies); err != nil {
		n.closeCluster()
		n.hook.Close()
		db.Close()
		return nil, fmt.Errorf("HERALD_TRUSTED_PROXIES: %w", err)
	}
	engine.Use(n.ops.middleware())
	idem := idempotency.Options{TTL: cfg.IdempotencyTTL, MaxKeys: cfg.IdempotencyMaxKeys}
	channelHistory := n.channelHistory(cfg)
	channelsAPI := httpapi.NewChannelsAPI(n.hub, apps, log).Idempotency(n.channelKeys(idem)).History(channelHistory)
	channelsAPI.OnTrigger(n.ops.console.Triggered)
	channelsAPI.Register(engine)
	// One budget per client address over both anonymous Push APIs.
	anon := httpapi.NewAnonLimiter(cfg.AnonRateLimit)
	httpapi.NewDeviceAPI(db, instances, log).LimitPerClient(anon).AllowWebPushHosts(cfg.WebPushAllowedHosts).Register(engine)
	httpapi.NewReportingAPI(db, instances, log).LimitPerClient(anon).Register(engine)
	// Web Push endpoints come from anonymous clients: only the operator's
	// hosts may be private or plain http (the options may add test hosts).
	o.push.WebPushAllowedHosts = slices.Concat(cfg.WebPushAllowedHosts, o.push.WebPushAllowedHosts)
	if o.push.Owner == "" {
		o.push.Owner = cfg.NodeID // the publishes' leases name the node; random when unset on PostgreSQL
	}
	if o.push.Lease == 0 {
		o.push.Lease = cfg.PushLease
	}
	o.push.OnOutcome = n.ops.pushOutcome // the console's history, per instance
	n.push = push.New(db, instances, log.Named("push"), o.push)
	if err := n.push.Start(ctx); err != nil {
		n.closeCluster()
		n.hook.Close()
		db.Close()
		return nil, fmt.Errorf("starting push delivery: %w", err)
	}
	publishAPI := httpapi.NewPublishAPI(db, instances, n.push, log).Idempotency(n.publishKeys(idem))
	publishAPI.Register(engine)
	channelsAPI.PushIfOffline(publishAPI) // triggers' push_if_offline publish through it
	n.ws = ws.NewHandler(n.hub, socketApps{apps}, log.Named("ws"), ws.Options{
		ActivityTimeout:        cfg.ActivityTimeout,
		PongTimeout:            cfg.PongTimeout,
		MaxSubscriptionsPerApp: cfg.MaxSubscriptions,
		ConnectRateLimit:       cfg.ConnectRateLimit,
	})
	// gin's ClientIP: X-Forwarded-For counts only from the trusted proxies.
	serveSocket := func(c *gin.Context) { n.ws.ServeClient(c.Writer, c.Request, c.ClientIP()) }
	engine.GET("/app/:key", httpapi.LongLived, serveSocket) // the connection outlives the timeouts below
	// pusher-js's HTTP fallback under its default httpPath; its receiving
	// requests lift the timeouts themselves, xhr_send keeps them.
	serveFallback := func(c *gin.Context) { n.ws.ServeFallback(c.Writer, c.Request, c.ClientIP()) }
	engine.POST(FallbackRoute, serveFallback)
	engine.OPTIONS(FallbackRoute, serveFallback)
	engine.GET("/readyz", httpapi.Ready(n.ready...))
	engine.GET(docs.Prefix+"/*file", gin.WrapH(docs.Handler())) // the API reference; /docs redirects to /docs/
	// Every request has readTimeout for its headers and body (before the
	// signature can be checked, so a slow sender holds nothing for long)
	// and writeTimeout for its answer; the long-lived routes lift both
	// (httpapi.LongLived says why this way round).
	readTimeout, writeTimeout := httpTimeouts(cfg)
	n.upgrades = upgrade.NewServer(engine, upgrade.Options{
		HeaderTimeout: min(maxHeaderTimeout, readTimeout),
		WriteTimeout:  writeTimeout,
		Go:            n.ws.Go,
		Log:           log.Named("upgrade"),
	})
	n.ops.start(n.ws, n.upgrades, n.hook, n.push, publishAPI, anon, n.cluster, channelHistory)
	n.ops.register(engine, channelsAPI, nodeID)
	n.http = &http.Server{
		Handler:           engine,
		ReadHeaderTimeout: min(maxHeaderTimeout, readTimeout),
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
	if cert != nil {
		// ServeTLS adds h2 to these; WebSockets stay on HTTP/1.1, since
		// net/http does not offer extended CONNECT (RFC 8441) by default.
		n.http.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert.getCertificate}
	}

	bgCtx, stop := context.WithCancel(context.Background())
	n.stop = stop
	n.bg.Add(2)
	reload := cmp.Or(o.reload, appReloadInterval)
	go func() { defer n.bg.Done(); apps.Run(bgCtx, reload) }()
	go func() { defer n.bg.Done(); n.sweepCache(bgCtx) }()
	if h := n.ops.history; h != nil {
		n.bg.Add(1)
		go func() { defer n.bg.Done(); h.Run(bgCtx.Done()) }()
	}
	n.bg.Add(1)
	go func() { defer n.bg.Done(); instances.Run(bgCtx, reload) }()
	if cert != nil {
		n.bg.Add(1)
		go func() { defer n.bg.Done(); cert.watch(bgCtx, o.certPoll) }()
	}
	return n, nil
}

// closeCluster leaves the cluster when New fails after joining it.
func (n *Node) closeCluster() {
	if n.cluster != nil {
		n.cluster.Close()
	}
}

// Sockets is the node's WebSocket endpoint.
func (n *Node) Sockets() *ws.Handler { return n.ws }

// Hub is the node's channel registry.
func (n *Node) Hub() *hub.Hub { return n.hub }

// Serve answers requests on ln until Shutdown: https and wss when the
// configuration names a certificate, plain HTTP otherwise. It returns nil
// after a graceful shutdown.
func (n *Node) Serve(ln net.Listener) error {
	n.log.Info("listening", zap.String("addr", ln.Addr().String()), zap.Bool("tls", n.cert != nil))
	if err := n.ops.listen(); err != nil {
		return err
	}
	var err error
	if n.cert != nil {
		err = n.http.ServeTLS(ln, "", "") // the certificate comes from TLSConfig.GetCertificate
	} else {
		// WebSocket upgrades are served off the listener, the rest by
		// net/http (server/upgrade says why). Not over TLS: there the
		// handshake costs far more than what this saves, and ALPN (h2)
		// stays net/http's.
		err = n.http.Serve(n.upgrades.Listen(ln))
	}
	if !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ReloadTLS loads the TLS certificate and key files again (on SIGHUP). When
// they fail to load, the previous pair stays in service and the error is
// logged and returned.
func (n *Node) ReloadTLS() error {
	if n.cert == nil {
		return ErrNoTLS
	}
	return n.cert.Reload("SIGHUP")
}

// Shutdown closes the HTTP fallback sessions with 4200, stops accepting
// requests, waits for those in flight (until ctx ends), closes every WebSocket with 4200 (clients reconnect elsewhere or
// later), stops the background loops and closes the database.
func (n *Node) Shutdown(ctx context.Context) error {
	err := n.ops.close(ctx) // first: open console streams would hold up the HTTP shutdown
	// Before the HTTP server's: HTTP fallback clients take their 4200 from
	// requests, which need the listener, and streams in flight end.
	n.ws.CloseHTTPSessions(ctx)
	err = errors.Join(err, n.http.Shutdown(ctx))
	err = errors.Join(err, n.upgrades.Wait(ctx)) // upgrade requests under way end in the transport's refusal
	err = errors.Join(err, n.ws.Shutdown(ctx))
	if n.cluster != nil {
		// After the sockets: the node's share leaves the cluster now,
		// rather than when its heartbeat expires.
		err = errors.Join(err, n.cluster.Close())
	}
	n.hub.Close()  // no publisher is left: deliver what is queued
	n.hook.Close() // after the sockets, whose departures are events too
	n.push.Close()
	n.stop()
	n.bg.Wait()
	return errors.Join(err, n.db.Close())
}

func (n *Node) sweepCache(ctx context.Context) {
	t := time.NewTicker(cacheSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.hub.SweepCache()
			n.keys.sweep(ctx, n.log)
			if n.eventlog != nil {
				n.eventlog.Sweep(time.Now())
			}
		}
	}
}
