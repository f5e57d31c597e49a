package cluster

import (
	"testing"

	"github.com/heraldrt/herald/server/hub"
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
