package ws

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/signing"
)

// signin sends pusher:signin for userData signed with app 1's secret.
func (c *client) signin(userData string) {
	c.t.Helper()
	c.send(map[string]any{"event": "pusher:signin", "data": map[string]string{
		"auth": signing.UserAuth("key1", "secret1", c.socketID, userData), "user_data": userData,
	}})
}

type watchlistData struct {
	Events []struct {
		Name    string   `json:"name"`
		UserIDs []string `json:"user_ids"`
	} `json:"events"`
}

func watchlist(t *testing.T, f serverFrame) string {
	t.Helper()
	if f.Event != "pusher_internal:watchlist_events" {
		t.Fatalf("got %+v, want watchlist events", f)
	}
	var d watchlistData
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, e := range d.Events {
		parts = append(parts, e.Name+":"+strings.Join(e.UserIDs, ","))
	}
	return strings.Join(parts, " ")
}

func TestSignInAndServerToUser(t *testing.T) {
	s := newWSServer(t, Options{})
	c := s.dial(t, "key1")
	c.signin(`{"id":"alice","user_info":{"name":"Alice"}}`)
	if f := c.expect("pusher:signin_success", ""); f.Data != `{"user_data":"{\"id\":\"alice\",\"user_info\":{\"name\":\"Alice\"}}"}` {
		t.Fatalf("signin_success data %s", f.Data)
	}
	c.subscribe("#server-to-user-bob", "", "")
	c.expect("pusher:subscription_error", "#server-to-user-bob")
	c.subscribe("#server-to-user-alice", "", "")
	c.expect("pusher_internal:subscription_succeeded", "#server-to-user-alice")
	s.hub.Publish(hub.Message{AppID: "1", Channel: "#server-to-user-alice", Event: "note", Data: "hi"})
	if f := c.expect("note", "#server-to-user-alice"); f.Data != "hi" {
		t.Fatalf("got %+v", f)
	}
	c.signin(`{"id":"again"}`)
	c.expect("pusher:error", "")

	if n := s.hub.TerminateUser("1", "alice"); n != 1 {
		t.Fatalf("terminated %d", n)
	}
	if code, _ := errorData(t, c.expect("pusher:error", "")); code == nil || *code != 4009 {
		t.Fatalf("code %v, want 4009", code)
	}
	if got := c.expectClosed(); got != 4009 {
		t.Fatalf("close %d, want 4009", got)
	}
}

func TestSignInFailuresClose4009(t *testing.T) {
	s := newWSServer(t, Options{})
	for name, send := range map[string]func(c *client){
		"ErrBadSignature": func(c *client) {
			c.send(map[string]any{"event": "pusher:signin", "data": map[string]string{"auth": "key1:00", "user_data": `{"id":"x"}`}})
		},
		"ErrOtherSocket": func(c *client) {
			c.send(map[string]any{"event": "pusher:signin", "data": map[string]string{"auth": signing.UserAuth("key1", "secret1", "1.2", `{"id":"x"}`), "user_data": `{"id":"x"}`}})
		},
		"ErrNoID":      func(c *client) { c.signin(`{"user_info":{}}`) },
		"ErrNotObject": func(c *client) { c.signin(`[1]`) },
		"ErrEmptyID":   func(c *client) { c.signin(`{"id":""}`) },
	} {
		t.Run(name, func(t *testing.T) {
			c := s.dial(t, "key1")
			send(c)
			if code, _ := errorData(t, c.expect("pusher:error", "")); code == nil || *code != 4009 {
				t.Fatalf("code %v, want 4009", code)
			}
			if got := c.expectClosed(); got != 4009 {
				t.Fatalf("close %d, want 4009", got)
			}
		})
	}
}

