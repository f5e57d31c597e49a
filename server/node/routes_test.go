package node

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/config"
)

// The WebSocket upgrade server bounds a request as the node's http.Server
// does: the same head timeout, the same write timeout, and the same read
// timeout, which a request handed over to the http.Server has from accept
// (upgrade.Options.ReadTimeout); on the defaults, on short timeouts and on a
// read timeout longer than the head's cap.
func TestUpgradeOptionsAreTheHTTPServers(t *testing.T) {
	for _, tt := range []struct{ read, write time.Duration }{
		{0, 0},
		{3 * time.Second, 4 * time.Second},
		{45 * time.Second, time.Minute},
	} {
		t.Run(fmt.Sprintf("%v,%v", tt.read, tt.write), func(t *testing.T) {
			cfg := config.Config{DB: filepath.Join(t.TempDir(), "herald.db"), BodyReadTimeout: tt.read, WriteTimeout: tt.write}
			n, _ := serveNode(t, cfg)
			o, srv := n.upgradeOptions(cfg), n.http
			if o.ReadTimeout != srv.ReadTimeout || o.HeaderTimeout != srv.ReadHeaderTimeout || o.WriteTimeout != srv.WriteTimeout {
				t.Fatalf("upgrade read %v, head %v, write %v; the http.Server's read %v, head %v, write %v",
					o.ReadTimeout, o.HeaderTimeout, o.WriteTimeout, srv.ReadTimeout, srv.ReadHeaderTimeout, srv.WriteTimeout)
			}
		})
	}
}
