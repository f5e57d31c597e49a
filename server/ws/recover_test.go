package ws

import (
	"fmt"
	"strings"
	"testing"

	"github.com/heraldrt/herald/server/internal/wait"
)

// closedWith finds the count of connections closed with code.
func closedWith(c Counters, code int) int64 {
	for _, cc := range c.Closed {
		if cc.Code == code {
			return cc.Count
		}
	}
	return -1
}

// A text message that is not UTF-8 fails the connection with 1007 (RFC 6455
// §8.1), told as a pusher:error too; valid UTF-8 split between fragments is
// a valid message.
func TestInvalidUTF8ClosesWith1007(t *testing.T) {
	s := newWSServer(t, Options{})
	c := s.dialRawSocket(t, "/app/key1?protocol=7")
	if _, first, err := c.read(); err != nil || !strings.Contains(string(first), "pusher:connection_established") {
		t.Fatalf("first frame %s, %v", first, err)
	}
	// "é" is C3 A9: the message is whole only with both fragments.
	if err := c.send(false, opText, []byte("{\"event\":\"pusher:ping\",\"data\":\"\xc3")); err != nil {
		t.Fatal(err)
	}
	if err := c.send(true, opContinuation, []byte("\xa9\"}")); err != nil {
		t.Fatal(err)
	}
	if _, pong, err := c.read(); err != nil || !strings.Contains(string(pong), "pusher:pong") {
		t.Fatalf("answer to a fragmented ping: %s, %v", pong, err)
	}

	if err := c.send(true, opText, []byte("{\"event\":\"pusher:ping\",\"data\":\"\xff\xfe\"}")); err != nil {
		t.Fatal(err)
	}
	code, texts, err := c.untilClosed()
	if err != nil {
		t.Fatalf("no close frame: %v (frames %q)", err, texts)
	}
	if code != 1007 {
		t.Fatalf("closed with %d, want 1007", code)
	}
	if len(texts) != 1 || !strings.Contains(texts[0], `\"code\":1007`) {
		t.Fatalf("frames before the close %q, want one pusher:error with code 1007", texts)
	}
	wait.NoError(t, func() error {
		if n := s.handler.Sessions(); n != 0 {
			return fmt.Errorf("%d sessions left", n)
		}
		if n := closedWith(s.handler.Counters(), 1007); n != 1 {
			return fmt.Errorf("%d connections counted as closed with 1007, want 1", n)
		}
		return nil
	})
}

// panickyApps is the test apps with app 66 (key "panics"), whose lookup by id
// panics: a subscribe, sign-in or client event on one of its connections
// panics in the middle of handling the client's message, as a bug on that
// path would.
type panickyApps struct{ socketApps }

func (p panickyApps) ByKey(key string) (App, bool) {
	if key == "panics" {
		return App{ID: "66", Key: "panics", Secret: "s66", Enabled: true}, true
	}
	return p.socketApps.ByKey(key)
}

func (p panickyApps) ByID(id string) (App, bool) {
	if id == "66" {
		panic("app lookup broke")
	}
	return p.socketApps.ByID(id)
}

// A panic while handling one client's message closes that connection with
// 1011 and no other, and is counted; with the poller (pooled goroutines) and
// without (a goroutine per connection).
func TestPanicClosesOnlyItsConnection(t *testing.T) {
	t.Run("Poller", func(t *testing.T) { testPanicClosesOnlyItsConnection(t, false) })
	t.Run("WaitingGoroutines", func(t *testing.T) { testPanicClosesOnlyItsConnection(t, true) })
}

func testPanicClosesOnlyItsConnection(t *testing.T, noPoller bool) {
	s := newWSServerApps(t, Options{}, 0, nil, panickyApps{wsApps})
	if noPoller {
		s.handler.poller = nil
	}
	victim := s.dial(t, "panics")
	sameApp := s.dial(t, "panics")
	other := s.dial(t, "key1")
	other.subscribe("news", "", "")
	other.expect("pusher_internal:subscription_succeeded", "news")

	victim.subscribe("news", "", "")
	if code, _ := errorData(t, victim.expect("pusher:error", "")); code == nil || *code != 1011 {
		t.Fatalf("pusher:error code %v, want 1011", code)
	}
	if got := victim.expectClosed(); got != 1011 {
		t.Fatalf("close code %d, want 1011", got)
	}
	sameApp.ping()
	other.ping()
	other.subscribe("more", "", "")
	other.expect("pusher_internal:subscription_succeeded", "more")
	wait.NoError(t, func() error {
		if n := s.handler.Sessions(); n != 2 {
			return fmt.Errorf("%d sessions, want 2", n)
		}
		if n := s.hub.Connections("66"); n != 1 {
			return fmt.Errorf("app 66 has %d connections, want 1", n)
		}
		return nil
	})
	c := s.handler.Counters()
	if c.Panics != 1 {
		t.Fatalf("Panics = %d, want 1", c.Panics)
	}
	if n := closedWith(c, 1011); n != 1 {
		t.Fatalf("%d connections counted as closed with 1011, want 1", n)
	}
}
