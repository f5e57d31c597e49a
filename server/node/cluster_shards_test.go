package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pusher/pusher-http-go/v5"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// A node over two shards, one of them down: a batch whose events are on
// both is answered 503 cluster_unavailable, whichever comes first, never
// 200 with an event lost; a trigger on the shard that answers goes
// through. Which shard a channel is on is found by triggering on it alone.
func TestClusterBatchOverAShardDownIsRefused(t *testing.T) {
	servers := []*testredis.Server{testredis.Start(t), testredis.Start(t)}
	url := servers[0].URL() + "," + servers[1].URL()
	_, addr := clusterNode(t, servers[0], fmt.Sprintf("batch%d:", time.Now().UnixNano()), "a", func(c *config.Config) { c.RedisURL = url })
	sdk := goClient(addr, "go-sdk-key", "go-sdk-secret")
	wait.NoError(t, func() error { return sdk.Trigger("warm-up", "e", "{}") })

	servers[1].Stop()
	var up, down string
	for i := 0; i < 20 && (up == "" || down == ""); i++ {
		name := fmt.Sprint("ch", i)
		switch err := sdk.Trigger(name, "alone", "{}"); {
		case err == nil:
			up = name
		case strings.Contains(err.Error(), "503") && strings.Contains(err.Error(), "cluster_unavailable"):
			down = name
		default:
			t.Fatalf("a trigger on %s: %v", name, err)
		}
	}
	if up == "" || down == "" {
		t.Fatalf("20 channels, none on one of the shards (up %q, down %q)", up, down)
	}
	for _, order := range [][]string{{up, down}, {down, up}} {
		_, err := sdk.TriggerBatch([]pusher.Event{{Channel: order[0], Name: "e", Data: "1"}, {Channel: order[1], Name: "e", Data: "2"}})
		if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "cluster_unavailable") {
			t.Fatalf("a batch on %v, %s on the shard that is down: %v, want 503 cluster_unavailable", order, down, err)
		}
	}
}
