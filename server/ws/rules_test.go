package ws

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/signing"
)

// eventLog is an Observer that keeps every event it is given: what webhooks
// and the debug console would be told.
type eventLog struct {
	mu     sync.Mutex
	events []hub.Event
}

func (l *eventLog) Observe(ev hub.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
}

// count is how many events of kind were observed on channel (for userID, when
// not empty).
func (l *eventLog) count(kind hub.EventKind, channel, userID string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.events {
		if ev.Kind == kind && ev.Channel == channel && (userID == "" || ev.UserID == userID) {
			n++
		}
	}
	return n
}

// marker publishes an event on channel that every subscriber must see next:
// whatever was not queued before it was not sent at all.
func marker(s *wsServer, channel, data string) {
	s.hub.Publish(hub.Message{AppID: "1", Channel: channel, Event: "marker", Data: data})
}

func (c *client) expectMarker(channel, data string) {
	c.t.Helper()
	if f := c.expect("marker", channel); f.Data != data {
		c.t.Fatalf("got marker %q, want %q", f.Data, data)
	}
}

// clientEvent sends a client event frame followed by a ping, and returns the
// pusher:error it was refused with (nil when none came before the pong).
func (c *client) clientEvent(frame []byte) (refusal *serverFrame) {
	c.t.Helper()
	c.sendRaw(websocket.MessageText, frame)
	c.send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
	f := c.next()
	if f.Event == "pusher:pong" {
		return nil
	}
	if f.Event != "pusher:error" {
		c.t.Fatalf("after a client event: %+v", f)
	}
	c.expect("pusher:pong", "")
	return &f
}

func codeString(code *int) string {
	if code == nil {
		return "null"
	}
	return fmt.Sprint(*code)
}

func (c *client) joinPresence(channel, channelData string) serverFrame {
	c.t.Helper()
	c.subscribe(channel, signing.ChannelAuth("key1", "secret1", c.socketID, channel, channelData), channelData)
	return c.expect("pusher_internal:subscription_succeeded", channel)
}

// A user with two connections on a presence channel is one member: observers
// (webhooks, the console) see member_added once for the two joins, nothing
// when the first connection leaves, by unsubscribing or by disconnecting, and
// member_removed once when the second leaves; the other members' frames say
// the same.
func TestPresenceSecondConnectionIsObservedAsOneMember(t *testing.T) {
	log := &eventLog{}
	s := newWSServerSetup(t, Options{}, 0, func(h *hub.Hub) { h.SetObserver(log) })
	for _, tt := range []struct {
		name  string
		leave func(c *client, channel string)
	}{
		{"Unsubscribe", func(c *client, channel string) {
			c.send(map[string]any{"event": "pusher:unsubscribe", "data": map[string]string{"channel": channel}})
			c.ping() // handled in order: the unsubscribe is done
		}},
		{"Disconnect", func(c *client, _ string) { c.ws.CloseNow() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ch := "presence-two-tabs-" + strings.ToLower(tt.name)
			// leave takes c off ch and waits until the hub has seen it go;
			// the hub notifies observers in the same critical section as it
			// drops the subscription, so by then they have been told.
			leave := func(c *client) {
				t.Helper()
				before := s.hub.Channel("1", ch).Subscriptions
				tt.leave(c, ch)
				wait.NoError(t, func() error {
					if n := s.hub.Channel("1", ch).Subscriptions; n != before-1 {
						return fmt.Errorf("%d subscriptions on %s, want %d", n, ch, before-1)
					}
					return nil
				})
			}
			bob, alice1, alice2 := s.dial(t, "key1"), s.dial(t, "key1"), s.dial(t, "key1")
			bob.joinPresence(ch, `{"user_id":"bob"}`)
			alice1.joinPresence(ch, `{"user_id":"alice"}`)
			if f := bob.expect("pusher_internal:member_added", ch); f.Data != `{"user_id":"alice","user_info":null}` {
				t.Fatalf("member_added data %s", f.Data)
			}
			if f := alice2.joinPresence(ch, `{"user_id":"alice"}`); !strings.Contains(f.Data, `"count":2`) {
				t.Fatalf("alice's second connection: %s", f.Data)
			}
			marker(s, ch, "joined")
			for _, c := range []*client{bob, alice1, alice2} {
				c.expectMarker(ch, "joined") // bob: no member_added for the second tab
			}
			if n := log.count(hub.MemberAdded, ch, "alice"); n != 1 {
				t.Fatalf("member_added:alice observed %d times for two joins, want 1", n)
			}

			leave(alice1)
			if n := log.count(hub.MemberRemoved, ch, ""); n != 0 {
				t.Fatalf("member_removed observed %d times while alice still has a connection", n)
			}
			if got := strings.Join(s.hub.PresenceUsers("1", ch), ","); got != "alice,bob" {
				t.Fatalf("members %s", got)
			}
			marker(s, ch, "first left")
			bob.expectMarker(ch, "first left") // no member_removed frame either
			alice2.expectMarker(ch, "first left")

			leave(alice2)
			if f := bob.expect("pusher_internal:member_removed", ch); f.Data != `{"user_id":"alice"}` {
				t.Fatalf("member_removed data %s", f.Data)
			}
			marker(s, ch, "second left")
			bob.expectMarker(ch, "second left") // one member_removed frame
			if n := log.count(hub.MemberRemoved, ch, "alice"); n != 1 {
				t.Fatalf("member_removed:alice observed %d times, want 1", n)
			}
			if n := log.count(hub.MemberRemoved, ch, ""); n != 1 {
				t.Fatalf("member_removed observed %d times, want 1 (alice's)", n)
			}
			if n := log.count(hub.MemberAdded, ch, "alice"); n != 1 {
				t.Fatalf("member_added:alice observed %d times, want 1", n)
			}
		})
	}
}

