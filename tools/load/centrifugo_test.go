package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestCentrifugoSubscribe plays Centrifugo's side of the subscribe
// handshake: a reply counts only for the command of its id, a ping on the
// way is answered, an error in a reply refuses the subscriber.
func TestCentrifugoSubscribe(t *testing.T) {
	const connect, subscribe = `{"id":1,"connect":{"name":"herald-load"}}`, `{"id":2,"subscribe":{"channel":"load-0"}}`
	for _, tc := range []struct {
		name    string
		msgs    []string
		wrote   []string // the commands and pongs sent, in order
		wantErr string
	}{
		{"replies matched by id", []string{
			`{}`,
			`{"id":2,"subscribe":{}}`, // no subscribe sent yet: a reply to nothing awaited
			`{"id":1,"connect":{"client":"c1","ping":25,"pong":true}}`,
			`{"push":{"channel":"load-0","join":{"info":{"client":"c0"}}}}` + "\n" + `{"id":2,"subscribe":{}}`,
		}, []string{connect, `{}`, subscribe}, ""},
		{"connect refused", []string{`{"id":1,"error":{"code":101,"message":"unauthorized"}}`}, []string{connect}, "error 101 unauthorized"},
		{"subscribe refused", []string{`{"id":1,"connect":{}}`, `{"id":2,"error":{"code":103,"message":"permission denied"}}`},
			[]string{connect, subscribe}, "error 103 permission denied"},
		{"closed before the reply", []string{`{"id":1,"connect":{}}`}, []string{connect, subscribe}, "before subscribed: eof"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := &scriptConn{}
			for _, m := range tc.msgs {
				conn.msgs = append(conn.msgs, []byte(m))
			}
			err := subscribeCentrifugo(conn, "load-0")
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if len(conn.msgs) != 0 {
				t.Errorf("subscribed with %d messages of the server unread", len(conn.msgs))
			}
			var wrote []string
			for _, w := range conn.wrote {
				wrote = append(wrote, string(w))
			}
			if !slices.Equal(wrote, tc.wrote) {
				t.Errorf("wrote %q, want %q", wrote, tc.wrote)
			}
		})
	}
}

// TestCentrifugoReader feeds a subscriber's reader what Centrifugo sends:
// publications one to a frame and several to a frame, one whose data has an
// escape (the slow path), a ping, a join, an error reply and frames that
// are no publication of the tool.
func TestCentrifugoReader(t *testing.T) {
	pub := func(seq int) string {
		return `{"push":{"channel":"load-0","pub":{"data":"hl:` + strconv.Itoa(seq) + `:1700000000000000000","offset":` + strconv.Itoa(seq+1) + `}}}`
	}
	conn := &scriptConn{}
	for _, m := range []string{
		pub(0),
		pub(1) + "\n" + pub(2) + "\n" + pub(1), // 1 again: a duplicate
		`{"push":{"channel":"load-0","pub":{"data":"\u0068l:3:1700000000000000000"}}}`, // no "hl: to find
		`{}`,
		`{"push":{"channel":"load-0","join":{"info":{"client":"c2"}}}}`,
		`{"id":3,"error":{"code":109,"message":"token expired"}}`,
		`{"push":{"channel":"load-0","pub":{"data":{"n":1}}}}`, // data the tool did not publish
		`not json`,
	} {
		conn.msgs = append(conn.msgs, []byte(m))
	}
	r := &runner{cfg: &config{protocol: protoCentrifugo, event: "load"}, closedBy: map[string]int{}, pusherErrors: map[string]int{}}
	s := &subscriber{conn: conn}
	r.readers.Add(1)
	r.readLoop(s) // until the script ends
	if s.unique.Load() != 4 || s.dups.Load() != 1 || s.bad.Load() != 2 || s.other.Load() != 1 {
		t.Errorf("unique %d dups %d bad %d other %d; want 4, 1, 2, 1", s.unique.Load(), s.dups.Load(), s.bad.Load(), s.other.Load())
	}
	if n, _, _ := r.hist.summary(0.5); n != 4 {
		t.Errorf("%d latencies recorded, want 4", n)
	}
	if len(conn.wrote) != 1 || string(conn.wrote[0]) != `{}` {
		t.Errorf("wrote %q, want the ping answered once with {}", conn.wrote)
	}
	if len(r.pusherErrors) != 1 || r.pusherErrors["109"] != 1 {
		t.Errorf("errors counted %v, want 109 once", r.pusherErrors)
	}
	if r.closedBy["eof"] != 1 {
		t.Errorf("closed by %v, want the end of the script", r.closedBy)
	}
	// A publication takes the fast path: nothing decoded, nothing allocated.
	frame := []byte(pub(1) + "\n" + pub(2))
	if n := testing.AllocsPerRun(100, func() { r.centrifugoFrame(s, frame, 1) }); n != 0 {
		t.Errorf("a frame of two publications allocates %.0f times, want none", n)
	}
}

// TestCentrifugoPublish publishes through a stand-in for Centrifugo's HTTP
// API: one publication a request with the key in X-API-Key, and a refusal
// the API answers with 200 and an error counted as a failed publish.
func TestCentrifugoPublish(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]string
		raw, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/api/publish" || r.Header.Get("X-API-Key") != "api-key" || json.Unmarshal(raw, &b) != nil {
			t.Errorf("%s %s key %q body %s", r.Method, r.URL.Path, r.Header.Get("X-API-Key"), raw)
		}
		mu.Lock()
		bodies = append(bodies, b)
		n := len(bodies)
		mu.Unlock()
		if n == 2 {
			_, _ = io.WriteString(w, `{"error":{"code":102,"message":"unknown channel"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"result":{}}`)
	}))
	defer srv.Close()
	cfg, err := parseFlags([]string{"-protocol", "centrifugo", "-url", "ws" + strings.TrimPrefix(srv.URL, "http"), "-api-key", "api-key",
		"-channels", "2", "-events", "4", "-rate", "0", "-publishers", "1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	res := &result{}
	r := newRunner(cfg, io.Discard, res)
	r.okPerChannel = make([]atomic.Int64, cfg.channels)
	r.publish(context.Background(), res)
	if res.Publishes != 3 || res.PublishErrors != 1 || !strings.Contains(strings.Join(res.PublishErrorSamples, ""), "error 102 unknown channel") {
		t.Errorf("publishes %d, errors %d %v; want 3 and the refusal", res.Publishes, res.PublishErrors, res.PublishErrorSamples)
	}
	if a, b := r.okPerChannel[0].Load(), r.okPerChannel[1].Load(); a != 2 || b != 1 {
		t.Errorf("accepted per channel %d, %d; want 2, 1 (the second publish, to load-1, refused)", a, b)
	}
	for i, b := range bodies {
		seq, ns, _ := strings.Cut(strings.TrimPrefix(b["data"], "hl:"), ":")
		if len(b) != 2 || b["channel"] != "load-"+strconv.Itoa(i%2) || seq != strconv.Itoa(i/2) || !strings.HasPrefix(b["data"], "hl:") || len(ns) < 19 {
			t.Errorf("publication %d: %v, want channel load-%d and data hl:%d:<nanos>", i, b, i%2, i/2)
		}
	}
}
