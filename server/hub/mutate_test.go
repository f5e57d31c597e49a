package hub

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// Tests that kill mutants gremlins found alive (make mutate); the
// equivalent ones are listed in scripts/mutate-equivalent.md.

// A connection's queue takes frames up to its byte bound exactly; one byte
// more closes it with 4100.
func TestQueueBoundInclusive(t *testing.T) {
	h := New(zap.NewNop())
	c, err := h.Connect("1", ConnectOptions{MaxQueueBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	if c.CloseCode() != 0 {
		t.Fatalf("an open connection has close code %d", c.CloseCode())
	}
	if !c.Send([]byte("123456")) || !c.Send([]byte("7890")) {
		t.Fatal("frames of 10 bytes in all refused by a 10-byte queue")
	}
	if c.Send([]byte("x")) || c.CloseCode() != 4100 {
		t.Fatalf("the 11th byte: queue kept it or closed with %d, want 4100", c.CloseCode())
	}
}

// Frames are the JSON encoding/json would write (without HTML escaping):
// the user id when there is one, fields of any length, every string escaped
// as little as JSON allows and invalid UTF-8 replaced by U+FFFD.
func TestEventFrameBytes(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		event, channel, data, userID string
		want                         string
	}{
		{"e", "c", "d", "u", `{"event":"e","channel":"c","data":"d","user_id":"u"}`},
		{"e", "", "d", "", `{"event":"e","data":"d"}`},
		{long, "", "", "", `{"event":"` + long + `","data":""}`},
		{"e", long, "", "", `{"event":"e","channel":"` + long + `","data":""}`},
		{"e", "c", long, "", `{"event":"e","channel":"c","data":"` + long + `"}`},
		{"e", "c", "", long, `{"event":"e","channel":"c","data":"","user_id":"` + long + `"}`},
		{"e", "c", "a b~\x7f<>&", "", "{\"event\":\"e\",\"channel\":\"c\",\"data\":\"a b~\x7f<>&\"}"},
		{"e", "c", "\x80|a\xffb|\xc3", "", `{"event":"e","channel":"c","data":"\ufffd|a\ufffdb|\ufffd"}`},
		{"e", "c", "é✓😀\ufffd", "", `{"event":"e","channel":"c","data":"é✓😀` + "\ufffd" + `"}`},
		{"e", "c", "\"\\\n\x01", "", `{"event":"e","channel":"c","data":"\"\\\n\u0001"}`},
	} {
		if got := string(EventFrame(tc.event, tc.channel, tc.data, tc.userID)); got != tc.want {
			t.Errorf("EventFrame(%q, %q, %q, %q)\n got %s\nwant %s", tc.event, tc.channel, tc.data, tc.userID, got, tc.want)
		}
	}
}

func TestNameCharsets(t *testing.T) {
	if !ValidChannelName("AZaz09_-=@,.;") || ValidChannelName("a/b") {
		t.Fatal("channel names: the character set is A-Z a-z 0-9 _ - = @ , . ;")
	}
	for name, want := range map[string]bool{
		"client-x": true, strings.Repeat("e", MaxEventNameLength): true,
		"": false, strings.Repeat("e", MaxEventNameLength+1): false, "pusher:x": false, "pusher_internal:x": false,
	} {
		if got := ValidEventName(name); got != want {
			t.Errorf("ValidEventName(%q) = %v, want %v", name, got, want)
		}
	}
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

// A count is throttled only within CountThrottleEvery of the last one: a
// join exactly that long after it is counted at once.
func TestSubscriptionCountThrottleWindowEnds(t *testing.T) {
	h := New(nopLogger())
	now := time.Unix(1000, 0)
	h.now = func() time.Time { return now }
	h.SetSubscriptionCount("1", true)
	first := connect(t, h, "1")
	subscribe(t, h, first, "big", nil)
	for range CountThrottleAbove {
		subscribe(t, h, connect(t, h, "1"), "big", nil)
	}
	first.Take(nil)
	now = now.Add(CountThrottleEvery)
	subscribe(t, h, connect(t, h, "1"), "big", nil)
	frames, _ := first.Take(nil)
	if len(frames) != 1 || !strings.Contains(string(frames[0]), `\"subscription_count\":102`) {
		t.Fatalf("frames %q, want the count of 102 at once", frames)
	}
}

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
