package ws

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/signing"
)

// The tests of timers (the idle ping, the user-authentication timeout, the
// client event rate, the overflow grace, the write watchdog) run in fake time
// (testing/synctest), where instants are exact and nothing sleeps: their
// sessions are the transport's own (a real WebSocket connection of the
// library, over socket.Conn, as upgrade makes them) on an in-memory socket
// (memconn_test.go).

// A connection that signs in within the app's user-authentication timeout
// stays open past it; one that does not is closed with 4009.
func TestSignedInConnectionOutlivesTheUserAuthTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hub.New(zap.NewNop())
		defer h.Close()
		s := memHandler(h, Options{})
		app, _ := wsApps.ByID("8") // UserAuthTimeout 200 ms
		signedIn, idle := takeSession(t, s, "8"), takeSession(t, s, "8")
		for _, sess := range []*session{signedIn, idle} {
			sess.start(app)
			defer sess.idle.Stop()
		}
		userData := `{"id":"alice"}`
		msg, _ := json.Marshal(map[string]any{"event": "pusher:signin", "data": map[string]string{
			"auth": signing.UserAuth("strict", "s8", signedIn.conn.SocketID(), userData), "user_data": userData}})
		signedIn.handle(msg)
		time.Sleep(time.Second)
		if events, reason := takeEvents(t, signedIn); reason != nil || strings.Join(events, " ") != "pusher:connection_established pusher:signin_success" {
			t.Fatalf("signed in: %v, closed with %v", events, reason)
		}
		if _, reason := takeEvents(t, idle); reason == nil || reason.Code != 4009 {
			t.Fatalf("not signed in: closed with %v, want 4009", reason)
		}
	})
}

// The client event rate is 10 in each window of a second: an event exactly
// a second after the window opened starts a new one; until then the 11th
// and later are refused with 4301.
func TestClientEventRateWindowIsOneSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hub.New(zap.NewNop())
		defer h.Close()
		s := memHandler(h, Options{})
		sess := takeSession(t, s, "1")
		const ch = "private-rate"
		sub, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{
			"channel": ch, "auth": signing.ChannelAuth("key1", "secret1", sess.conn.SocketID(), ch, "")}})
		sess.handle(sub)
		event := []byte(`{"event":"client-n","channel":"` + ch + `","data":{}}`)
		send := func() (relayed bool) {
			t.Helper()
			before := s.Counters().ClientEvents
			sess.handle(event)
			relayed = s.Counters().ClientEvents == before+1
			events, _ := takeEvents(t, sess)
			if refused := strings.Contains(strings.Join(events, " "), "pusher:error:4301"); refused == relayed {
				t.Fatalf("relayed %v, answers %v", relayed, events)
			}
			return relayed
		}
		for i := range ClientEventsPerSecond {
			if !send() {
				t.Fatalf("event %d of the first second refused", i+1)
			}
		}
		if send() {
			t.Fatal("11th event of the first second relayed")
		}
		time.Sleep(time.Second - time.Nanosecond)
		if send() {
			t.Fatal("an event 1 ns before the window's second is over relayed")
		}
		time.Sleep(time.Nanosecond)
		if !send() {
			t.Fatal("an event a second after the window opened refused")
		}
	})
}

// A client active after connecting is pinged ActivityTimeout after its last
// activity, not later.
func TestIdlePingComesActivityTimeoutAfterTheLastActivity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hub.New(zap.NewNop())
		defer h.Close()
		s := memHandler(h, Options{ActivityTimeout: 10 * time.Second, PongTimeout: 10 * time.Second})
		app, _ := wsApps.ByID("1")
		sess := takeSession(t, s, "1")
		sess.start(app)
		defer sess.idle.Stop()
		time.Sleep(4 * time.Second)
		sess.touch() // a message from the client (readMessages)
		time.Sleep(9 * time.Second)
		if events, _ := takeEvents(t, sess); strings.Join(events, " ") != "pusher:connection_established" {
			t.Fatalf("9 s after the client's last message: %v, want no ping yet", events)
		}
		time.Sleep(1500 * time.Millisecond)
		if events, _ := takeEvents(t, sess); strings.Join(events, " ") != "pusher:ping" {
			t.Fatalf("10.5 s after the client's last message: %v, want the ping", events)
		}
	})
}

// When a connection's queue overflows while its writer is stuck on a
// socket the client stopped reading, the socket is dropped after the
// overflow grace, without waiting for the write timeout.
func TestOverflowDropsAStuckWriterAfterTheGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hub.New(zap.NewNop())
		defer h.Close()
		s := memHandler(h, Options{MaxQueueBytes: 4096, WriteTimeout: time.Hour})
		mc := newMemConn(true)
		sess := memSession(t, s, mc, nil)
		frame := hub.EventFrame("tick", "c", strings.Repeat("x", 1000), "")
		sess.conn.Send(frame)
		synctest.Wait() // the writer is stuck in the socket write
		for sess.conn.Send(frame) {
		}
		if n := s.SlowConsumersClosed(); n != 1 {
			t.Fatalf("%d slow consumers, want 1", n)
		}
		time.Sleep(overflowGrace - time.Nanosecond)
		if mc.isClosed() {
			t.Fatal("socket dropped before the overflow grace")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if !mc.isClosed() {
			t.Fatal("the stuck socket was not dropped after the overflow grace")
		}
		letPoolGo()
	})
}

// The write watchdog closes a socket whose write has taken longer than
// WriteTimeout (at its next tick), and no other: not one whose write
// started exactly WriteTimeout before the tick, nor an idle one.
func TestWatchdogClosesOnlyWritesOverTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hub.New(zap.NewNop())
		defer h.Close()
		s := memHandler(h, Options{WriteTimeout: 10 * time.Second})
		go s.watchWrites() // ticks every second from now on
		defer close(s.stopWatch)
		stuckConn, idleConn := newMemConn(true), newMemConn(false)
		stuck, idle := memSession(t, s, stuckConn, nil), memSession(t, s, idleConn, nil)
		for _, sess := range []*session{stuck, idle} {
			if !s.add(sess) {
				t.Fatal("handler closing")
			}
		}
		stuck.conn.Send(hub.EventFrame("tick", "c", "x", "")) // its write starts now, and never ends
		synctest.Wait()
		time.Sleep(10*time.Second + 500*time.Millisecond) // the tick at 10 s has seen a write of exactly 10 s
		synctest.Wait()
		if stuckConn.isClosed() {
			t.Fatal("a write of at most WriteTimeout was cut")
		}
		time.Sleep(time.Second) // the tick at 11 s
		synctest.Wait()
		if !stuckConn.isClosed() {
			t.Fatal("a write stuck for longer than WriteTimeout was not cut")
		}
		if idleConn.isClosed() {
			t.Fatal("an idle connection was closed by the write watchdog")
		}
		_ = idle.ws.CloseNow()
		letPoolGo()
	})
}

// The activity timeout goes to clients in whole seconds, rounded up, at
// least 1.
func TestActivitySeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{0: 1, time.Nanosecond: 1, time.Second: 1, time.Second + time.Nanosecond: 2,
		1500 * time.Millisecond: 2, 120 * time.Second: 120} {
		if got := activitySeconds(d); got != want {
			t.Errorf("activitySeconds(%v) = %d, want %d", d, got, want)
		}
	}
}