// Client events are refused on every kind of channel but private and
// presence, even for a subscribed sender: with a non-fatal pusher:error, and
// nothing reaches the other subscribers or the observers.
func TestClientEventsRefusedOnForbiddenKinds(t *testing.T) {
	log := &eventLog{}
	s := newWSServerSetup(t, Options{}, 0, func(h *hub.Hub) { h.SetObserver(log) })
	const refused = "Client events are only allowed on private and presence channels (not encrypted ones)."
	for _, tt := range []struct {
		name, channel, user string
	}{
		{"Public", "news", ""},
		{"PrivateEncrypted", "private-encrypted-vault", ""},
		{"ServerToUser", "#server-to-user-alice", "alice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sender, receiver := s.dial(t, "key1"), s.dial(t, "key1")
			for _, c := range []*client{sender, receiver} {
				if tt.user != "" {
					c.signin(`{"id":"` + tt.user + `"}`)
					c.expect("pusher:signin_success", "")
				}
				c.subscribe(tt.channel, signing.ChannelAuth("key1", "secret1", c.socketID, tt.channel, ""), "")
				c.expect("pusher_internal:subscription_succeeded", tt.channel)
			}
			f := sender.clientEvent([]byte(`{"event":"client-sneak","channel":"` + tt.channel + `","data":{"x":1}}`))
			if f == nil {
				t.Fatalf("client event on %s not refused", tt.channel)
			}
			if code, message := errorData(t, *f); code != nil || message != refused {
				t.Fatalf("pusher:error code %s message %q, want null and %q", codeString(code), message, refused)
			}
			if n := log.count(hub.ClientEvent, tt.channel, ""); n != 0 {
				t.Fatalf("client_event observed %d times", n)
			}
			marker(s, tt.channel, "after")
			receiver.expectMarker(tt.channel, "after") // nothing relayed before it
			sender.expectMarker(tt.channel, "after")
		})
	}
}

