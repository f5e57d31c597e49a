package ws

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/signing"
)

// recoveryApps: an app that keeps history and recovers within a minute,
// one that keeps history with recovery off, one without history.
var recoveryApps = socketApps{
	{ID: "20", Key: "recovers", Secret: "s20", Enabled: true, MaxPresenceMembers: 100, MaxPresenceUserInfoBytes: 1024,
		History: eventlog.Policy{Events: 10, TTL: time.Hour}, RecoveryWindow: time.Minute},
	{ID: "21", Key: "nowindow", Secret: "s21", Enabled: true,
		History: eventlog.Policy{Events: 10, TTL: time.Hour}},
	{ID: "22", Key: "nohistory", Secret: "s22", Enabled: true, RecoveryWindow: time.Minute},
}

// subscribeRecovering sends a pusher:subscribe with the plugin's recovery.
func (c *client) subscribeRecovering(channel, auth string, rec map[string]string) {
	c.send(map[string]any{"event": "pusher:subscribe", "data": map[string]any{"channel": channel, "auth": auth, "recovery": rec}})
}

// recoveryOf decodes a pusher_internal:recovery frame's data.
func recoveryOf(t *testing.T, f serverFrame) (token, position string) {
	t.Helper()
	var d struct{ Token, Position string }
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
		t.Fatalf("pusher_internal:recovery data %q: %v", f.Data, err)
	}
	return d.Token, d.Position
}

