package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/gen/channels"
	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// hookSink is a webhook endpoint that records the channel_occupied and
// channel_vacated events it receives, as name:channel.
type hookSink struct {
	url    string
	mu     sync.Mutex
	events []string
}

func newHookSink(t *testing.T) *hookSink {
	s := &hookSink{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req channels.WebhookRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, ev := range req.Events {
			if ev.Name != channels.ChannelOccupied && ev.Name != channels.ChannelVacated {
				continue
			}
			s.events = append(s.events, string(ev.Name)+":"+ev.Channel)
		}
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// waitFor waits until the sink has n events and returns them, sorted.
func (s *hookSink) waitFor(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	wait.Until(t, fmt.Sprintf("%d webhook events", n), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		got = slices.Sorted(slices.Values(s.events))
		return len(got) >= n
	})
	return got
}

// hubSession subscribes a connection of the test app to channel on n,
// waiting for the subscription to succeed, and returns its unsubscribe.
func hubSession(t *testing.T, n *Node, channel string) (leave func()) {
	t.Helper()
	c, err := n.Hub().Connect("77", hub.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Hub().Subscribe(c, channel, hub.SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	var got string
	wait.Until(t, "the subscription succeeds", func() bool {
		raw, _ := c.Take(nil)
		for _, f := range raw {
			got += string(f)
		}
		return strings.Contains(got, "subscription_succeeded")
	})
	return func() { n.Hub().Unsubscribe(c, channel) }
}

// A node alone holds channel_vacated in memory: a channel left and
// occupied again at once is reported as neither, and one left for good
// goes out after the hold.
func TestANodeAloneHoldsWebhooksInMemory(t *testing.T) {
	sink := newHookSink(t)
	n, _ := serveNode(t, socketConfig(t, func(c *config.Config) { c.AppWebhookURL = sink.url }))
	hubSession(t, n, "flip")()
	hubSession(t, n, "flip")
	hubSession(t, n, "marker")()
	// The marker's vacated goes after the hold: by then the flip's would
	// have gone too.
	got := sink.waitFor(t, 3)
	if want := []string{"channel_occupied:flip", "channel_occupied:marker", "channel_vacated:marker"}; !slices.Equal(got, want) {
		t.Fatalf("webhooks %v, want %v", got, want)
	}
}

// A cluster node's channel_vacated is held in Redis, and the webhooks take
// it as the cluster releases it: not held a second time, so the channel's
// next occupation, right after, is reported besides it rather than
// cancelling it.
func TestAClusterNodeHoldsWebhooksInRedisOnce(t *testing.T) {
	rs := testredis.Start(t)
	sink := newHookSink(t)
	prefix := fmt.Sprintf("hold%d:", time.Now().UnixNano())
	n, _ := clusterNode(t, rs, prefix, "a", func(c *config.Config) { c.AppWebhookURL = sink.url })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	hubSession(t, n, "c")()
	wait.Until(t, "the channel_vacated held in Redis", func() bool { return rdb.ZCard(t.Context(), prefix+"held").Val() == 1 })
	// The release loop hands it to the webhooks as it takes it out, within
	// a hold.
	wait.Until(t, "the channel_vacated released", func() bool { return rdb.ZCard(t.Context(), prefix+"held").Val() == 0 })
	hubSession(t, n, "c")
	got := sink.waitFor(t, 3)
	if want := []string{"channel_occupied:c", "channel_occupied:c", "channel_vacated:c"}; !slices.Equal(got, want) {
		t.Fatalf("webhooks %v, want %v", got, want)
	}
}
