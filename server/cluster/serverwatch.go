package cluster

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// serverWatch notices that another Redis server than before answers the
// node: each new connection asks the server's run_id, and a run_id that
// differs from the last one seen means a failover behind one address (a
// managed Redis, a proxy or a DNS name moved to the promoted replica), a
// Sentinel's switch to a new primary, or a restart. That may come with no
// outage the heartbeat sees: the client's retry takes a closed
// connection's command to the new server at once. Yet the new server may
// lack the old one's last writes, so the node publishes its window again,
// as after an outage (replay; the nodes that had those messages skip
// them).
type serverWatch struct {
	mu    sync.Mutex
	runID string // the last one seen; empty before the first connection
	c     *Cluster
}

// onConnect is the client's OnConnect hook. It never fails the
// connection: a server that refuses INFO (an ACL, a renamed command)
// leaves the heartbeat's outages as all there is to go by.
func (w *serverWatch) onConnect(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return nil
	}
	// A FailoverClient's connections to the Sentinels run this hook too:
	// their run_ids are not the primary's.
	if infoValue(info, "redis_mode") == "sentinel" {
		return nil
	}
	id := infoValue(info, "run_id")
	w.mu.Lock()
	before := w.runID
	w.runID = id
	w.mu.Unlock()
	if before != "" && before != id {
		w.c.log.Warn("another Redis server answers than before (a failover or a restart): publishing again what this node published in the last moments, in case it lacks some",
			zap.String("run_id", id), zap.String("was", before))
		w.c.replayAnyway()
	}
	return nil
}

// infoValue is the value of key in the text of an INFO reply ("key:value"
// lines), empty when it is not there.
func infoValue(info, key string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
