package hub

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// joinsCluster is a Cluster that records the Joins and answers nothing
// itself: the test hands the hub its answers.
type joinsCluster struct {
	mu        sync.Mutex
	joins     []Join
	elsewhere int // ConnectionsElsewhere's answer
}

func (f *joinsCluster) Join(j Join) {
	f.mu.Lock()
	f.joins = append(f.joins, j)
	f.mu.Unlock()
}
func (f *joinsCluster) Publish(...Message) error                     { return nil }
func (f *joinsCluster) Leave(Leave)                                  {}
func (f *joinsCluster) SignIn(SignInRequest)                         {}
func (f *joinsCluster) SignOut(SignOutRequest)                       {}
func (f *joinsCluster) Terminate(string, string) error               { return nil }
func (f *joinsCluster) ConnectionsElsewhere(string) int              { return f.elsewhere }
func (f *joinsCluster) Channel(string, string) (ChannelStats, error) { return ChannelStats{}, nil }
func (f *joinsCluster) Channels(string, string) ([]ChannelStats, error) {
	return nil, nil
}
func (f *joinsCluster) PresenceUsers(string, string) ([]string, error) { return nil, nil }
func (f *joinsCluster) CachedEvent(string, string) (string, time.Duration, bool, error) {
	return "", 0, false, nil
}
func (f *joinsCluster) Connections(string) (int, error)       { return 0, nil }
func (f *joinsCluster) SignedIn(string, string) (bool, error) { return false, nil }

// The cluster's answer to a subscription completes that subscription only:
// when the connection unsubscribed and subscribed again before it came,
// the first answer (here: the channel was full) does not stand for the
// second subscription, which waits for its own.
func TestClusterAnswerCompletesOnlyItsOwnSubscription(t *testing.T) {
	h := New(zap.NewNop())
	defer h.Close()
	fc := &joinsCluster{}
	h.SetCluster(fc)
	c, err := h.Connect("app", ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const ch = "presence-room"
	opts := SubscribeOptions{Member: &Member{UserID: "u1", Info: []byte(`{}`)}, MaxMembers: 1, FullRefusal: []byte(`{"event":"pusher:subscription_error","channel":"presence-room","data":"{}"}`)}
	if err := h.Subscribe(c, ch, opts); err != nil {
		t.Fatal(err)
	}
	h.Unsubscribe(c, ch)
	if err := h.Subscribe(c, ch, opts); err != nil {
		t.Fatal(err)
	}
	if len(fc.joins) != 2 || fc.joins[0].Token == fc.joins[1].Token {
		t.Fatalf("joins %+v: want two with different tokens", fc.joins)
	}
	first, second := fc.joins[0], fc.joins[1]
	h.ReceiveSnapshot(Snapshot{AppID: "app", Channel: ch, SocketID: c.SocketID(), Token: first.Token, Full: true})
	h.Flush()
	if got := takeFrames(t, c); len(got) != 0 {
		t.Fatalf("the first subscription's answer reached the second: %s", events(got))
	}
	h.ReceiveSnapshot(Snapshot{AppID: "app", Channel: ch, SocketID: c.SocketID(), Token: second.Token, Members: []MemberInfo{{UserID: "u1", Info: []byte(`{}`)}}})
	h.Flush()
	if got := events(takeFrames(t, c)); got != "pusher_internal:subscription_succeeded" {
		t.Fatalf("after its own answer: %s", got)
	}
}

// In cluster mode an app's connection quota counts the other nodes'
// connections, and a subscription's leave gives its slot of the app's
// subscription cap back.
func TestClusterQuotas(t *testing.T) {
	h := New(zap.NewNop())
	defer h.Close()
	h.SetCluster(&joinsCluster{elsewhere: 2})
	c, err := h.Connect("app", ConnectOptions{MaxConns: 3})
	if err != nil {
		t.Fatalf("the third connection of the cluster: %v", err)
	}
	if _, err := h.Connect("app", ConnectOptions{MaxConns: 3}); err != ErrOverQuota {
		t.Fatalf("the fourth connection of the cluster: %v, want ErrOverQuota", err)
	}
	opts := SubscribeOptions{MaxAppSubscriptions: 1}
	if err := h.Subscribe(c, "one", opts); err != nil {
		t.Fatal(err)
	}
	h.Unsubscribe(c, "one")
	if err := h.Subscribe(c, "two", opts); err != nil {
		t.Fatalf("a subscription after the only one left: %v", err)
	}
	if err := h.Subscribe(c, "three", opts); err != ErrTooManySubscriptions {
		t.Fatalf("a second at once: %v, want ErrTooManySubscriptions", err)
	}
}

// The webhook hold of channel_vacated and member_removed is 3 s (DESIGN.md,
// webhooks); the webhook dispatcher and the cluster both take it from here.
func TestWebhookHold(t *testing.T) {
	if WebhookHold != 3*time.Second {
		t.Fatalf("WebhookHold is %v, want 3s", WebhookHold)
	}
}
