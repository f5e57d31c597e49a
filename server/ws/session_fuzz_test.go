package ws

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

// fuzzApps are the apps a FuzzSession script may connect to, chosen by its
// first byte: with webhooks (subscribes rate limited), plain, and counting
// subscribers.
var fuzzApps = []struct{ id, key string }{{"10", "hooked"}, {"1", "key1"}, {"9", "counting"}}

// fuzzScript builds a FuzzSession input: the app's index, then frames, each
// as its first byte with FIN inverted (so 0x01 is a whole text message, 0x81
// a first fragment) followed by its payload, separated by 0xFF.
func fuzzScript(app byte, frames ...[]byte) []byte {
	return append([]byte{app, 0xFF}, bytes.Join(frames, []byte{0xFF})...)
}

func textFrame(s string) []byte { return append([]byte{opText}, s...) }

// The close codes a connection may end with after well-formed frames, when
// the client did not close it: protocol errors the library finds (1002),
// text that is not UTF-8 (1007), a message over the library's limit (1009)
// and a failed sign-in (4009). 1011 (a panic) never.
var fuzzCloseCodes = map[int]bool{1002: true, 1007: true, 1009: true, 4009: true}

// FuzzSession feeds arbitrary frames through a real connection to a real
// session and hub: whatever arrives, the connection either still answers a
// ping or is closed with a protocol close code; nothing panics (the
// recovered-panic counters stay at 0); and once the client is gone the hub
// holds nothing of it (no connection, subscription, channel or member).
func FuzzSession(f *testing.F) {
	for _, seed := range [][]byte{
		fuzzScript(0, textFrame(`{"event":"pusher:subscribe","data":{"channel":"news"}}`),
			textFrame(`{"event":"pusher:unsubscribe","data":{"channel":"news"}}`)),
		fuzzScript(0, textFrame(`{"event":"pusher:subscribe","data":"{\"channel\":\"cache-a\"}"}`),
			textFrame(`{"event":"pusher:subscribe","data":{"channel":"presence-r","auth":"hooked:00","channel_data":"{\"user_id\":1}"}}`),
			textFrame(`{"event":"client-x","channel":"private-a","data":{"k":[1,2]}}`)),
		fuzzScript(1, []byte{0x81, '{', '"', 'e'}, []byte{0x80 | opContinuation, 'v'},
			[]byte(`ent":"pusher:ping"}`)), // three fragments
		fuzzScript(1, append([]byte{opBinary}, `{"event":"pusher:ping"}`...)),
		fuzzScript(2, textFrame("{\"event\":\"pusher:ping\",\"data\":\"\xff\"}")),
		fuzzScript(2, []byte{opPing, 'h', 'i'}, []byte{opPong}),
		fuzzScript(0, []byte{opClose, 0x03, 0xe8, 'b', 'y', 'e'}),
		fuzzScript(0, []byte{0x03, 'x'}),           // a reserved opcode
		fuzzScript(0, []byte{0x01 | 0x40, 'x'}),    // RSV1 without an extension
		fuzzScript(0, []byte{opContinuation, 'x'}), // a continuation of nothing
		fuzzScript(0, []byte{0x80 | opPing, 'x'}),  // a fragmented control frame
		fuzzScript(1, textFrame(`{"event":"pusher:signin","data":{"auth":"x","user_data":"{}"}}`)),
		fuzzScript(0, textFrame(`{"event":"pusher:subscribe","data":{"channel":"#server-to-user-1"}}`)),
		fuzzScript(0, textFrame(`not json`), textFrame(`{"event":""}`), textFrame(`[]`)),
	} {
		f.Add(seed)
	}
	s := newWSServer(f, Options{SubscribeBurst: 5, MaxSubscriptionsPerApp: 20, MaxChannelsPerConn: 10, MaxMessageBytes: 512})
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) == 0 {
			return
		}
		app := fuzzApps[int(script[0])%len(fuzzApps)]
		rc, err := s.tryDialRawSocket("/app/" + app.key + "?protocol=7")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.c.Close()
		if op, first, err := rc.read(); err != nil || op != opText || !bytes.Contains(first, []byte("pusher:connection_established")) {
			t.Fatalf("first frame %s, %v", first, err)
		}
		clientClosed := false
		frames := bytes.Split(script[1:], []byte{0xFF})
		for _, fr := range frames {
			if len(fr) == 0 {
				continue
			}
			first := fr[0] ^ 0x80
			clientClosed = clientClosed || first&0x0f == opClose
			if _, err := rc.c.Write(frameBytes(first, fr[1:])); err != nil {
				break // the server has closed already; the reads below say how
			}
		}
		_, _ = rc.c.Write(frameBytes(0x80|opText, []byte(`{"event":"pusher:ping"}`)))
		if err := fuzzAnswered(rc, clientClosed); err != nil {
			t.Fatal(err)
		}
		rc.c.Close()
		if err := fuzzHubEmpty(s, app.id); err != nil {
			t.Fatal(err)
		}
	})
}