// A subscription that asks for recovery gets a secret bound to its socket,
// channel and position; a resume with it gets what was missed; one with
// another connection's secret, or another channel's, is refused — the
// subscription itself succeeds, recoverable from now on.
func TestRecoveryOverTheWebSocket(t *testing.T) {
	log := eventlog.NewMemory(eventlog.Limits{})
	s := newWSServerApps(t, Options{History: log}, 0, nil, recoveryApps)
	policy := recoveryApps[0].History
	publish := func(channel, name string) {
		t.Helper()
		if _, err := s.hub.PublishKept(log, policy, time.Now(), hub.Message{AppID: "20", Channel: channel, Event: name, Data: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	old := s.dial(t, "recovers")
	auth := signing.ChannelAuth("recovers", "s20", old.socketID, "private-a", "")
	old.subscribeRecovering("private-a", auth, map[string]string{})
	old.expect("pusher_internal:subscription_succeeded", "private-a")
	token, position := recoveryOf(t, old.expect("pusher_internal:recovery", "private-a"))
	// The token signs the position and the log's epoch: a restarted
	// node's log does not take it for one of its own.
	if want := signing.RecoveryToken("s20", old.socketID, "private-a", position+"/"+log.Epoch()); token != want || position != "0-0" {
		t.Fatalf("token %q at %q, want %q at 0-0", token, position, want)
	}
	publish("private-a", "missed")

	c := s.dial(t, "recovers")
	auth = signing.ChannelAuth("recovers", "s20", c.socketID, "private-a", "")
	c.subscribeRecovering("private-a", auth, map[string]string{"socket_id": old.socketID, "token": token, "position": position})
	c.expect("pusher_internal:subscription_succeeded", "private-a")
	c.expect("pusher_internal:position", "private-a")
	c.expect("missed", "private-a")
	if f := c.expect("pusher:recovered", "private-a"); f.Data != `{"replayed":1}` {
		t.Fatalf("pusher:recovered %q", f.Data)
	}
	if next, _ := recoveryOf(t, c.expect("pusher_internal:recovery", "private-a")); next == token {
		t.Fatal("the new connection got the old one's secret")
	}

	for name, rec := range map[string]map[string]string{
		"another connection's secret": {"socket_id": c.socketID, "token": token, "position": position},
		"a forged secret":             {"socket_id": old.socketID, "token": position + ".00", "position": position},
		"another channel's secret":    {"socket_id": old.socketID, "token": signing.RecoveryToken("s20", old.socketID, "private-b", position), "position": position},
	} {
		t.Run(name, func(t *testing.T) {
			x := s.dial(t, "recovers")
			x.subscribeRecovering("private-a", signing.ChannelAuth("recovers", "s20", x.socketID, "private-a", ""), rec)
			x.expect("pusher_internal:subscription_succeeded", "private-a")
			if f := x.expect("pusher:recovery_failed", "private-a"); f.Data != `{"reason":"refused"}` {
				t.Fatalf("recovery_failed %q", f.Data)
			}
			x.expect("pusher_internal:recovery", "private-a")
		})
	}
}

// Where an app recovers nothing, a subscription that asks for it is told
// so: a secret that recovers nothing, and after a reconnect
// pusher:recovery_failed with the reason, never silence.
func TestRecoveryOffIsSaid(t *testing.T) {
	s := newWSServerApps(t, Options{History: eventlog.NewMemory(eventlog.Limits{})}, 0, nil, recoveryApps)
	for _, key := range []string{"nowindow", "nohistory"} {
		t.Run(key, func(t *testing.T) {
			c := s.dial(t, key)
			c.subscribeRecovering("news", "", map[string]string{})
			c.expect("pusher_internal:subscription_succeeded", "news")
			if token, position := recoveryOf(t, c.expect("pusher_internal:recovery", "news")); token != "" || position != "" {
				t.Fatalf("a secret %q at %q for an app that does not recover", token, position)
			}
			again := s.dial(t, key)
			off := s.hub.RecoveryStats().Off
			again.subscribeRecovering("news", "", map[string]string{"socket_id": c.socketID, "token": "", "position": ""})
			again.expect("pusher_internal:subscription_succeeded", "news")
			if f := again.expect("pusher:recovery_failed", "news"); f.Data != `{"reason":"off"}` {
				t.Fatalf("recovery_failed %q", f.Data)
			}
			if got := s.hub.RecoveryStats().Off; got != off+1 {
				t.Fatalf("the hub counted %d recoveries off, want %d", got, off+1)
			}
		})
	}
	// A subscribe without the plugin gets none of it.
	c := s.dial(t, "nowindow")
	c.subscribe("plain", "", "")
	c.expect("pusher_internal:subscription_succeeded", "plain")
	c.ping() // the next frame is the pong: nothing of recovery came between
}

// A connection gets as many resumes as it may hold channels
// (MaxChannelsPerConn), not one per unsubscribe: each reads a history.
func TestResumesPerConnectionAreBounded(t *testing.T) {
	log := eventlog.NewMemory(eventlog.Limits{})
	s := newWSServerApps(t, Options{History: log, MaxChannelsPerConn: 2}, 0, nil, recoveryApps)
	old := s.dial(t, "recovers")
	old.subscribeRecovering("news", "", map[string]string{})
	old.expect("pusher_internal:subscription_succeeded", "news")
	token, position := recoveryOf(t, old.expect("pusher_internal:recovery", "news"))
	c := s.dial(t, "recovers")
	resume := map[string]string{"socket_id": old.socketID, "token": token, "position": position}
	for i, want := range []string{"pusher:recovered", "pusher:recovered", "pusher:recovery_failed"} {
		c.subscribeRecovering("news", "", resume)
		c.expect("pusher_internal:subscription_succeeded", "news")
		if f := c.next(); f.Event != want {
			t.Fatalf("resume %d: got %s %s, want %s", i+1, f.Event, f.Data, want)
		}
		c.expect("pusher_internal:recovery", "news")
		c.send(map[string]any{"event": "pusher:unsubscribe", "data": map[string]string{"channel": "news"}})
	}
}

// publishKept triggers a kept event on app 20's channel, excluding the
// socket exclude.
func publishKept(t *testing.T, s *wsServer, log *eventlog.Memory, channel, name, exclude string) {
	t.Helper()
	m := hub.Message{AppID: "20", Channel: channel, Event: name, Data: "{}", ExcludeSocketID: exclude}
	if _, err := s.hub.PublishKept(log, recoveryApps[0].History, time.Now(), m); err != nil {
		t.Fatal(err)
	}
}

// recoverableOn dials app 20 and makes a recoverable subscription to the
// public channel, returning its secret and position.
func (s *wsServer) recoverableOn(t *testing.T, channel string) (c *client, token, position string) {
	t.Helper()
	c = s.dial(t, "recovers")
	c.subscribeRecovering(channel, "", map[string]string{})
	c.expect("pusher_internal:subscription_succeeded", channel)
	token, position = recoveryOf(t, c.expect("pusher_internal:recovery", channel))
	return c, token, position
}

// A resume tells its position: one from before the position its token
// proves is refused, with nothing replayed, so that a token cannot be
// stretched to events older than its subscription had.
func TestAResumeFromBeforeItsTokenIsRefused(t *testing.T) {
	log := eventlog.NewMemory(eventlog.Limits{})
	s := newWSServerApps(t, Options{History: log}, 0, nil, recoveryApps)
	publishKept(t, s, log, "news", "before", "")
	old, token, position := s.recoverableOn(t, "news")
	if position == "0-0" {
		t.Fatal("the token is from the channel's start: nothing is before it")
	}
	publishKept(t, s, log, "news", "missed", "")

	c := s.dial(t, "recovers")
	c.subscribeRecovering("news", "", map[string]string{"socket_id": old.socketID, "token": token, "position": "0-0"})
	c.expect("pusher_internal:subscription_succeeded", "news")
	if f := c.next(); f.Event != "pusher:recovery_failed" || f.Data != `{"reason":"refused"}` {
		t.Fatalf("got %s %s, want pusher:recovery_failed refused", f.Event, f.Data)
	}
	c.expect("pusher_internal:recovery", "news")
}

// An event triggered with the old connection's socket_id while it was away
// is not replayed (it would not have reached it live); the others are.
func TestAResumeLeavesOutTheOldConnectionsOwnEvents(t *testing.T) {
	log := eventlog.NewMemory(eventlog.Limits{})
	s := newWSServerApps(t, Options{History: log}, 0, nil, recoveryApps)
	old, token, position := s.recoverableOn(t, "news")
	old.ws.CloseNow() // cut, no close frame
	publishKept(t, s, log, "news", "e1", "")
	publishKept(t, s, log, "news", "mine", old.socketID)
	publishKept(t, s, log, "news", "e2", "")

	c := s.dial(t, "recovers")
	c.subscribeRecovering("news", "", map[string]string{"socket_id": old.socketID, "token": token, "position": position})
	c.expect("pusher_internal:subscription_succeeded", "news")
	for _, want := range []string{"e1", "e2"} {
		c.expect("pusher_internal:position", "news")
		c.expect(want, "news")
	}
	if f := c.expect("pusher:recovered", "news"); f.Data != `{"replayed":2}` {
		t.Fatalf("pusher:recovered %q", f.Data)
	}
}
