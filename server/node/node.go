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
	"github.com/heraldrt/herald/server/console/traffic"
	"github.com/heraldrt/herald/server/directory"
	"github.com/heraldrt/herald/server/eventlog"
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
	// instances is the directory of Push instances.
	instances *directory.Instances
	hub       *hub.Hub
	http      *http.Server
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
	cluster cluster.Cluster
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

	// closers close what start-up opened, last opened first: Shutdown runs
	// them, and so does a failed start.
	closers closers
	bg      sync.WaitGroup // the background loops (startBackground)
}

// Options tune a node beyond what the operator's configuration says; tests
// and benchmarks set them. The zero value is what `herald serve` runs with.
type Options struct {
	// Push is the push delivery tuning; zero fields take push.Options'
	// defaults. The node adds the configuration's Web Push allowed hosts
	// to its own, and fills the owner, the lease and the webhook dialer
	// from the configuration when they are unset (startPush).
	Push push.Options
	// Traffic tunes the console's traffic charts (interval, points, keys);
	// zero fields take traffic.Options' defaults. Tests make the interval
	// long and call the recorder's Sample themselves.
	Traffic traffic.Options
	// CertPoll is how often the TLS certificate files are checked for a
	// change; certPollInterval when 0. Tests of SIGHUP make it long.
	CertPoll time.Duration
	// DirectoryReload is how often the directories of apps and instances
	// check the database for changes; appReloadInterval when 0. Tests of
	// what takes effect without that check make it long.
	DirectoryReload time.Duration
	// ClusterPrefix is the prefix of the node's Redis keys and channels in
	// cluster mode (cluster.Options.Prefix), so that tests can run several
	// clusters on one Redis; empty: the cluster's own.
	ClusterPrefix string
	// ClusterHeartbeat is how often the node renews its heartbeat in
	// cluster mode, and ClusterNodeTTL how long one lasts before the node
	// counts as dead (cluster.Options); 0: the cluster's defaults.
	ClusterHeartbeat, ClusterNodeTTL time.Duration

	closed func(name string) // tests: told the name of each closer as it runs
}

// WithDefaults returns o with the defaults in place of its zero fields
// (those the node fills itself; Push, Traffic and the cluster's are filled
// by their packages).
func (o Options) WithDefaults() Options {
	o.CertPoll = cmp.Or(o.CertPoll, certPollInterval)
	o.DirectoryReload = cmp.Or(o.DirectoryReload, appReloadInterval)
	return o
}

// New opens the database, prepares the default app and instance, and wires the
// APIs, as cfg says and tuned by o. It does not listen yet; see Serve.
//
// It runs the start-up's steps in order; each one that opens something
// pushes how to close it (closers), and Shutdown, or a failed start, runs
// them in reverse. So the steps come in the order the graceful shutdown
// needs, backwards: the database, the background loops that read it, push
// delivery, the webhook sender, the hub, the cluster, the WebSockets, the
// upgrade server, the HTTP server and its fallback sessions, the console.
func New(ctx context.Context, cfg config.Config, log *zap.Logger, o Options) (_ *Node, err error) {
	o = o.WithDefaults()
	n := &Node{log: log, hub: hub.New(log.Named("hub"))}
	n.closers.ran = o.closed
	defer func() {
		if err != nil {
			// Nothing serves yet, so nothing is waited for.
			n.closers.close(context.Background()) //nolint:errcheck // the start's error is the one to report
		}
	}()
	// The certificate first: a bad pair should stop the start before the
	// database is touched.
	if err := n.loadCertificate(cfg); err != nil {
		return nil, err
	}
	if err := n.openStorage(ctx, cfg); err != nil {
		return nil, err
	}
	// The background loops read the database and the hub: they stop after
	// everything else, before the database closes.
	loops, stop := context.WithCancel(context.Background())
	n.closers.push("background loops", func(context.Context) error { stop(); n.bg.Wait(); return nil })
	n.ops = newOps(cfg, n.db, n.hub, n.apps, n.instances, log, o.Traffic)
	if err := n.startPush(ctx, cfg, o.Push); err != nil {
		return nil, err
	}
	n.startWebhooks(cfg)
	if err := n.joinCluster(cfg, o); err != nil {
		return nil, err
	}
	apis := n.buildAPIs(cfg)
	engine, err := n.routes(cfg, apis)
	if err != nil {
		return nil, err
	}
	n.serveHTTP(cfg, engine)
	n.startBackground(loops, o)
	return n, nil
}