// fuzzAnswered reads until the server answers the final ping, or closes
// with a code it may close with.
func fuzzAnswered(rc *rawClient, clientClosed bool) error {
	for {
		op, payload, err := rc.read()
		switch {
		case err != nil && clientClosed:
			return nil // the server may drop the socket once the handshake is done
		case err != nil:
			return fmt.Errorf("neither pong nor close frame: %w", err)
		case op == opText && bytes.Equal(payload, pongFrame):
			return nil
		case op == opClose:
			code := closeCode(payload)
			if code == 1011 && !clientClosed {
				return errors.New("closed with 1011: a panic")
			}
			if !clientClosed && !fuzzCloseCodes[code] {
				return fmt.Errorf("closed with %d (%q)", code, payload)
			}
			_ = rc.send(true, opClose, payload[:min(len(payload), 2)])
			return nil
		}
	}
}

// fuzzHubEmpty waits for the server to forget every connection, then checks
// that the hub holds nothing of the app and that nothing panicked.
func fuzzHubEmpty(s *wsServer, appID string) error {
	// A short poll: the connection ends within a millisecond or so, and the
	// fuzzer's throughput is this wait.
	deadline := time.Now().Add(20 * time.Second)
	for s.handler.Sessions() != 0 || s.hub.Connections(appID) != 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sessions and %d hub connections left", s.handler.Sessions(), s.hub.Connections(appID))
		}
		time.Sleep(100 * time.Microsecond)
	}
	if n := s.hub.Subscriptions(appID); n != 0 {
		return fmt.Errorf("%d subscriptions counted with no connection", n)
	}
	for _, st := range s.hub.AppStats() {
		if st.Channels != 0 || st.Subscriptions != 0 || st.PresenceMembers != 0 {
			return fmt.Errorf("hub holds %+v with no connection", st)
		}
	}
	if n := s.handler.Counters().Panics; n != 0 {
		return fmt.Errorf("%d panics recovered in the session", n)
	}
	if n := s.hub.ObserverPanics(); n != 0 {
		return fmt.Errorf("%d observer panics", n)
	}
	return nil
}

// A close frame the library sends for a protocol error its reader found
// reaches the client even when the connection's writer has corked the socket
// for a batch of frames (FuzzSession found it lost: the writer's next write
// failed, and it dropped the socket with the close frame still held). The
// race is narrow, so the scenario runs many times.
func TestProtocolErrorCloseFrameIsSent(t *testing.T) {
	s := newWSServer(t, Options{})
	for i := range 500 {
		rc := s.dialRawSocket(t, "/app/key1?protocol=7")
		if _, _, err := rc.read(); err != nil {
			t.Fatal(err)
		}
		// Two frames to write (subscription_succeeded and cache_miss), then
		// a frame with all three RSV bits set, which the library refuses.
		_, _ = rc.c.Write(frameBytes(0x80|opText, []byte(`{"event":"pusher:subscribe","data":{"channel":"cache-a"}}`)))
		_, _ = rc.c.Write(frameBytes(0x80|0x70|opText, []byte("x")))
		code, texts, err := rc.untilClosed()
		if err != nil || code != 1002 {
			t.Fatalf("iteration %d: close code %d, %v (frames %q); want 1002", i, code, err, texts)
		}
		rc.c.Close()
	}
}