// The 10 KB limit of client events is on the data as relayed (a JSON string's
// contents, other JSON as its text), in bytes: 10,240 bytes go through, one
// more is refused, and the refused event reaches nobody.
func TestClientEventDataLimitBoundary(t *testing.T) {
	s := newWSServer(t, Options{})
	const limit = 10 * 1024
	const ch = "private-limits"
	sender, receiver := s.dial(t, "key1"), s.dial(t, "key1")
	for _, c := range []*client{sender, receiver} {
		c.subscribe(ch, signing.ChannelAuth("key1", "secret1", c.socketID, ch, ""), "")
		c.expect("pusher_internal:subscription_succeeded", ch)
	}
	// relayed sends a client event with the given JSON as its data and
	// reports whether it went through; if so, the receiver must get data.
	relayed := func(rawData, data string) bool {
		t.Helper()
		if f := sender.clientEvent([]byte(`{"event":"client-big","channel":"` + ch + `","data":` + rawData + `}`)); f != nil {
			code, message := errorData(t, *f)
			if want := "Client event rejected: data is larger than 10 KB."; code != nil || message != want {
				t.Fatalf("pusher:error code %s message %q, want null and %q", codeString(code), message, want)
			}
			return false
		}
		if f := receiver.expect("client-big", ch); f.Data != data {
			t.Fatalf("relayed %d bytes, want the %d sent", len(f.Data), len(data))
		}
		return true
	}
	jsonString := func(s string) string {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// A string of two-byte characters: 10,240 bytes (5,120 characters), 10,242
	// with the quotes of the frame's JSON string.
	atLimit := strings.Repeat("é", limit/2)
	if !relayed(jsonString(atLimit), atLimit) {
		t.Fatalf("a string of %d bytes was refused", len(atLimit))
	}
	if relayed(jsonString(atLimit+"x"), atLimit+"x") {
		t.Fatalf("a string of %d bytes was relayed", len(atLimit)+1)
	}

	// An object counts as its JSON text.
	pad := func(n int) string { return `{"k":"` + strings.Repeat("x", n-len(`{"k":""}`)) + `"}` }
	if obj := pad(limit); !relayed(obj, obj) {
		t.Fatalf("an object of %d bytes was refused", len(obj))
	}
	if obj := pad(limit + 1); relayed(obj, obj) {
		t.Fatalf("an object of %d bytes was relayed", len(obj))
	}

	marker(s, ch, "after")
	receiver.expectMarker(ch, "after") // neither refused event was relayed
}

// A cache channel's last event is sent to new subscribers for hub.CacheTTL after
// it was published, and from then on they get pusher:cache_miss (observed,
// for the cache_miss webhook), whether the channel was occupied when the
// event came or not.
func TestCachedEventExpiresForNewSubscribers(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Unix(1_000_000, 0).UnixNano())
	log := &eventLog{}
	s := newWSServerSetup(t, Options{}, 0, func(h *hub.Hub) {
		h.SetClock(func() time.Time { return time.Unix(0, clock.Load()) })
		h.SetObserver(log)
	})
	for _, tt := range []struct {
		name     string
		occupied bool
	}{
		{"Unoccupied", false},
		{"Occupied", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ch := "cache-price-" + strings.ToLower(tt.name)
			subscribe := func() serverFrame {
				t.Helper()
				c := s.dial(t, "key1")
				c.subscribe(ch, "", "")
				c.expect("pusher_internal:subscription_succeeded", ch)
				f := c.next()
				if f.Channel != ch {
					t.Fatalf("after subscription_succeeded: %+v", f)
				}
				return f
			}
			if tt.occupied {
				if f := subscribe(); f.Event != "pusher:cache_miss" {
					t.Fatalf("first subscriber got %+v, want pusher:cache_miss", f)
				}
			}
			published := clock.Load()
			s.hub.Publish(hub.Message{AppID: "1", Channel: ch, Event: "price", Data: "42", Cache: true})
			s.hub.Flush()

			clock.Store(published + int64(hub.CacheTTL) - 1)
			if f := subscribe(); f.Event != "price" || f.Data != "42" {
				t.Fatalf("just before the TTL a new subscriber got %+v, want the cached event", f)
			}
			misses := log.count(hub.CacheMiss, ch, "")
			clock.Store(published + int64(hub.CacheTTL))
			if f := subscribe(); f.Event != "pusher:cache_miss" || f.Data != "{}" {
				t.Fatalf("at the TTL a new subscriber got %+v, want pusher:cache_miss", f)
			}
			if n := log.count(hub.CacheMiss, ch, "") - misses; n != 1 {
				t.Fatalf("cache_miss observed %d times for the expired subscribe, want 1", n)
			}
		})
	}
}