// closer closes one part that start-up opened.
type closer struct {
	name  string // what it closes, as its error and tests say
	close func(context.Context) error
}

// closers are what start-up opened, in the order it opened them; close runs
// them last opened first, each once.
type closers struct {
	mu   sync.Mutex
	list []closer
	ran  func(name string) // told each closer's name as it runs; nil but in tests
}

// push adds how to close what was just opened.
func (c *closers) push(name string, close func(context.Context) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, closer{name, close})
}

// pushFunc is push for a close that cannot fail.
func (c *closers) pushFunc(name string, close func()) {
	c.push(name, func(context.Context) error { close(); return nil })
}

// close runs every closer pushed, last first, and returns their errors, each
// named by its closer. A second call runs none again.
func (c *closers) close(ctx context.Context) error {
	c.mu.Lock()
	list := c.list
	c.list = nil
	c.mu.Unlock()
	var err error
	for _, cl := range slices.Backward(list) {
		if c.ran != nil {
			c.ran(cl.name)
		}
		if cerr := cl.close(ctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("closing %s: %w", cl.name, cerr))
		}
	}
	return err
}

// loadCertificate loads the TLS pair when the configuration names one.
func (n *Node) loadCertificate(cfg config.Config) error {
	if cfg.TLSCertFile == "" {
		return nil
	}
	var err error
	n.cert, err = newCertReloader(cfg.TLSCertFile, cfg.TLSKeyFile, n.log.Named("tls"))
	return err
}

// openStorage opens the database, creates or updates the default app and
// instance from the configuration, and loads the directories of apps and
// instances.
func (n *Node) openStorage(ctx context.Context, cfg config.Config) error {
	db, err := storage.Open(ctx, cfg.DB)
	if err != nil {
		return fmt.Errorf("opening database %s: %w", storage.Name(cfg.DB), err)
	}
	n.db = db
	n.closers.push("database", func(context.Context) error { return db.Close() })
	if err := bootstrap.Run(ctx, db, cfg, n.log); err != nil {
		return err
	}
	if n.apps, err = directory.NewApps(ctx, db, n.log.Named("apps")); err != nil {
		return fmt.Errorf("loading apps: %w", err)
	}
	if n.instances, err = directory.NewInstances(ctx, db, n.log.Named("instances")); err != nil {
		return fmt.Errorf("loading instances: %w", err)
	}
	// Ready while the database answers and takes writes: on PostgreSQL
	// not while a failover leaves no primary, or only a standby, behind
	// HERALD_DB.
	n.ready = []httpapi.ReadyCheck{{Name: "database", Check: db.Ready}}
	return nil
}

// startPush starts push delivery: the Beams publishes' workers, which
// Shutdown stops after the webhook sender.
func (n *Node) startPush(ctx context.Context, cfg config.Config, opts push.Options) error {
	// Web Push endpoints come from anonymous clients: only the operator's
	// hosts may be private or plain http (the options may add test hosts).
	opts.WebPushAllowedHosts = slices.Concat(cfg.WebPushAllowedHosts, opts.WebPushAllowedHosts)
	if opts.Owner == "" {
		opts.Owner = cfg.NodeID // the pages' leases and a publish's split name the node; random when unset on PostgreSQL
	}
	if opts.Lease == 0 {
		opts.Lease = cfg.PushLease
	}
	if dial := webhookDial(cfg); dial != nil {
		opts.WebhookDialContext = dial // publish webhooks are refused the same addresses
	}
	opts.OnOutcome = n.ops.pushOutcome // the console's traffic charts, per instance
	n.push = push.New(n.db, n.instances, n.log.Named("push"), opts)
	if err := n.push.Start(ctx); err != nil {
		return fmt.Errorf("starting push delivery: %w", err)
	}
	n.closers.pushFunc("push delivery", n.push.Close)
	return nil
}

