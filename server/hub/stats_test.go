package hub

import (
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// AppStats counts the connections, occupied channels, subscriptions and
// presence members of each app, sorted by app id.
func TestAppStats(t *testing.T) {
	h := New(zap.NewNop())
	for _, app := range []string{"2", "1"} {
		c := connect(t, h, app)
		subscribe(t, h, c, "presence-r", &Member{UserID: "u"})
		subscribe(t, h, c, "news", nil)
		subscribe(t, h, connect(t, h, app), "news", nil)
	}
	connect(t, h, "3")
	got := h.AppStats()
	want := []AppStats{
		{AppID: "1", Connections: 2, Channels: 2, Subscriptions: 3, PresenceMembers: 1},
		{AppID: "2", Connections: 2, Channels: 2, Subscriptions: 3, PresenceMembers: 1},
		{AppID: "3", Connections: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("stats %+v, want %+v", got, want)
		}
	}
	if user, ok := connect(t, h, "1").Subscription("news"); ok || user != "" {
		t.Fatal("a fresh connection reports a subscription")
	}
}

// AppStats.Delivered counts the event frames queued to each app's
// connections, the excluded sender left out, as a running total.
func TestAppStatsDelivered(t *testing.T) {
	h := New(zap.NewNop())
	a, b := connect(t, h, "1"), connect(t, h, "1")
	subscribe(t, h, a, "news", nil)
	subscribe(t, h, b, "news", nil)
	other := connect(t, h, "2")
	subscribe(t, h, other, "news", nil)
	h.publishNow(Message{AppID: "1", Channel: "news", Event: "e", Data: "{}"})
	h.publishNow(Message{AppID: "1", Channel: "news", Event: "e", Data: "{}", ExcludeSocketID: b.SocketID()})
	h.publishNow(Message{AppID: "1", Channel: "empty", Event: "e", Data: "{}"})
	st := h.AppStats()
	if len(st) != 2 || st[0].Delivered != 3 || st[1].Delivered != 0 {
		t.Fatalf("stats %+v, want 3 frames delivered to app 1 and none to app 2", st)
	}
}

// AppCounters reads what AppStats does of each app's running figures:
// connections, frames delivered and events triggered (CountTriggered).
func TestAppCounters(t *testing.T) {
	h := New(zap.NewNop())
	a := connect(t, h, "1")
	subscribe(t, h, a, "news", nil)
	connect(t, h, "1")
	h.CountTriggered("1", 2)
	h.publishNow(Message{AppID: "1", Channel: "news", Event: "e", Data: "{}"})
	h.CountTriggered("3", 1) // no connection yet: the count is kept
	got := h.AppCounters()
	slices.SortFunc(got, func(x, y AppCounters) int { return strings.Compare(x.AppID, y.AppID) })
	want := []AppCounters{{AppID: "1", Connections: 2, Delivered: 1, Triggered: 2}, {AppID: "3", Triggered: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("AppCounters() = %+v, want %+v", got, want)
	}
	for _, st := range h.AppStats() {
		if st.AppID == "1" && st.Triggered != 2 {
			t.Errorf("AppStats' Triggered of app 1 = %d, want 2", st.Triggered)
		}
	}
}

// In cluster mode AppStats counts this node's channels and subscriptions
// as answered by the cluster, and its presence members as the distinct
// users of its own connections on each presence channel; a subscription
// the cluster has not answered yet counts for neither.
func TestAppStatsInClusterModeCountsThisNodesMembers(t *testing.T) {
	h, fc := clusterHub(t)
	for _, user := range []string{"u1", "u1", "u2"} {
		if err := h.Subscribe(connect(t, h, "app"), "presence-room", SubscribeOptions{Member: &Member{UserID: user}}); err != nil {
			t.Fatal(err)
		}
	}
	var answered int
	answerJoins(h, fc, &answered, Snapshot{})
	if err := h.Subscribe(connect(t, h, "app"), "presence-room", SubscribeOptions{Member: &Member{UserID: "u3"}}); err != nil {
		t.Fatal(err)
	}
	got := h.AppStats()
	if want := (AppStats{AppID: "app", Connections: 4, Channels: 1, Subscriptions: 3, PresenceMembers: 2}); len(got) != 1 || got[0] != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
}

// A channel whose last subscriber has left but which is not yet out of the
// registry (as a refused presence subscription leaves it for a moment, and
// a leave between its channel's lock and the registry's) reads as
// unoccupied: in Channel, Channels and AppStats.
func TestAnEmptiedChannelNotYetDroppedReadsUnoccupied(t *testing.T) {
	h := New(zap.NewNop())
	defer h.Close()
	connect(t, h, "1")
	h.app("1", false).lockChannel("presence-room").mu.Unlock()
	if st := h.Channel("1", "presence-room"); st.Occupied {
		t.Fatalf("Channel: %+v, want unoccupied", st)
	}
	if got := h.Channels("1", ""); len(got) != 0 {
		t.Fatalf("Channels: %+v, want none", got)
	}
	if got, want := h.AppStats(), []AppStats{{AppID: "1", Connections: 1}}; !slices.Equal(got, want) {
		t.Fatalf("AppStats: %+v, want %+v", got, want)
	}
}
