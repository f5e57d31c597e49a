package hub

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// frame is a decoded server frame.
type frame struct {
	Event   string `json:"event"`
	Channel string `json:"channel"`
	Data    string `json:"data"`
	UserID  string `json:"user_id"`
}

// takeFrames returns every frame queued for c, decoded.
func takeFrames(t *testing.T, c *Conn) []frame {
	t.Helper()
	raw, reason := c.Take(nil)
	if reason != nil {
		t.Fatalf("connection %s is closing: %v", c.SocketID(), *reason)
	}
	out := make([]frame, len(raw))
	for i, b := range raw {
		if err := json.Unmarshal(b, &out[i]); err != nil {
			t.Fatalf("frame %q is not JSON: %v", b, err)
		}
	}
	return out
}

func events(fs []frame) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.Event
	}
	return strings.Join(names, ",")
}

func connect(t *testing.T, h *Hub, appID string) *Conn {
	t.Helper()
	c, err := h.Connect(appID, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func subscribe(t *testing.T, h *Hub, c *Conn, name string, m *Member) {
	t.Helper()
	if err := h.Subscribe(c, name, SubscribeOptions{Member: m}); err != nil {
		t.Fatalf("subscribe %s: %v", name, err)
	}
}

func TestSubscribePublishUnsubscribe(t *testing.T) {
	h := New(zap.NewNop())
	a, b := connect(t, h, "1"), connect(t, h, "1")
	subscribe(t, h, a, "news", nil)
	subscribe(t, h, b, "news", nil)
	if got := events(takeFrames(t, a)); got != "pusher_internal:subscription_succeeded" {
		t.Fatalf("a got %s", got)
	}
	takeFrames(t, b)

	h.publishNow(Message{AppID: "1", Channel: "news", Event: "e", Data: `{"x":"<\"1\">"}`, ExcludeSocketID: b.SocketID()})
	got := takeFrames(t, a)
	if len(got) != 1 || got[0] != (frame{Event: "e", Channel: "news", Data: `{"x":"<\"1\">"}`}) {
		t.Fatalf("a got %+v", got)
	}
	if got := takeFrames(t, b); len(got) != 0 {
		t.Fatalf("excluded socket got %+v", got)
	}
	if st := h.Channel("1", "news"); !st.Occupied || st.Subscriptions != 2 || st.Users != 0 {
		t.Fatalf("stats %+v", st)
	}

	if !h.Unsubscribe(a, "news") || h.Unsubscribe(a, "news") {
		t.Fatal("unsubscribe should succeed once")
	}
	h.publishNow(Message{AppID: "1", Channel: "news", Event: "e", Data: "2"})
	if got := takeFrames(t, a); len(got) != 0 {
		t.Fatalf("unsubscribed conn got %+v", got)
	}
	h.Remove(b)
	if st := h.Channel("1", "news"); st.Occupied || st.Subscriptions != 0 {
		t.Fatalf("stats after everyone left: %+v", st)
	}
	if n := len(h.Channels("1", "")); n != 0 {
		t.Fatalf("%d channels left", n)
	}
	if got := h.Connections("1"); got != 1 {
		t.Fatalf("connections: got %d, want 1", got)
	}
}

func TestDuplicateSubscribeAnswersAgain(t *testing.T) {
	h := New(zap.NewNop())
	c := connect(t, h, "1")
	subscribe(t, h, c, "news", nil)
	subscribe(t, h, c, "news", nil)
	if got := events(takeFrames(t, c)); got != "pusher_internal:subscription_succeeded,pusher_internal:subscription_succeeded" {
		t.Fatalf("got %s", got)
	}
	if st := h.Channel("1", "news"); st.Subscriptions != 1 {
		t.Fatalf("subscriptions: got %d, want 1", st.Subscriptions)
	}
	h.publishNow(Message{AppID: "1", Channel: "news", Event: "e", Data: "x"})
	if got := takeFrames(t, c); len(got) != 1 {
		t.Fatalf("got %d frames, want 1", len(got))
	}
}

func TestPresenceMembers(t *testing.T) {
	h := New(zap.NewNop())
	alice1, alice2, bob := connect(t, h, "1"), connect(t, h, "1"), connect(t, h, "1")
	ch := "presence-room"
	subscribe(t, h, alice1, ch, &Member{UserID: "alice", Info: json.RawMessage(`{"name":"Alice"}`)})
	got := takeFrames(t, alice1)
	var data struct {
		Presence struct {
			IDs   []string                   `json:"ids"`
			Hash  map[string]json.RawMessage `json:"hash"`
			Count int                        `json:"count"`
		} `json:"presence"`
	}
	if err := json.Unmarshal([]byte(got[0].Data), &data); err != nil {
		t.Fatal(err)
	}
	if data.Presence.Count != 1 || data.Presence.IDs[0] != "alice" || string(data.Presence.Hash["alice"]) != `{"name":"Alice"}` {
		t.Fatalf("succeeded data %s", got[0].Data)
	}

	subscribe(t, h, bob, ch, &Member{UserID: "bob"})
	if got := takeFrames(t, alice1); len(got) != 1 || got[0].Event != "pusher_internal:member_added" || got[0].Data != `{"user_id":"bob","user_info":null}` {
		t.Fatalf("alice got %+v", got)
	}
	if got := takeFrames(t, bob); !strings.Contains(got[0].Data, `"count":2`) {
		t.Fatalf("bob's succeeded: %s", got[0].Data)
	}

	// A second connection of alice is not a new member.
	subscribe(t, h, alice2, ch, &Member{UserID: "alice", Info: json.RawMessage(`{"name":"Alice"}`)})
	if got := takeFrames(t, bob); len(got) != 0 {
		t.Fatalf("bob got %+v for alice's second tab", got)
	}
	if st := h.Channel("1", ch); st.Users != 2 || st.Subscriptions != 3 {
		t.Fatalf("stats %+v", st)
	}
	if got := strings.Join(h.PresenceUsers("1", ch), ","); got != "alice,bob" {
		t.Fatalf("users %s", got)
	}

	h.Remove(alice1)
	if got := takeFrames(t, bob); len(got) != 0 {
		t.Fatalf("bob got %+v while alice still has a tab", got)
	}
	h.Unsubscribe(alice2, ch)
	if got := takeFrames(t, bob); len(got) != 1 || got[0].Event != "pusher_internal:member_removed" || got[0].Data != `{"user_id":"alice"}` {
		t.Fatalf("bob got %+v", got)
	}
}

func TestPresenceMemberLimit(t *testing.T) {
	h := New(zap.NewNop())
	for i := 0; i < 2; i++ {
		c := connect(t, h, "1")
		if err := h.Subscribe(c, "presence-x", SubscribeOptions{Member: &Member{UserID: fmt.Sprint(i)}, MaxMembers: 2}); err != nil {
			t.Fatal(err)
		}
	}
	c := connect(t, h, "1")
	if err := h.Subscribe(c, "presence-x", SubscribeOptions{Member: &Member{UserID: "late"}, MaxMembers: 2}); err != ErrPresenceFull {
		t.Fatalf("got %v, want ErrPresenceFull", err)
	}
	// An existing member's further connection still fits.
	if err := h.Subscribe(c, "presence-x", SubscribeOptions{Member: &Member{UserID: "0"}, MaxMembers: 2}); err != nil {
		t.Fatal(err)
	}
}

func TestCacheChannel(t *testing.T) {
	h := New(zap.NewNop())
	now := time.Unix(1000, 0)
	h.now = func() time.Time { return now }

	c := connect(t, h, "1")
	subscribe(t, h, c, "cache-x", nil)
	if got := events(takeFrames(t, c)); got != "pusher_internal:subscription_succeeded,pusher:cache_miss" {
		t.Fatalf("got %s", got)
	}
	h.publishNow(Message{AppID: "1", Channel: "cache-x", Event: "price", Data: "42", Cache: true})
	h.publishNow(Message{AppID: "1", Channel: "cache-y", Event: "price", Data: "7", Cache: true}) // nobody subscribed
	takeFrames(t, c)

	late := connect(t, h, "1")
	subscribe(t, h, late, "cache-y", nil)
	got := takeFrames(t, late)
	if len(got) != 2 || got[1] != (frame{Event: "price", Channel: "cache-y", Data: "7"}) {
		t.Fatalf("late subscriber got %+v", got)
	}
	if data, ttl, ok := h.CachedEvent("1", "cache-x"); !ok || data != "42" || ttl != CacheTTL {
		t.Fatalf("cached %q %v %v", data, ttl, ok)
	}
	now = now.Add(CacheTTL)
	if _, _, ok := h.CachedEvent("1", "cache-x"); ok {
		t.Fatal("cache did not expire")
	}
	h.SweepCache()
	if n := len(h.app("1", false).cache); n != 0 {
		t.Fatalf("%d cache entries after sweep", n)
	}
}

// SignIn queues the sign-in answer itself, after registering the user and
// before the watchlist's state: a client that hears pusher:signin_success
// is online already for a watcher that signs in next.
func TestSignInQueuesTheAnswerOnceRegistered(t *testing.T) {
	h := New(zap.NewNop())
	bob, alice := connect(t, h, "1"), connect(t, h, "1")
	if err := h.SignIn(bob, "bob", nil, JSONFrame("pusher:signin_success", "", struct{}{})); err != nil {
		t.Fatal(err)
	}
	if got := events(takeFrames(t, bob)); got != "pusher:signin_success" {
		t.Fatalf("bob got %s", got)
	}
	answer := [][]byte{JSONFrame("pusher:signin_success", "", struct{}{}), JSONFrame("pusher:error", "", struct{}{})}
	if err := h.SignIn(alice, "alice", []string{"bob", "carol"}, answer...); err != nil {
		t.Fatal(err)
	}
	got := takeFrames(t, alice)
	if events(got) != "pusher:signin_success,pusher:error,pusher_internal:watchlist_events" {
		t.Fatalf("alice got %s", events(got))
	}
	if !strings.Contains(got[2].Data, `"online","user_ids":["bob"]`) {
		t.Fatalf("watchlist state %s: want bob online", got[2].Data)
	}
	// A refused sign-in queues nothing.
	if err := h.SignIn(alice, "alice", nil, answer...); err == nil {
		t.Fatal("second sign-in accepted")
	}
	if got := takeFrames(t, alice); len(got) != 0 {
		t.Fatalf("a refused sign-in queued %s", events(got))
	}
}

func TestTerminateUser(t *testing.T) {
	h := New(zap.NewNop())
	a1, a2, b := connect(t, h, "1"), connect(t, h, "1"), connect(t, h, "1")
	for _, c := range []*Conn{a1, a2} {
		if err := h.SignIn(c, "alice", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.SignIn(b, "bob", nil); err != nil {
		t.Fatal(err)
	}
	if err := h.SignIn(b, "bob", nil); err == nil {
		t.Fatal("second sign-in accepted")
	}
	if n := h.TerminateUser("1", "alice"); n != 2 {
		t.Fatalf("terminated %d, want 2", n)
	}
	for _, c := range []*Conn{a1, a2} {
		if _, reason := c.Take(nil); reason == nil || reason.Code != 4009 {
			t.Fatalf("alice's conn: reason %v", reason)
		}
	}
	if _, reason := b.Take(nil); reason != nil {
		t.Fatalf("bob closed: %v", reason)
	}
	if n := h.TerminateUser("other-app", "alice"); n != 0 {
		t.Fatalf("terminated %d in an unknown app", n)
	}
}

func TestSignedIn(t *testing.T) {
	h := New(zap.NewNop())
	signedIn := func(app, user string) bool {
		t.Helper()
		on, err := h.State().SignedIn(app, user)
		if err != nil {
			t.Fatal(err)
		}
		if on != h.SignedIn(app, user) {
			t.Fatalf("State().SignedIn(%s, %s) = %v, Hub.SignedIn says otherwise", app, user, on)
		}
		return on
	}
	a1, a2 := connect(t, h, "1"), connect(t, h, "1")
	subscribe(t, h, a1, "news", nil) // connected and subscribed, not signed in
	if signedIn("1", "alice") {
		t.Fatal("alice online before signing in")
	}
	for _, c := range []*Conn{a1, a2} {
		if err := h.SignIn(c, "alice", nil); err != nil {
			t.Fatal(err)
		}
	}
	if !signedIn("1", "alice") || signedIn("1", "bob") || signedIn("2", "alice") || signedIn("unknown", "alice") {
		t.Fatal("online: want alice of app 1 only")
	}
	h.Remove(a1)
	if !signedIn("1", "alice") {
		t.Fatal("alice offline with a connection left")
	}
	h.Remove(a2)
	if signedIn("1", "alice") {
		t.Fatal("alice online after her last connection left")
	}
}

func TestConnectionQuota(t *testing.T) {
	h := New(zap.NewNop())
	c1, err := h.Connect("1", ConnectOptions{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Connect("1", ConnectOptions{MaxConns: 1}); err != ErrOverQuota {
		t.Fatalf("got %v, want ErrOverQuota", err)
	}
	h.Remove(c1)
	h.Remove(c1) // idempotent
	if _, err := h.Connect("1", ConnectOptions{MaxConns: 1}); err != nil {
		t.Fatalf("after remove: %v", err)
	}
}

func TestSlowConsumerIsClosedOthersKeepReceiving(t *testing.T) {
	h := New(zap.NewNop())
	slow, err := h.Connect("1", ConnectOptions{MaxQueueBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	fast := connect(t, h, "1")
	subscribe(t, h, slow, "c", nil)
	subscribe(t, h, fast, "c", nil)
	takeFrames(t, fast)
	data := strings.Repeat("x", 1000)
	for i := 0; i < 10; i++ {
		h.publishNow(Message{AppID: "1", Channel: "c", Event: "e", Data: data})
		if got := takeFrames(t, fast); len(got) != 1 {
			t.Fatalf("fast got %d frames", len(got))
		}
	}
	if _, reason := slow.Take(nil); reason == nil || reason.Code != 4100 {
		t.Fatalf("slow consumer reason %v, want 4100", reason)
	}
}

func TestChannelsListFilterAndSort(t *testing.T) {
	h := New(zap.NewNop())
	c := connect(t, h, "1")
	for _, name := range []string{"presence-b", "news", "presence-a"} {
		var m *Member
		if IsPresence(name) {
			m = &Member{UserID: "u"}
		}
		subscribe(t, h, c, name, m)
	}
	var names []string
	for _, st := range h.Channels("1", "presence-") {
		names = append(names, fmt.Sprintf("%s:%d", st.Name, st.Users))
	}
	if got := strings.Join(names, ","); got != "presence-a:1,presence-b:1" {
		t.Fatalf("got %s", got)
	}
	if n := len(h.Channels("1", "")); n != 3 {
		t.Fatalf("got %d channels, want 3", n)
	}
}

// Subscribes, unsubscribes, publishes and removals from many goroutines at
// once; run with -race. Afterwards the registry must be empty.
func TestConcurrentRegistry(t *testing.T) {
	h := New(zap.NewNop())
	const workers, rounds = 8, 200
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(2)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				c, _ := h.Connect("1", ConnectOptions{})
				name := fmt.Sprintf("presence-%d", i%3)
				_ = h.Subscribe(c, name, SubscribeOptions{Member: &Member{UserID: fmt.Sprint(w)}})
				_ = h.Subscribe(c, "cache-news", SubscribeOptions{})
				if i%2 == 0 {
					h.Unsubscribe(c, name)
				}
				c.Take(nil)
				h.Remove(c)
			}
		}(w)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				h.Publish(Message{AppID: "1", Channel: "cache-news", Event: "e", Data: "d", Cache: true})
				h.Publish(Message{AppID: "1", Channel: fmt.Sprintf("presence-%d", i%3), Event: "e", Data: "d"})
				h.Channels("1", "")
				h.PresenceUsers("1", "presence-0")
			}
		}()
	}
	wg.Wait()
	if chans := h.Channels("1", ""); len(chans) != 0 {
		t.Fatalf("channels left: %+v", chans)
	}
	if n := h.Connections("1"); n != 0 {
		t.Fatalf("%d connections left", n)
	}
	a := h.app("1", false)
	if len(a.channels) != 0 || len(a.users) != 0 {
		t.Fatalf("registry not empty: %d channels, %d users", len(a.channels), len(a.users))
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\s`, "\n\r\t\x00\x1f", "é✓😀", "\xff\xfe", "\u2028\u2029", "<script>&"} {
		b := AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q encoded as invalid JSON %s: %v", s, b, err)
		}
		if want := replaceInvalidUTF8(s); back != want {
			t.Fatalf("round trip of %q: got %q", s, back)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("hello \"world\"\n")
	f.Add("\xff\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		var back string
		if err := json.Unmarshal(AppendJSONString(nil, s), &back); err != nil {
			t.Fatalf("invalid JSON for %q: %v", s, err)
		}
		if want := replaceInvalidUTF8(s); back != want {
			t.Fatalf("round trip of %q: got %q, want %q", s, back, want)
		}
	})
}

func TestValidChannelName(t *testing.T) {
	for name, want := range map[string]bool{
		"a":                            true,
		"private-encrypted-x_y-z=@,.;": true,
		"#server-to-user-42":           true,
		strings.Repeat("a", 200):       true,
		"":                             false,
		strings.Repeat("a", 201):       false,
		"has space":                    false,
		"#server-to-user-":             false,
		"#other":                       false,
		"ünïcode":                      false,
		"#server-to-user-" + strings.Repeat("a", 185): false,
	} {
		if got := ValidChannelName(name); got != want {
			t.Errorf("ValidChannelName(%q) = %v, want %v", name, got, want)
		}
	}
}

// replaceInvalidUTF8 replaces each invalid byte with U+FFFD, as encoding/json does.
func replaceInvalidUTF8(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r) // ranging yields U+FFFD for each invalid byte
	}
	return b.String()
}

func nopLogger() *zap.Logger { return zap.NewNop() }

// recorder is an Observer that keeps the kinds it sees.
type recorder struct {
	mu    sync.Mutex
	kinds []string
}

func (r *recorder) Observe(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kinds = append(r.kinds, string(ev.Kind)+":"+ev.UserID)
}

func TestObserverSeesOccupiedBeforeMembers(t *testing.T) {
	h := New(zap.NewNop())
	rec := &recorder{}
	h.SetObserver(rec)
	a, b := connect(t, h, "1"), connect(t, h, "1")
	subscribe(t, h, a, "presence-x", &Member{UserID: "alice"})
	subscribe(t, h, b, "presence-x", &Member{UserID: "bob"})
	h.Remove(b)
	h.Unsubscribe(a, "presence-x")
	want := "channel_occupied: member_added:alice member_added:bob member_removed:bob member_removed:alice channel_vacated:"
	if got := strings.Join(rec.kinds, " "); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestSubscriptionCountThrottledOnBigChannels(t *testing.T) {
	h := New(nopLogger())
	now := time.Unix(1000, 0)
	h.now = func() time.Time { return now }
	h.SetSubscriptionCount("1", true)
	var conns []*Conn
	for i := 0; i <= CountThrottleAbove+1; i++ {
		c, _ := h.Connect("1", ConnectOptions{})
		if err := h.Subscribe(c, "big", SubscribeOptions{}); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	countFrames := func(c *Conn) int {
		frames, _ := c.Take(nil)
		n := 0
		for _, f := range frames {
			if strings.Contains(string(f), "subscription_count") {
				n++
			}
		}
		return n
	}
	// The first 100 joins each sent a count; the joins beyond 100
	// subscribers, within 5 s of the last count, are held back.
	if got := countFrames(conns[0]); got != CountThrottleAbove {
		t.Fatalf("first subscriber saw %d counts, want %d", got, CountThrottleAbove)
	}
	a := h.app("1", false)
	a.mu.RLock()
	ch := a.channels["big"]
	a.mu.RUnlock()
	ch.mu.RLock()
	pending := ch.countTimer != nil
	ch.mu.RUnlock()
	if !pending {
		t.Fatal("no throttled count pending")
	}
	now = now.Add(CountThrottleEvery)
	h.flushCount(a, ch)
	if got := countFrames(conns[0]); got != 1 {
		t.Fatalf("after the throttle window: %d counts, want 1", got)
	}
}

// publishNow publishes m and waits until it is queued to the subscribers.
func (h *Hub) publishNow(m Message) {
	h.Publish(m)
	h.Flush()
}

// watchlistEvents decodes the pusher_internal:watchlist_events frames of fs
// as "online:a,b offline:c" per frame.
func watchlistEvents(t *testing.T, fs []frame) []string {
	t.Helper()
	var out []string
	for _, f := range fs {
		if f.Event != "pusher_internal:watchlist_events" {
			continue
		}
		var d struct {
			Events []struct {
				Name    string   `json:"name"`
				UserIDs []string `json:"user_ids"`
			} `json:"events"`
		}
		if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
			t.Fatal(err)
		}
		var groups []string
		for _, e := range d.Events {
			groups = append(groups, e.Name+":"+strings.Join(e.UserIDs, ","))
		}
		out = append(out, strings.Join(groups, " "))
	}
	return out
}

// A watcher learns on sign-in which watched users are online and which are
// not (a group left out when empty), then each user's first connection
// coming and last one going. A connection without a watchlist gets none.
func TestWatchlist(t *testing.T) {
	h := New(zap.NewNop())
	bob := connect(t, h, "1")
	if err := h.SignIn(bob, "bob", nil); err != nil {
		t.Fatal(err)
	}
	if got := watchlistEvents(t, takeFrames(t, bob)); len(got) != 0 {
		t.Fatalf("no watchlist, yet %v", got)
	}
	alice := connect(t, h, "1")
	if err := h.SignIn(alice, "alice", []string{"bob", "carol"}); err != nil {
		t.Fatal(err)
	}
	watcher := connect(t, h, "1")
	if err := h.SignIn(watcher, "dave", []string{"carol"}); err != nil {
		t.Fatal(err)
	}
	onlyOnline := connect(t, h, "1")
	if err := h.SignIn(onlyOnline, "erin", []string{"bob"}); err != nil {
		t.Fatal(err)
	}
	carol1, carol2 := connect(t, h, "1"), connect(t, h, "1")
	for _, c := range []*Conn{carol1, carol2} {
		if err := h.SignIn(c, "carol", nil); err != nil {
			t.Fatal(err)
		}
	}
	h.Remove(carol1) // carol still has a connection
	h.Remove(carol2)
	h.Remove(bob)
	for _, tc := range []struct {
		c    *Conn
		want string
	}{
		{alice, "online:bob offline:carol|online:carol|offline:carol|offline:bob"},
		{watcher, "offline:carol|online:carol|offline:carol"},
		{onlyOnline, "online:bob|offline:bob"},
	} {
		if got := strings.Join(watchlistEvents(t, takeFrames(t, tc.c)), "|"); got != tc.want {
			t.Errorf("%s saw %s, want %s", tc.c.UserID(), got, tc.want)
		}
	}
	// A watcher going leaves the others watching.
	h.Remove(alice)
	carol3 := connect(t, h, "1")
	if err := h.SignIn(carol3, "carol", nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(watchlistEvents(t, takeFrames(t, watcher)), "|"); got != "online:carol" {
		t.Errorf("after another watcher went, dave saw %q, want online:carol", got)
	}
	// The watchers are forgotten with their connections.
	h.Remove(carol3)
	h.Remove(watcher)
	h.Remove(onlyOnline)
	a := h.app("1", false)
	a.usersMu.Lock()
	defer a.usersMu.Unlock()
	if len(a.users) != 0 || len(a.watchers) != 0 {
		t.Fatalf("users %v and watchers %v left after every connection went", a.users, a.watchers)
	}
}

// member_added carries the member's user_info, null when it has none.
func TestMemberAddedUserInfo(t *testing.T) {
	h := New(zap.NewNop())
	first := connect(t, h, "1")
	subscribe(t, h, first, "presence-r", &Member{UserID: "u1"})
	takeFrames(t, first)
	subscribe(t, h, connect(t, h, "1"), "presence-r", &Member{UserID: "u2", Info: json.RawMessage(`{"name":"Two"}`)})
	subscribe(t, h, connect(t, h, "1"), "presence-r", &Member{UserID: "u3"})
	var got []string
	for _, f := range takeFrames(t, first) {
		if f.Event == "pusher_internal:member_added" {
			got = append(got, f.Data)
		}
	}
	if want := `{"user_id":"u2","user_info":{"name":"Two"}}|{"user_id":"u3","user_info":null}`; strings.Join(got, "|") != want {
		t.Fatalf("member_added %s, want %s", strings.Join(got, "|"), want)
	}
}
