package hub

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// joinsCluster is a Cluster that records what the hub reports to it (the
// Joins, Leaves, sign-ins, sign-outs and terminations) and answers nothing
// itself: the test hands the hub its answers.
type joinsCluster struct {
	mu         sync.Mutex
	joins      []Join
	leaves     []Leave
	signIns    []SignInRequest
	signOuts   []SignOutRequest
	terminated []string // app/user
	elsewhere  int      // ConnectionsElsewhere's answer
	down       bool     // Publish answers ErrUnavailable
}

func (f *joinsCluster) Join(j Join) {
	f.mu.Lock()
	f.joins = append(f.joins, j)
	f.mu.Unlock()
}

func (f *joinsCluster) Publish(...Message) error {
	if f.down {
		return ErrUnavailable
	}
	return nil
}

func (f *joinsCluster) Leave(l Leave) {
	f.mu.Lock()
	f.leaves = append(f.leaves, l)
	f.mu.Unlock()
}

func (f *joinsCluster) SignIn(r SignInRequest) {
	f.mu.Lock()
	f.signIns = append(f.signIns, r)
	f.mu.Unlock()
}

func (f *joinsCluster) SignOut(r SignOutRequest) {
	f.mu.Lock()
	f.signOuts = append(f.signOuts, r)
	f.mu.Unlock()
}

func (f *joinsCluster) Terminate(appID, userID string) error {
	f.mu.Lock()
	f.terminated = append(f.terminated, appID+"/"+userID)
	f.mu.Unlock()
	return nil
}

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

// clusterHub is a hub in cluster mode on a joinsCluster.
func clusterHub(t *testing.T) (*Hub, *joinsCluster) {
	t.Helper()
	h := New(zap.NewNop())
	t.Cleanup(h.Close)
	fc := &joinsCluster{}
	h.SetCluster(fc)
	return h, fc
}

// answerJoins answers every Join of fc not answered yet with s (its app,
// channel, socket and token those of the Join), and waits for the hub to
// complete them.
func answerJoins(h *Hub, fc *joinsCluster, answered *int, s Snapshot) {
	fc.mu.Lock()
	joins := slices.Clone(fc.joins[*answered:])
	*answered = len(fc.joins)
	fc.mu.Unlock()
	for _, j := range joins {
		s.AppID, s.Channel, s.SocketID, s.Token = j.AppID, j.Channel, j.SocketID, j.Token
		h.ReceiveSnapshot(s)
	}
	h.Flush()
}

// registered reports whether the app's registry on this node holds the
// channel.
func registered(h *Hub, appID, name string) bool {
	a := h.app(appID, false)
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.channels[name] != nil
}

