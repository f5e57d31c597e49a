package httpapi

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/gen/channelsclient"
	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/hub"
)

// switchedCluster is a hub.Cluster of one node whose Redis answers until
// down is set: a publish is then refused, as a node of a real cluster
// refuses one while Redis does not answer.
type switchedCluster struct {
	h    *hub.Hub
	down atomic.Bool
}

func (c *switchedCluster) Publish(ms ...hub.Message) error {
	if c.down.Load() {
		return hub.ErrUnavailable
	}
	for _, m := range ms {
		c.h.Receive(m)
	}
	return nil
}
func (c *switchedCluster) Join(hub.Join)                   {}
func (c *switchedCluster) Leave(hub.Leave)                 {}
func (c *switchedCluster) SignIn(hub.SignInRequest)        {}
func (c *switchedCluster) SignOut(hub.SignOutRequest)      {}
func (c *switchedCluster) Terminate(string, string) error  { return hub.ErrUnavailable }
func (c *switchedCluster) ConnectionsElsewhere(string) int { return 0 }
func (c *switchedCluster) Connections(string) (int, error) { return 0, hub.ErrUnavailable }
func (c *switchedCluster) PresenceUsers(string, string) ([]string, error) {
	return nil, hub.ErrUnavailable
}
func (c *switchedCluster) Channel(string, string) (hub.ChannelStats, error) {
	return hub.ChannelStats{}, hub.ErrUnavailable
}
func (c *switchedCluster) Channels(string, string) ([]hub.ChannelStats, error) {
	return nil, hub.ErrUnavailable
}
func (c *switchedCluster) CachedEvent(string, string) (string, time.Duration, bool, error) {
	return "", 0, false, hub.ErrUnavailable
}
func (c *switchedCluster) SignedIn(string, string) (bool, error) { return false, hub.ErrUnavailable }

// A trigger or batch the cluster cannot take answers 503
// cluster_unavailable, and the trigger hook (the console) hears nothing of
// it; one it takes answers 200, and the hook hears each event.
func TestTriggerRefusedWhileTheClusterIsUnavailable(t *testing.T) {
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	h := hub.New(log)
	t.Cleanup(h.Close)
	cl := &switchedCluster{h: h}
	h.SetCluster(cl)
	engine := NewEngine(log)
	var mu sync.Mutex
	var heard []string
	api := NewChannelsAPI(h, testApps, log, ChannelsOptions{OnTrigger: func(appID, channel, event, _ string) {
		mu.Lock()
		heard = append(heard, appID+":"+channel+":"+event)
		mu.Unlock()
	}})
	Mount(engine, Routes{Channels: api})
	srv := httptest.NewServer(engine)
	t.Cleanup(srv.Close)
	client, err := channelsclient.NewClientWithResponses(srv.URL, channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner("key1", "secret1")))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	trigger := func(name string) (int, string) {
		t.Helper()
		res, err := client.TriggerEventWithResponse(ctx, "1", nil, channelsclient.TriggerEventRequest{Name: ptr(name), Data: ptr(`{}`), Channels: &[]string{"news", "sport"}})
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode(), string(res.Body)
	}
	batch := func(name string) (int, string) {
		t.Helper()
		res, err := client.TriggerBatchEventsWithResponse(ctx, "1", nil, channelsclient.TriggerBatchEventsJSONRequestBody{
			Batch: []channelsclient.BatchEvent{{Name: name, Channel: "news", Data: `{}`}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode(), string(res.Body)
	}
	if code, body := trigger("up"); code != 200 {
		t.Fatalf("trigger while the cluster answers: %d %s", code, body)
	}
	cl.down.Store(true)
	for name, send := range map[string]func(string) (int, string){"trigger": trigger, "batch": batch} {
		if code, body := send("down"); code != 503 || !strings.Contains(body, `"cluster_unavailable"`) {
			t.Fatalf("%s while the cluster is unavailable: %d %s, want 503 cluster_unavailable", name, code, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(heard, " "); got != "1:news:up 1:sport:up" {
		t.Fatalf("the trigger hook heard %q, want the two events of the accepted trigger only", got)
	}
}
