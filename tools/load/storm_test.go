package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"
)

// scriptConn plays the server's side of one connection: its messages, then
// the end of the connection.
type scriptConn struct {
	msgs  [][]byte
	wrote [][]byte
}

func (c *scriptConn) ReadMessage() ([]byte, error) {
	if len(c.msgs) == 0 {
		return nil, io.EOF
	}
	m := c.msgs[0]
	c.msgs = c.msgs[1:]
	return m, nil
}

func (c *scriptConn) WriteText(p []byte) error {
	c.wrote = append(c.wrote, bytes.Clone(p))
	return nil
}

func (c *scriptConn) Close() {}
func (c *scriptConn) Abort() {}

// serverFrame is a frame as Herald writes it: data is JSON in a string.
func serverFrame(event, data string) []byte {
	d, _ := json.Marshal(data)
	return fmt.Appendf(nil, `{"event":%q,"channel":"load-0","data":%s}`, event, d)
}

// TestStormReader feeds one resuming subscriber a recovery with a
// duplicate, a reordering and a missing event, and checks what the storm
// counts and the position it would resume from: an announced position
// counts only once the next frame of the channel arrived, an excluded one
// at once, as the recovery plugin does.
func TestStormReader(t *testing.T) {
	pos := func(id string) []byte { return serverFrame("pusher_internal:position", `{"id":"`+id+`"}`) }
	ev := func(seq int) []byte { return serverFrame("load", "hl:"+strconv.Itoa(seq)+":1") }
	conn := &scriptConn{msgs: [][]byte{
		[]byte(`{"event":"pusher:connection_established","data":"{\"socket_id\":\"1.2\",\"activity_timeout\":120}"}`),
		serverFrame("pusher_internal:subscription_succeeded", "{}"),
		pos("p0"), ev(0),
		pos("p2"), ev(2), // 1 is missing here
		pos("p1"), ev(1), // and comes late
		pos("p2"), ev(2), // again
		serverFrame("pusher:recovered", `{"replayed":3}`),
		serverFrame("pusher_internal:recovery", `{"token":"t1","position":"p2"}`),
		pos("p4"), ev(4),
		serverFrame("pusher_internal:position", `{"id":"p5","excluded":true}`),
		pos("p6"), // its event never comes: the connection is cut
	}}
	st := &storm{
		runner: &runner{cfg: &config{event: "load"}, closedBy: map[string]int{}, pusherErrors: map[string]int{}},
		subs:   make([]stormSub, 1), chans: make([]stormChannel, 1), res: &stormResult{RecoveryFailed: map[string]int{}, ClosedByServer: map[string]int{}},
		failed: map[string]int{},
	}
	s := &st.subs[0]
	s.last, s.done = -1, make(chan struct{})
	subscribed := make(chan error, 1)
	st.readLoop(s, conn, []byte(`subscribe`), true, subscribed)
	if err := <-subscribed; err != nil {
		t.Fatal(err)
	}
	if len(conn.wrote) != 1 || string(conn.wrote[0]) != "subscribe" {
		t.Errorf("wrote %q, want the subscribe once", conn.wrote)
	}
	if s.socketID != "1.2" || s.token != "t1" || s.position != "p5" || s.pending != "p6" {
		t.Errorf("socket %q token %q position %q pending %q; want 1.2, t1, p5 (excluded), p6 pending", s.socketID, s.token, s.position, s.pending)
	}
	if s.unique.Load() != 4 || s.dups.Load() != 1 || s.disorder.Load() != 1 || s.outcomeNs.Load() == 0 {
		t.Errorf("unique %d dups %d disorder %d outcome %d; want 4, 1, 1, set", s.unique.Load(), s.dups.Load(), s.disorder.Load(), s.outcomeNs.Load())
	}
	if st.recovered != 1 || st.replayed != 3 || st.mismatch != 0 || len(st.closedBy) != 1 {
		t.Errorf("recovered %d replayed %d mismatch %d closed %v; want 1, 3, 0, eof", st.recovered, st.replayed, st.mismatch, st.closedBy)
	}

	// The API accepted 0 to 5; 3 and 5 never came.
	st.chans[0].accepted = seqSet{0b111111}
	st.chans[0].ok.Store(6)
	st.collect()
	if r := st.res; r.Gaps != 2 || r.SubsWithGaps != 1 || r.Duplicates != 1 || r.OutOfOrder != 1 || r.Expected != 6 || r.Received != 4 {
		t.Errorf("gaps %d (%d subs) dups %d out of order %d expected %d received %d; want 2 (1), 1, 1, 6, 4",
			r.Gaps, r.SubsWithGaps, r.Duplicates, r.OutOfOrder, r.Expected, r.Received)
	}
}

// TestSmokeStorm runs a small recovery storm against a real server with
// history and recovery on: every subscriber recovers, nothing is lost,
// duplicated or reordered.
func TestSmokeStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	addr, pid := startHerald(t, "HERALD_APP_HISTORY_EVENTS=100", "HERALD_APP_RECOVERY_WINDOW=2m")
	const subs = 200
	var log bytes.Buffer
	cfg, err := parseFlags([]string{"-storm", "-url", "ws://" + addr, "-key", "smoke-key", "-app-id", "smoke", "-secret", "smoke-secret",
		"-server-pid", strconv.Itoa(pid), "-subs", strconv.Itoa(subs), "-channels", "4", "-rate", "80",
		"-cut-after", "1s", "-cut-for", "1s", "-tail", "500ms"}, &log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := runStorm(ctx, cfg, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	res.writeTable(&log)
	t.Logf("\n%s", log.String())
	if res.Connected != subs || res.Reconnected != subs || res.Recovered != subs || len(res.RecoveryFailed) != 0 {
		t.Errorf("connected %d, reconnected %d, recovered %d of %d; failed %v", res.Connected, res.Reconnected, res.Recovered, subs, res.RecoveryFailed)
	}
	if res.PublishesWhileAway == 0 || res.Replayed == 0 || res.ReplayedMismatch != 0 {
		t.Errorf("%d publishes while away, %d replayed, %d counts wrong", res.PublishesWhileAway, res.Replayed, res.ReplayedMismatch)
	}
	if res.Gaps != 0 || res.Duplicates != 0 || res.OutOfOrder != 0 || res.Received != res.Expected || res.Expected == 0 {
		t.Errorf("received %d of %d: %d gaps, %d duplicates, %d out of order", res.Received, res.Expected, res.Gaps, res.Duplicates, res.OutOfOrder)
	}
	if res.RSSStormKiB <= 0 || res.HWMKiB <= 0 {
		t.Errorf("server RSS not measured: storm peak %d, VmHWM %d", res.RSSStormKiB, res.HWMKiB)
	}
}