func TestWatchlist(t *testing.T) {
	s := newWSServer(t, Options{})
	bob := s.dial(t, "key1")
	bob.signin(`{"id":"bob"}`)
	bob.expect("pusher:signin_success", "")

	alice := s.dial(t, "key1")
	alice.signin(`{"id":"alice","watchlist":["bob","carol"]}`)
	alice.expect("pusher:signin_success", "")
	if got := watchlist(t, alice.next()); got != "online:bob offline:carol" {
		t.Fatalf("initial state %s", got)
	}

	carol1 := s.dial(t, "key1")
	carol1.signin(`{"id":"carol"}`)
	carol1.expect("pusher:signin_success", "")
	if got := watchlist(t, alice.next()); got != "online:carol" {
		t.Fatalf("after carol signed in: %s", got)
	}
	carol2 := s.dial(t, "key1") // a second connection is not a new online event
	carol2.signin(`{"id":"carol"}`)
	carol2.expect("pusher:signin_success", "")
	carol1.ws.CloseNow()
	alice.ping()
	carol2.ws.CloseNow()
	if got := watchlist(t, alice.next()); got != "offline:carol" {
		t.Fatalf("after carol left: %s", got)
	}

	// More than 100 ids: sign-in succeeds, 4302 is reported, 100 are kept.
	ids := make([]string, 101)
	for i := range ids {
		ids[i] = fmt.Sprintf("u%d", i)
	}
	list, _ := json.Marshal(ids)
	many := s.dial(t, "key1")
	many.signin(`{"id":"many","watchlist":` + string(list) + `}`)
	many.expect("pusher:signin_success", "")
	if code, _ := errorData(t, many.expect("pusher:error", "")); code == nil || *code != 4302 {
		t.Fatalf("code %v, want 4302", code)
	}
	got := watchlist(t, many.next())
	if !strings.HasPrefix(got, "offline:u0,u1,") || strings.Contains(got, "u100") {
		t.Fatalf("watchlist of many: %s", got)
	}
	many.ping()
}

func TestSubscriptionCountEvents(t *testing.T) {
	s := newWSServer(t, Options{})
	// App 1 has subscription_count off: no count events.
	quiet := s.dial(t, "key1")
	quiet.subscribe("news", "", "")
	quiet.expect("pusher_internal:subscription_succeeded", "news")
	quiet.ping()

	a, b := s.dial(t, "counting"), s.dial(t, "counting")
	a.subscribe("news", "", "")
	a.expect("pusher_internal:subscription_succeeded", "news")
	if f := a.expect("pusher_internal:subscription_count", "news"); f.Data != `{"subscription_count":1}` {
		t.Fatalf("got %s", f.Data)
	}
	b.subscribe("news", "", "")
	b.expect("pusher_internal:subscription_succeeded", "news")
	for _, c := range []*client{a, b} {
		if f := c.expect("pusher_internal:subscription_count", "news"); f.Data != `{"subscription_count":2}` {
			t.Fatalf("got %s", f.Data)
		}
	}
	b.ws.CloseNow()
	if f := a.expect("pusher_internal:subscription_count", "news"); f.Data != `{"subscription_count":1}` {
		t.Fatalf("after b left: %s", f.Data)
	}
	// Presence channels never get counts.
	data := `{"user_id":"u"}`
	a.subscribe("presence-p", signing.ChannelAuth("counting", "s9", a.socketID, "presence-p", data), data)
	a.expect("pusher_internal:subscription_succeeded", "presence-p")
	a.ping()
}

func TestUserAuthTimeout(t *testing.T) {
	s := newWSServer(t, Options{})

	idle := s.dial(t, "strict")
	idle.subscribe("public", "", "") // a public channel does not count
	idle.expect("pusher_internal:subscription_succeeded", "public")
	if code, _ := errorData(t, idle.expect("pusher:error", "")); code == nil || *code != 4009 {
		t.Fatalf("code %v, want 4009", code)
	}
	if got := idle.expectClosed(); got != 4009 {
		t.Fatalf("close %d", got)
	}

	private := s.dial(t, "strict")
	private.subscribe("private-a", signing.ChannelAuth("strict", "s8", private.socketID, "private-a", ""), "")
	private.expect("pusher_internal:subscription_succeeded", "private-a")
	time.Sleep(300 * time.Millisecond) // past the timeout, which is what is tested
	private.ping()
}
