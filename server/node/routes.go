package node

import (
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/httpapi"
	"github.com/heraldrt/herald/server/upgrade"
)

// routes builds the node's HTTP engine with every route on it (the table
// is httpapi.Mount), the WebSocket upgrade server in front of it, and the
// metrics over the node's parts.
func (n *Node) routes(cfg config.Config, a apis) (*gin.Engine, error) {
	engine := httpapi.NewEngine(n.log)
	// X-Forwarded-For names the client only when the peer is one of these.
	if err := engine.SetTrustedProxies(cfg.TrustedProxies); err != nil {
		return nil, fmt.Errorf("HERALD_TRUSTED_PROXIES: %w", err)
	}
	n.upgrades = upgrade.NewServer(engine, n.upgradeOptions(cfg))
	// Upgrade requests under way end in the transport's refusal, before
	// the WebSockets close.
	n.closers.push("upgrades", n.upgrades.Wait)
	n.ops.start(n.ws, n.upgrades, n.hook, n.push, a.publish, a.anon, n.cluster, a.history)
	r := httpapi.Routes{
		Ready: n.ready,
		// gin's ClientIP: X-Forwarded-For counts only from the trusted
		// proxies.
		Socket:    func(c *gin.Context) { n.ws.ServeClient(c.Writer, c.Request, c.ClientIP()) },
		Fallback:  func(c *gin.Context) { n.ws.ServeFallback(c.Writer, c.Request, c.ClientIP()) },
		Channels:  a.channels,
		Device:    a.device,
		Reporting: a.reporting,
		Publish:   a.publish,
	}
	nodeID := "" // the node's id in a cluster, named by the console's events and history
	if n.cluster != nil {
		nodeID = n.cluster.ID()
	}
	n.ops.routes(&r, a.channels, nodeID)
	httpapi.Mount(engine, r)
	return engine, nil
}

// upgradeOptions are the WebSocket upgrade server's options: the timeouts
// of the http.Server behind it (serveHTTP), so that a request is bounded
// the same on either path.
func (n *Node) upgradeOptions(cfg config.Config) upgrade.Options {
	readTimeout, writeTimeout := httpTimeouts(cfg)
	return upgrade.Options{
		HeaderTimeout: min(maxHeaderTimeout, readTimeout),
		ReadTimeout:   readTimeout, // the http.Server's: a handed-over request has it from accept
		WriteTimeout:  writeTimeout,
		Go:            n.ws.Go,
		Log:           n.log.Named("upgrade"),
	}
}
