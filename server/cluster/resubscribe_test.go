package cluster

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// A connection that unsubscribes and subscribes again to a channel on the
// same node gets subscription_succeeded after its last subscribe and then
// the channel's messages, once; the cluster counts one subscription of it
// and the node's record holds one; the channel_vacated its leaving held
// back is cancelled by its coming back (the hold is an hour), so the
// channel was occupied once and never vacated. From each state of the
// first subscription:
//   - pending: Redis takes no write until the three calls are made, so no
//     answer can have come (CLIENT PAUSE WRITE);
//   - answered, while the node still reads the channel's slot;
//   - answered, after the node stopped reading the slot;
//   - answered, after the node's record was rebuilt (Redis lost its data).
func TestAResubscriptionOnTheSameNodeGetsItsAnswerAndMessages(t *testing.T) {
	for _, tt := range []struct {
		name string
		// before runs between the first subscription and the leaving; it
		// reports whether the first subscription is answered.
		before func(t *testing.T, rdb *redis.Client, n *node, cl *client) bool
		// between runs between the leaving and the second subscription.
		between func(t *testing.T, n *node)
	}{
		{name: "pending", before: func(*testing.T, *redis.Client, *node, *client) bool {
			return false // Redis takes no write: paused below
		}},
		{name: "answered", before: answeredFirst},
		{name: "answered, the slot no longer read", before: answeredFirst, between: func(t *testing.T, n *node) {
			wait.Until(t, "the node stops reading the slot", func() bool { return !n.reads("app", "news") })
		}},
		{name: "answered, the record rebuilt", before: func(t *testing.T, rdb *redis.Client, n *node, cl *client) bool {
			answeredFirst(t, rdb, n, cl)
			resyncs := n.c.Stats().Resyncs
			if err := rdb.FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			wait.Until(t, "the node rebuilds its record", func() bool { return n.c.Stats().Resyncs > resyncs })
			return true
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := testredis.Start(t)
			rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
			defer rdb.Close()
			ns := cluster(t, rs, 2, func(o *Options) { o.Hold = time.Hour })
			n, prefix := ns[0], prefix(ns[0].c)
			wait.Until(t, "both nodes up", func() bool { return ns[0].c.Stats().Up && ns[1].c.Stats().Up })
			cl := n.connect("app")

			pending := tt.name == "pending"
			if pending {
				if err := rdb.Do(t.Context(), "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
					t.Fatal(err)
				}
			}
			cl.subscribe("news", nil)
			answered := tt.before(t, rdb, n, cl)
			n.hub.Unsubscribe(cl.conn, "news")
			if tt.between != nil {
				tt.between(t, n)
			}
			cl.subscribe("news", nil)
			if pending {
				if err := rdb.Do(t.Context(), "CLIENT", "UNPAUSE").Err(); err != nil {
					t.Fatal(err)
				}
			}
			want := 1
			if answered {
				want = 2
			}
			wait.Until(t, "the second subscription answered", func() bool {
				return cl.count("news", "pusher_internal:subscription_succeeded") == want
			})
			if err := ns[1].hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "after", Data: "{}"}); err != nil {
				t.Fatal(err)
			}
			cl.wait("news", "after")
			if got := cl.events("news"); got[len(got)-1] != "after" || got[len(got)-2] != "pusher_internal:subscription_succeeded" || cl.count("news", "after") != 1 {
				t.Fatalf("the connection got %v, want subscription_succeeded then after, once", got)
			}

			wait.Until(t, "the cluster counts one subscription", func() bool {
				st, err := ns[1].hub.State().Channel("app", "news")
				return err == nil && st.Subscriptions == 1
			})
			record, err := rdb.SMembers(t.Context(), prefix+"ns:"+n.c.ID()).Result()
			if err != nil {
				t.Fatal(err)
			}
			if news := slices.DeleteFunc(record, func(e string) bool { return !strings.Contains(e, "\x1fnews\x1f") }); len(news) != 1 {
				t.Fatalf("the node's record holds %q of the channel, want one subscription", news)
			}
			if held := rdb.ZCard(t.Context(), prefix+"held").Val(); held != 0 {
				t.Fatalf("%d webhooks held back after the connection came back", held)
			}
			if got := n.obs.kinds("news", hub.ChannelOccupied, hub.ChannelVacated); !slices.Equal(got, []string{"channel_occupied:"}) {
				t.Fatalf("webhook events %v, want the channel occupied once", got)
			}
		})
	}
}

// answeredFirst waits for the first subscription's answer.
func answeredFirst(t *testing.T, _ *redis.Client, _ *node, cl *client) bool {
	cl.wait("news", "pusher_internal:subscription_succeeded")
	return true
}