// webhookDial is how webhooks and publish webhooks connect: nil (any
// address) unless the configuration refuses private ones.
func webhookDial(cfg config.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if !cfg.WebhookBlockPrivate {
		// Webhook URLs are the operator's, so private ones are allowed by
		// default.
		return nil
	}
	// When refused, they get the Web Push endpoints' guard with no host
	// exempt.
	return (*netguard.Policy)(nil).DialContext
}

// startWebhooks starts the Channels webhook sender and makes it and the
// console the hub's observers.
func (n *Node) startWebhooks(cfg config.Config) {
	hookOpts := webhook.Options{OnAttempt: n.ops.webhookAttempt, MaxQueued: cfg.WebhookMaxQueued, DialContext: webhookDial(cfg), Holder: webhookHold(cfg)}
	n.hook = webhook.New(n.db, n.apps, n.log.Named("webhook"), hookOpts)
	n.hub.SetObserver(hub.Observers{n.hook, n.ops.console})
	n.hook.Start()
	// The webhook sender flushes after the sockets, whose departures are
	// events too, and after the hub, which delivers to it what is queued.
	n.closers.pushFunc("webhooks", n.hook.Close)
	// Once no publisher is left (the cluster closes before it), the hub
	// delivers what is queued.
	n.closers.pushFunc("hub", n.hub.Close)
}

// webhookHold is where channel_vacated and member_removed wait: in Redis on
// a cluster node (the cluster's scripts hold them over every node), in the
// dispatcher's memory (nil, its default) on a node alone.
func webhookHold(cfg config.Config) webhook.Hold {
	if cfg.RedisURL != "" {
		return cluster.WebhookHold{}
	}
	return nil
}

// joinCluster joins the cluster over Redis when the configuration names
// one; on a single node it does nothing.
func (n *Node) joinCluster(cfg config.Config, o Options) error {
	if cfg.RedisURL == "" {
		return nil
	}
	apps := n.apps
	cl, err := cluster.New(n.log.Named("cluster"), n.hub, cluster.Options{
		URL: cfg.RedisURL, CAFile: cfg.RedisCAFile, NodeID: cfg.NodeID, Prefix: o.ClusterPrefix,
		Heartbeat: o.ClusterHeartbeat, NodeTTL: o.ClusterNodeTTL,
		Settings: func(appID string) cluster.AppSettings {
			app := apps.ByID(appID)
			if app == nil {
				return cluster.AppSettings{}
			}
			return cluster.AppSettings{SubscriptionCount: app.SubscriptionCount, MaxPresenceMembers: app.MaxPresenceMembers}
		},
	})
	if err != nil {
		return err
	}
	n.cluster = cl
	// After the sockets: the node's share leaves the cluster at shutdown,
	// rather than when its heartbeat expires.
	n.closers.push("cluster", func(context.Context) error { return cl.Close() })
	if cfg.AdminToken != "" {
		// The console's live list shows what every node sees.
		n.relay = cl.ConsoleRelay(n.ops.console.Deliver)
		n.ops.console.SetRelay(cl.ID(), n.relay)
	}
	cl.Start()
	n.ready = append(n.ready, httpapi.ReadyCheck{Name: "redis", Check: cl.Ready})
	return nil
}

// apis are the node's HTTP APIs, as routes mounts them.
type apis struct {
	channels  *httpapi.ChannelsAPI
	device    *httpapi.DeviceAPI
	reporting *httpapi.ReportingAPI
	publish   *httpapi.PublishAPI
	// anon is the one budget per client address over both anonymous Push
	// APIs.
	anon *httpapi.AnonLimiter
	// history is the store of the apps' channel histories (eventlog.go).
	history eventlog.Store
}

