package hub

import (
	"slices"
	"testing"

	"go.uber.org/zap"
)

// Take (Drain) appends the queued frames to the buffer it is given and
// keeps what that buffer held.
func TestTakeAppendsToTheBufferItIsGiven(t *testing.T) {
	c := connect(t, New(zap.NewNop()), "1")
	c.Send([]byte("a"))
	got, reason := c.Take([][]byte{[]byte("held")})
	if reason != nil || !slices.EqualFunc(got, []string{"held", "a"}, func(b []byte, s string) bool { return string(b) == s }) {
		t.Fatalf("Take returned %q (close %v), want the buffer's frame then the queued one", got, reason)
	}
}

// Subscription reports a connection's subscription and its presence user;
// in cluster mode only once the cluster has answered it.
func TestSubscriptionReportsOnlyAnsweredSubscriptions(t *testing.T) {
	h := New(zap.NewNop())
	defer h.Close()
	c := connect(t, h, "1")
	subscribe(t, h, c, "presence-room", &Member{UserID: "u1"})
	if user, ok := c.Subscription("presence-room"); !ok || user != "u1" {
		t.Fatalf("alone: Subscription = %q, %v; want u1, subscribed", user, ok)
	}

	hc, fc := clusterHub(t)
	c = connect(t, hc, "1")
	if err := hc.Subscribe(c, "presence-room", SubscribeOptions{Member: &Member{UserID: "u1"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Subscription("presence-room"); ok {
		t.Fatal("clustered: subscribed before the cluster answered")
	}
	var answered int
	answerJoins(hc, fc, &answered, Snapshot{})
	if user, ok := c.Subscription("presence-room"); !ok || user != "u1" {
		t.Fatalf("clustered, answered: Subscription = %q, %v; want u1, subscribed", user, ok)
	}
}
