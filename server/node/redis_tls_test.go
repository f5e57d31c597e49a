package node

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/testcert"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// HERALD_REDIS_CA_FILE reaches the cluster: a node on a rediss:// Redis
// whose certificate a private CA signed is ready once given that CA.
func TestClusterNodeTrustsTheRedisCAFile(t *testing.T) {
	files := testredis.TLS(testcert.ServerFiles(t))
	rs := testredis.StartTLS(t, files)

	_, url := serveNodeWith(t, config.Config{
		DB:          filepath.Join(t.TempDir(), "herald.db"),
		RedisURL:    rs.URL(),
		RedisCAFile: rs.CAFile(),
		NodeID:      "tls",
	}, Options{ClusterPrefix: fmt.Sprintf("nodetls%d:", time.Now().UnixNano()), ClusterHeartbeat: 100 * time.Millisecond, ClusterNodeTTL: time.Second})
	wait.NoError(t, func() error {
		res, err := http.Get(url + "/readyz")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s, want 200 (Redis over TLS answers)", res.Status)
		}
		return nil
	})
}