// buildAPIs builds the Channels and Push APIs and the WebSocket handler.
func (n *Node) buildAPIs(cfg config.Config) apis {
	idem := idempotency.Options{TTL: cfg.IdempotencyTTL, MaxKeys: cfg.IdempotencyMaxKeys, MaxBytes: cfg.IdempotencyMaxBytes}
	a := apis{anon: httpapi.NewAnonLimiter(cfg.AnonRateLimit), history: n.channelHistory(cfg)}
	a.device = httpapi.NewDeviceAPI(n.db, n.instances, n.log, httpapi.DeviceOptions{LimitPerClient: a.anon, WebPushAllowedHosts: cfg.WebPushAllowedHosts})
	a.reporting = httpapi.NewReportingAPI(n.db, n.instances, n.log, httpapi.ReportingOptions{LimitPerClient: a.anon})
	a.publish = httpapi.NewPublishAPI(n.db, n.instances, n.push, n.log, httpapi.PublishOptions{
		Idempotency: n.publishKeys(idem), WebPushAllowedHosts: cfg.WebPushAllowedHosts,
	})
	a.channels = httpapi.NewChannelsAPI(n.hub, n.apps, n.log, httpapi.ChannelsOptions{
		Idempotency:   n.channelKeys(idem),
		History:       a.history,
		PushIfOffline: a.publish, // triggers' push_if_offline publish through it, so it is built first
		OnTrigger:     n.ops.console.Triggered,
	})
	// Recovery reads a node's own history here; a cluster's reads its own
	// where each subscription takes effect.
	recoverable, _ := a.history.(eventlog.Positioned)
	n.ws = ws.NewHandler(n.hub, socketApps{n.apps}, n.log.Named("ws"), ws.Options{
		History:                recoverable,
		ActivityTimeout:        cfg.ActivityTimeout,
		PongTimeout:            cfg.PongTimeout,
		MaxSubscriptionsPerApp: cfg.MaxSubscriptions,
		ConnectRateLimit:       cfg.ConnectRateLimit,
	})
	// Every WebSocket closes with 4200 once no upgrade is under way.
	n.closers.push("websockets", n.ws.Shutdown)
	return a
}

// serveHTTP prepares the HTTP server over engine and the WebSocket upgrade
// server in front of it.
func (n *Node) serveHTTP(cfg config.Config, engine *gin.Engine) {
	// Every request has readTimeout for its headers and body (before the
	// signature can be checked, so a slow sender holds nothing for long)
	// and writeTimeout for its answer; the long-lived routes lift both
	// (httpapi.LongLived says why this way round).
	readTimeout, writeTimeout := httpTimeouts(cfg)
	n.http = &http.Server{
		// A refused upgrade closes its connection here too, as on the fast
		// path (upgrade.CloseRefused says why).
		Handler:           upgrade.CloseRefused(engine),
		ReadHeaderTimeout: min(maxHeaderTimeout, readTimeout),
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(n.log.Named("http")),
	}
	if n.cert != nil {
		// ServeTLS adds h2 to these; WebSockets stay on HTTP/1.1, since
		// net/http does not offer extended CONNECT (RFC 8441) by default.
		n.http.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: n.cert.getCertificate}
	}
	// Stop accepting requests and wait for those in flight.
	n.closers.push("http server", n.http.Shutdown)
	// Before the HTTP server's: HTTP fallback clients take their 4200 from
	// requests, which need the listener, and streams in flight end.
	n.closers.push("http fallback sessions", func(ctx context.Context) error { n.ws.CloseHTTPSessions(ctx); return nil })
	// First of all: open console streams would hold up the HTTP shutdown.
	n.closers.push("console and metrics listener", n.ops.close)
}

// startBackground starts the node's loops: the directories' reloads, the
// sweep of expired cache events and keys, the console's charts and the
// certificate watch, until ctx ends (Shutdown ends it).
func (n *Node) startBackground(ctx context.Context, o Options) {
	n.bg.Go(func() { n.apps.Run(ctx, o.DirectoryReload) })
	n.bg.Go(func() { n.instances.Run(ctx, o.DirectoryReload) })
	n.bg.Go(func() { n.sweepCache(ctx) })
	if h := n.ops.traffic; h != nil {
		n.bg.Go(func() { h.Run(ctx.Done()) })
	}
	if n.cert != nil {
		n.bg.Go(func() { n.cert.watch(ctx, o.CertPoll) })
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

// Shutdown closes what New opened, last opened first (New lists the
// steps): the console's streams, the HTTP fallback sessions with 4200; it
// stops accepting requests and waits for those in flight (until ctx ends),
// closes every WebSocket with 4200 (clients reconnect elsewhere or later),
// leaves the cluster, flushes the webhooks, stops push delivery and the
// background loops and closes the database. A second call does nothing.
func (n *Node) Shutdown(ctx context.Context) error {
	return n.closers.close(ctx)
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