// A hub with a cluster is in cluster mode: Clustered says so, its State is
// the cluster's, and Terminate asks the cluster (every node) to close the
// user's connections rather than closing this node's itself; a hub alone
// closes them, with 4009.
func TestTerminateGoesToTheClusterInClusterMode(t *testing.T) {
	alone := New(zap.NewNop())
	defer alone.Close()
	if alone.Clustered() {
		t.Fatal("a hub without a cluster says it is clustered")
	}
	c := connect(t, alone, "app")
	if err := alone.SignIn(c, "u1", nil); err != nil {
		t.Fatal(err)
	}
	if err := alone.Terminate("app", "u1"); err != nil || c.CloseCode() != CloseTerminated.Code {
		t.Fatalf("alone: Terminate answered %v, the connection's close code %d; want it closed with 4009", err, c.CloseCode())
	}

	h, fc := clusterHub(t)
	if !h.Clustered() || h.State() != State(fc) {
		t.Fatal("a hub with a cluster is not clustered, or answers queries itself")
	}
	c = connect(t, h, "app")
	if err := h.SignIn(c, "u1", nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Terminate("app", "u1"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fc.terminated, []string{"app/u1"}) || c.CloseCode() != 0 {
		t.Fatalf("clustered: the cluster was asked %v, the connection's close code %d; want the cluster asked once, the hub closing nothing itself", fc.terminated, c.CloseCode())
	}
}

// A clustered presence subscription the cluster finds full is refused with
// the frame it was given, and gives its slot of the app's subscription cap
// back, so that another subscription fits.
func TestAFullClusteredChannelGivesTheSubscriptionsSlotBack(t *testing.T) {
	h, fc := clusterHub(t)
	c := connect(t, h, "app")
	refusal := []byte(`{"event":"pusher:subscription_error","channel":"presence-room","data":"{}"}`)
	opts := SubscribeOptions{Member: &Member{UserID: "u1"}, MaxMembers: 1, MaxAppSubscriptions: 1, FullRefusal: refusal}
	if err := h.Subscribe(c, "presence-room", opts); err != nil {
		t.Fatal(err)
	}
	var answered int
	answerJoins(h, fc, &answered, Snapshot{Full: true})
	if got := events(takeFrames(t, c)); got != "pusher:subscription_error" {
		t.Fatalf("the refused subscription got %s, want its refusal", got)
	}
	if n := h.Subscriptions("app"); n != 0 {
		t.Fatalf("%d subscriptions counted after the refusal, want 0", n)
	}
	if _, ok := c.Subscription("presence-room"); ok {
		t.Fatal("the refused subscription stands")
	}
	if err := h.Subscribe(c, "news", SubscribeOptions{MaxAppSubscriptions: 1}); err != nil {
		t.Fatalf("a subscription in the slot given back: %v", err)
	}
}

// In cluster mode each local subscriber leaving a channel is reported to
// the cluster, and the last one takes the channel out of this node's
// registry; one still on it keeps it there.
func TestTheLastLocalSubscriberLeavingDropsTheChannel(t *testing.T) {
	h, fc := clusterHub(t)
	a, b := connect(t, h, "app"), connect(t, h, "app")
	for _, c := range []*Conn{a, b} {
		if err := h.Subscribe(c, "news", SubscribeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var answered int
	answerJoins(h, fc, &answered, Snapshot{})
	if st := h.Channel("app", "news"); st.Subscriptions != 2 {
		t.Fatalf("after both joined: %+v", st)
	}
	h.Unsubscribe(a, "news")
	if !registered(h, "app", "news") {
		t.Fatal("the channel left the registry with a subscriber still on it")
	}
	h.Remove(b)
	if registered(h, "app", "news") {
		t.Fatal("the channel stays in the registry after its last subscriber left")
	}
	want := []Leave{{AppID: "app", Channel: "news", SocketID: a.SocketID()}, {AppID: "app", Channel: "news", SocketID: b.SocketID()}}
	if !slices.Equal(fc.leaves, want) {
		t.Fatalf("leaves reported %+v, want %+v", fc.leaves, want)
	}
}

// A clustered sign-in is reported to the cluster and answered once the
// cluster has it (CompleteSignIn), once: the frames SignIn was given, then
// the state of the watched users as the cluster knows it; a connection
// that watches nobody gets no watchlist frame. An answer for an app or a
// socket this node does not have is dropped.
func TestAClusteredSignInIsAnsweredByTheCluster(t *testing.T) {
	h, fc := clusterHub(t)
	first := EventFrame("pusher:signin_success", "", "{}", "")
	watcher, plain := connect(t, h, "app"), connect(t, h, "app")
	if err := h.SignIn(watcher, "u1", []string{"u2", "u3"}, first); err != nil {
		t.Fatal(err)
	}
	if err := h.SignIn(plain, "u4", nil, first); err != nil {
		t.Fatal(err)
	}
	want := []SignInRequest{{AppID: "app", SocketID: watcher.SocketID(), UserID: "u1", Watchlist: []string{"u2", "u3"}}, {AppID: "app", SocketID: plain.SocketID(), UserID: "u4"}}
	if !slices.EqualFunc(fc.signIns, want, func(x, y SignInRequest) bool {
		return x.AppID == y.AppID && x.SocketID == y.SocketID && x.UserID == y.UserID && slices.Equal(x.Watchlist, y.Watchlist)
	}) {
		t.Fatalf("sign-ins reported %+v, want %+v", fc.signIns, want)
	}
	if got := takeFrames(t, watcher); len(got) != 0 {
		t.Fatalf("answered before the cluster: %s", events(got))
	}
	h.CompleteSignIn("other-app", watcher.SocketID(), nil)
	h.CompleteSignIn("app", "1.2", nil)
	h.CompleteSignIn("app", watcher.SocketID(), []string{"u2", "u9"})
	h.CompleteSignIn("app", plain.SocketID(), []string{"u2"})
	h.CompleteSignIn("app", watcher.SocketID(), nil) // answered already
	got := takeFrames(t, watcher)
	if events(got) != "pusher:signin_success,pusher_internal:watchlist_events" || !slices.Equal(watchlistEvents(t, got), []string{"online:u2 offline:u3"}) {
		t.Fatalf("the watcher got %s %v, want its sign-in answer, then u2 online and u3 offline", events(got), watchlistEvents(t, got))
	}
	if got := events(takeFrames(t, plain)); got != "pusher:signin_success" {
		t.Fatalf("the connection watching nobody got %s, want its sign-in answer alone", got)
	}
}

// UserOnline, the cluster's word that a user's first connection anywhere
// came or its last went, reaches this node's watchers of that user only.
func TestUserOnlineTellsThisNodesWatchers(t *testing.T) {
	h, _ := clusterHub(t)
	watcher, other := connect(t, h, "app"), connect(t, h, "app")
	for c, watched := range map[*Conn]string{watcher: "u2", other: "u3"} {
		if err := h.SignIn(c, "u-"+watched, []string{watched}); err != nil {
			t.Fatal(err)
		}
		h.CompleteSignIn("app", c.SocketID(), nil)
		takeFrames(t, c)
	}
	h.UserOnline("app", "u2", true)
	h.UserOnline("app", "u2", false)
	h.UserOnline("other-app", "u2", true) // no watcher here
	if got := watchlistEvents(t, takeFrames(t, watcher)); !slices.Equal(got, []string{"online:u2", "offline:u2"}) {
		t.Fatalf("the watcher of u2 got %v, want u2 online then offline", got)
	}
	if got := takeFrames(t, other); len(got) != 0 {
		t.Fatalf("the watcher of u3 got %s", events(got))
	}
}

// Removing a connection in cluster mode releases its slot and, when it was
// signed in, reports its sign-out (one that never signed in reports none)
// and takes it out of this node's user index: the user stays signed in
// here while another of its connections is.
func TestRemovingClusteredConnectionsSignsTheirUserOut(t *testing.T) {
	h, fc := clusterHub(t)
	a, b, anon := connect(t, h, "app"), connect(t, h, "app"), connect(t, h, "app")
	for _, c := range []*Conn{a, b} {
		if err := h.SignIn(c, "u1", nil); err != nil {
			t.Fatal(err)
		}
	}
	h.Remove(anon)
	h.Remove(a)
	if !h.SignedIn("app", "u1") || h.TerminateUser("app", "u1") != 1 {
		t.Fatal("u1 is not signed in here with its second connection still on")
	}
	h.Remove(b)
	if h.SignedIn("app", "u1") {
		t.Fatal("u1 is signed in here after its last connection went")
	}
	want := []SignOutRequest{{AppID: "app", SocketID: a.SocketID(), UserID: "u1"}, {AppID: "app", SocketID: b.SocketID(), UserID: "u1"}}
	if !slices.Equal(fc.signOuts, want) {
		t.Fatalf("sign-outs reported %+v, want %+v", fc.signOuts, want)
	}
	if n := h.Connections("app"); n != 0 {
		t.Fatalf("%d connections left, want 0", n)
	}
}

// LocalConnections, which the node's heartbeat carries, counts this node's
// connections by app and leaves out an app whose connections have all gone.
func TestLocalConnectionsCountsThisNodesConnectionsByApp(t *testing.T) {
	h, _ := clusterHub(t)
	connect(t, h, "a")
	connect(t, h, "a")
	h.Remove(connect(t, h, "b"))
	if got, want := h.LocalConnections(), map[string]int{"a": 2}; !maps.Equal(got, want) {
		t.Fatalf("LocalConnections() = %v, want %v", got, want)
	}
}

// Share, from which the cluster rebuilds its record of this node, lists
// every subscription of its connections (pending until the cluster
// answered it) with the presence member and the app's member cap, and the
// sign-in of each signed-in connection only (pending until answered).
func TestShareListsThisNodesSubscriptionsAndSignIns(t *testing.T) {
	h, fc := clusterHub(t)
	a, b := connect(t, h, "app"), connect(t, h, "app")
	name := map[string]string{a.SocketID(): "a", b.SocketID(): "b"}
	var answered int
	if err := h.Subscribe(a, "news", SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	answerJoins(h, fc, &answered, Snapshot{})
	if err := h.Subscribe(a, "presence-room", SubscribeOptions{Member: &Member{UserID: "u1", Info: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := h.Subscribe(b, "news", SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.SignIn(a, "u1", []string{"u2"}); err != nil {
		t.Fatal(err)
	}
	entries, signins := h.Share(func(appID string) int { return 7 })
	var got []string
	for _, e := range entries {
		got = append(got, fmt.Sprintf("%s %s %s user=%q info=%s max=%d pending=%v", e.AppID, name[e.SocketID], e.Channel, e.UserID, e.Info, e.MaxMembers, e.Pending))
	}
	slices.Sort(got)
	want := []string{
		`app a news user="" info= max=7 pending=false`,
		`app a presence-room user="u1" info={} max=7 pending=true`,
		`app b news user="" info= max=7 pending=true`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Share's subscriptions\n%s\nwant\n%s", got, want)
	}
	if len(signins) != 1 || name[signins[0].SocketID] != "a" || signins[0].UserID != "u1" || !slices.Equal(signins[0].Watchlist, []string{"u2"}) || !signins[0].Pending {
		t.Fatalf("Share's sign-ins %+v, want a's, as u1 watching u2, pending", signins)
	}
}
