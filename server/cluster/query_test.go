package cluster

import (
	"fmt"
	"testing"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
)

// A presence channel's state, asked of any node, counts the subscriptions
// of every node and its distinct users: one user on two nodes is one user.
// (The HTTP API's user_count; a query of a presence channel alone reads
// the members' hash.)
func TestAPresenceChannelsStateCountsItsUsersOverTheCluster(t *testing.T) {
	onEachTopology(t, func(t *testing.T, cluster startCluster) {
		ns := cluster(2)
		for i, user := range []string{"w", "u", "u"} {
			cl := ns[i%2].connect("app")
			cl.subscribe("presence-room", &hub.Member{UserID: user})
			// Its answer comes from the join's script: the join is in Redis.
			cl.wait("presence-room", "pusher_internal:subscription_succeeded")
		}
		want := hub.ChannelStats{Name: "presence-room", Occupied: true, Subscriptions: 3, Users: 2}
		for _, n := range ns {
			st, err := n.hub.State().Channel("app", "presence-room")
			if err != nil || st != want {
				t.Fatalf("Channel on %s: %+v %v, want %+v", n.c.ID(), st, err, want)
			}
			list, err := n.hub.State().Channels("app", "presence-")
			if err != nil || len(list) != 1 || list[0] != want {
				t.Fatalf("Channels on %s: %+v %v, want [%+v]", n.c.ID(), list, err, want)
			}
		}
	})
}

// A node's figures count the messages it published and the script calls
// that carried them: a publish of three messages is one call on one
// Redis, and one call on each shard it reaches over shards.
func TestStatsCountPublishCallsAndTheirMessages(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shards int
	}{{"one Redis", 1}, {"two shards", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			_, url := shardList(t, tc.shards)
			n := startNode(t, nil, "calls:", "n1", withURL(url))
			// Three channels: on two shards, some on each.
			var ms []hub.Message
			reached := map[int]bool{}
			for i := 0; len(ms) < 3 || len(reached) < tc.shards; i++ {
				ch := fmt.Sprint("ch", i)
				if len(ms) == 2 && len(reached) < tc.shards && reached[shardOf("app", ch, tc.shards)] {
					continue // the third on the shard the first two missed
				}
				reached[shardOf("app", ch, tc.shards)] = true
				ms = append(ms, hub.Message{AppID: "app", Channel: ch, Event: "e", Data: "{}"})
			}
			wait.Until(t, "the node publishes", func() bool { return n.c.Stats().Up })
			before := n.c.Stats()
			if err := n.c.Publish(ms...); err != nil {
				t.Fatal(err)
			}
			after := n.c.Stats()
			if got := after.Published - before.Published; got != 3 {
				t.Errorf("published %d messages, counted %d", len(ms), got)
			}
			if got := after.PublishCalls - before.PublishCalls; got != int64(tc.shards) {
				t.Errorf("a publish over %d shard(s) counted %d calls, want %d", tc.shards, got, tc.shards)
			}
		})
	}
}
