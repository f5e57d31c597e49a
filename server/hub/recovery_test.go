package hub

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/eventlog"
)

// recoveryHub is a hub with a history (5 events a channel, an hour) on a
// clock the test moves, and what a recoverable subscription needs of it.
type recoveryHub struct {
	h      *Hub
	log    *eventlog.Memory
	policy eventlog.Policy
	mu     sync.Mutex
	now    time.Time
}

func newRecoveryHub(t *testing.T) *recoveryHub {
	t.Helper()
	r := &recoveryHub{
		h:      New(zap.NewNop()),
		log:    eventlog.NewMemory(eventlog.Limits{}),
		policy: eventlog.Policy{Events: 5, TTL: time.Hour},
		now:    time.UnixMilli(1_700_000_000_000),
	}
	r.h.SetClock(r.clock)
	t.Cleanup(r.h.Close)
	return r
}

func (r *recoveryHub) clock() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

func (r *recoveryHub) advance(d time.Duration) {
	r.mu.Lock()
	r.now = r.now.Add(d)
	r.mu.Unlock()
}

// publish triggers a kept event on channel (excluding the socket exclude).
func (r *recoveryHub) publish(t *testing.T, channel, name, exclude string) {
	t.Helper()
	kept, err := r.h.PublishKept(r.log, r.policy, r.clock(), Message{AppID: "app", Channel: channel, Event: name, Data: `"` + name + `"`, ExcludeSocketID: exclude})
	if err != nil || !kept {
		t.Fatalf("PublishKept: %v, kept %v", err, kept)
	}
}

// recovery is the Recovery of a subscription of c: resuming from after
// when resume is set.
func (r *recoveryHub) recovery(c *Conn, resume bool, after eventlog.ID) *Recovery {
	return &Recovery{
		Log: r.log, Policy: r.policy, Window: 2 * time.Minute,
		Token:  func(p eventlog.ID, mark string) string { return c.SocketID() + "@" + p.String() + "/" + mark },
		Resume: resume, After: after, Mark: r.log.Epoch(), OldSocket: "old",
	}
}

func (r *recoveryHub) subscribe(t *testing.T, c *Conn, channel string, rec *Recovery) {
	t.Helper()
	if err := r.h.Subscribe(c, channel, SubscribeOptions{Recovery: rec}); err != nil {
		t.Fatal(err)
	}
	r.h.Flush()
}

// seen is what a client of the recovery plugin makes of its frames: the
// events its app got (names, internal ones left out) and its position
// (pusher_internal:position applied once the next frame arrives).
type seen struct {
	events   []string
	position string
	token    string
	pending  string
}

func (s *seen) take(t *testing.T, h *Hub, c *Conn) {
	t.Helper()
	h.Flush()
	for _, f := range takeFrames(t, c) {
		switch f.Event {
		case "pusher_internal:position":
			var d struct {
				ID       string `json:"id"`
				Excluded bool   `json:"excluded"`
			}
			if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
				t.Fatalf("position %q: %v", f.Data, err)
			}
			if d.Excluded {
				s.position = d.ID
			} else {
				s.pending = d.ID
			}
			continue
		case "pusher_internal:recovery":
			var d struct{ Token, Position string }
			if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
				t.Fatalf("recovery %q: %v", f.Data, err)
			}
			s.token, s.position = d.Token, d.Position
			continue
		}
		if s.pending != "" {
			s.position, s.pending = s.pending, ""
		}
		if f.Event == "pusher:recovered" || f.Event == "pusher:recovery_failed" {
			s.events = append(s.events, f.Event+" "+f.Data)
			continue
		}
		s.events = append(s.events, f.Event)
	}
}

func id(t *testing.T, s string) eventlog.ID {
	t.Helper()
	v, err := eventlog.ParseID(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A recoverable subscription gets its secret and position after
// subscription_succeeded, then the position before each kept event, and
// only the position of one it is excluded from; a plain subscriber of the
// channel gets the events alone.
func TestARecoverableSubscriptionGetsPositions(t *testing.T) {
	r := newRecoveryHub(t)
	r.publish(t, "news", "before", "")
	r.h.Flush()
	plain := connect(t, r.h, "app")
	subscribe(t, r.h, plain, "news", nil)
	c := connect(t, r.h, "app")
	r.subscribe(t, c, "news", r.recovery(c, false, eventlog.ID{}))
	var s seen
	s.take(t, r.h, c)
	if s.position != "1700000000000-0" || s.token != c.SocketID()+"@1700000000000-0/"+r.log.Epoch() {
		t.Fatalf("after subscribing: position %q, token %q; want the channel's last event's", s.position, s.token)
	}
	r.advance(time.Millisecond)
	r.publish(t, "news", "one", "")
	r.publish(t, "news", "two", c.SocketID())
	r.publish(t, "news", "three", "")
	r.h.Flush()
	raw, _ := c.Take(nil)
	var got []string
	for _, b := range raw {
		got = append(got, string(b))
	}
	want := []string{
		`{"event":"pusher_internal:position","channel":"news","data":"{\"id\":\"1700000000001-0\"}"}`,
		`{"event":"one","channel":"news","data":"\"one\""}`,
		`{"event":"pusher_internal:position","channel":"news","data":"{\"id\":\"1700000000001-1\",\"excluded\":true}"}`,
		`{"event":"pusher_internal:position","channel":"news","data":"{\"id\":\"1700000000001-2\"}"}`,
		`{"event":"three","channel":"news","data":"\"three\""}`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the recoverable subscriber got\n%s\nwant\n%s", got, want)
	}
	if got := events(takeFrames(t, plain)); got != "pusher_internal:subscription_succeeded,one,two,three" {
		t.Fatalf("the plain subscriber got %s", got)
	}
}

// A connection that comes back from a position gets, after
// subscription_succeeded, every event it missed once and in order (not the
// one it was excluded from), then pusher:recovered, then newer events —
// also those published while its recovery waited for its turn.
func TestAResumedSubscriptionGetsWhatItMissedOnceInOrder(t *testing.T) {
	r := newRecoveryHub(t)
	old := connect(t, r.h, "app")
	r.subscribe(t, old, "news", r.recovery(old, false, eventlog.ID{}))
	var s seen
	r.publish(t, "news", "e1", "")
	s.take(t, r.h, old)
	r.h.Remove(old) // the connection drops after e1
	r.publish(t, "news", "e2", "")
	r.publish(t, "news", "mine", "old") // the old connection's own trigger
	r.publish(t, "news", "e3", "")

	c := connect(t, r.h, "app")
	r.subscribe(t, c, "news", r.recovery(c, true, id(t, s.position)))
	r.publish(t, "news", "e4", "")
	var after seen
	after.take(t, r.h, c)
	want := []string{"pusher_internal:subscription_succeeded", "e2", "e3", `pusher:recovered {"replayed":2}`, "e4"}
	if !slices.Equal(after.events, want) {
		t.Fatalf("the new connection got %v, want %v", after.events, want)
	}
	if last := r.log.Last("app", "news"); after.position != last.String() {
		t.Fatalf("its position is %q, want the last event's, %s", after.position, last)
	}
	if st := r.h.RecoveryStats(); st.Recovered != 1 {
		t.Fatalf("stats %+v, want one recovery", st)
	}
}

// Every kept event published while a connection resumes arrives once and
// in order, however the publishes and the recovery interleave.
func TestAResumeUnderConcurrentPublishesLosesAndRepeatsNothing(t *testing.T) {
	r := newRecoveryHub(t)
	r.policy.Events = 1000
	old := connect(t, r.h, "app")
	r.subscribe(t, old, "news", r.recovery(old, false, eventlog.ID{}))
	var s seen
	s.take(t, r.h, old)
	r.h.Remove(old)
	const n = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			r.publish(t, "news", fmt.Sprint(i), "")
		}
	}()
	c := connect(t, r.h, "app")
	r.subscribe(t, c, "news", r.recovery(c, true, id(t, s.position)))
	<-done
	var got seen
	got.take(t, r.h, c)
	var names []string
	for _, e := range got.events {
		if e != "pusher_internal:subscription_succeeded" && !slices.Contains([]string{"pusher:recovered"}, e[:min(len(e), 16)]) {
			names = append(names, e)
		}
	}
	for i := range n {
		if i >= len(names) || names[i] != fmt.Sprint(i) {
			t.Fatalf("event %d: got %v", i, names)
		}
	}
	if len(names) != n {
		t.Fatalf("%d events, want %d: %v", len(names), n, names)
	}
}

// Where the log cannot prove nothing is missing, the recovery fails
// closed: pusher:recovery_failed with its reason, and no event replayed.
func TestAResumeFailsClosed(t *testing.T) {
	for _, c := range []struct {
		name   string
		before func(r *recoveryHub, t *testing.T)
		reason string
		// restarted: the token is of a log that went with its process,
		// whose epoch is not this one's.
		restarted bool
	}{
		{"the gap is larger than the channel keeps", func(r *recoveryHub, t *testing.T) {
			for i := range 6 { // one more than the 5 kept: e1's successor is gone
				r.publish(t, "news", fmt.Sprint("m", i), "")
			}
		}, "gap", false},
		{"the first missed event is older than the window", func(r *recoveryHub, t *testing.T) {
			r.publish(t, "news", "m", "")
			r.advance(2*time.Minute + time.Millisecond)
		}, "expired", false},
		{"the first missed event is older than the window, later ones within it", func(r *recoveryHub, t *testing.T) {
			r.publish(t, "news", "m1", "")
			r.advance(2*time.Minute + time.Millisecond)
			r.publish(t, "news", "m2", "") // within the window: it does not stand for m1
		}, "expired", false},
		{"the missed events are past the history's TTL, within the window", func(r *recoveryHub, t *testing.T) {
			r.policy.TTL = time.Minute // shorter than the 2 minute window
			r.publish(t, "news", "m", "")
			r.advance(time.Minute + time.Millisecond)
		}, "gap", false},
		{"the position is past the channel's last event", nil, "refused", false},
		{"the position is of a log that went with its process", func(*recoveryHub, *testing.T) {}, "gap", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRecoveryHub(t)
			old := connect(t, r.h, "app")
			r.subscribe(t, old, "news", r.recovery(old, false, eventlog.ID{}))
			r.publish(t, "news", "e1", "")
			var s seen
			s.take(t, r.h, old)
			r.h.Remove(old)
			from := id(t, s.position)
			if c.before != nil {
				c.before(r, t)
			} else {
				from.Seq += 5
			}
			nc := connect(t, r.h, "app")
			rec := r.recovery(nc, true, from)
			if c.restarted {
				rec.Mark = eventlog.NewMemory(eventlog.Limits{}).Epoch()
			}
			r.subscribe(t, nc, "news", rec)
			var got seen
			got.take(t, r.h, nc)
			want := []string{"pusher_internal:subscription_succeeded", `pusher:recovery_failed {"reason":"` + c.reason + `"}`}
			if !slices.Equal(got.events, want) {
				t.Fatalf("got %v, want %v", got.events, want)
			}
			if got.token == "" {
				t.Fatal("no secret for the next recovery")
			}
		})
	}
}

// Plain and recoverable subscribers of one channel, some leaving (which
// moves others in the subscriber list), each get what their kind gets: the
// recoverable ones a position before each kept event, the plain ones not.
func TestPositionsFollowTheirSubscribersAsOthersLeave(t *testing.T) {
	r := newRecoveryHub(t)
	var conns []*Conn
	recoverable := map[*Conn]bool{}
	for i := range 8 {
		c := connect(t, r.h, "app")
		var rec *Recovery
		if i%3 == 0 {
			rec = r.recovery(c, false, eventlog.ID{})
			recoverable[c] = true
		}
		r.subscribe(t, c, "news", rec)
		takeFrames(t, c)
		conns = append(conns, c)
	}
	for _, i := range []int{0, 4, 1} { // a recoverable one first: the last moves into its place
		r.h.Remove(conns[i])
		conns[i] = nil
	}
	r.publish(t, "news", "ev", "")
	r.h.Flush()
	for i, c := range conns {
		if c == nil {
			continue
		}
		want := "ev"
		if recoverable[c] {
			want = "pusher_internal:position,ev"
		}
		if got := events(takeFrames(t, c)); got != want {
			t.Errorf("subscriber %d (recoverable %v) got %s, want %s", i, recoverable[c], got, want)
		}
	}
}

// A resumed subscription of a cache channel gets the missed events, the
// last one among them, rather than the cached event on top; a fresh
// recoverable one gets the cached event as any subscriber does.
func TestAResumedCacheChannelGetsItsLastEventOnce(t *testing.T) {
	r := newRecoveryHub(t)
	old := connect(t, r.h, "app")
	r.subscribe(t, old, "cache-news", r.recovery(old, false, eventlog.ID{}))
	var s seen
	s.take(t, r.h, old)
	r.h.Remove(old)
	if _, err := r.h.PublishKept(r.log, r.policy, r.clock(), Message{AppID: "app", Channel: "cache-news", Event: "last", Data: "{}", Cache: true}); err != nil {
		t.Fatal(err)
	}
	r.h.Flush()
	c := connect(t, r.h, "app")
	r.subscribe(t, c, "cache-news", r.recovery(c, true, id(t, s.position)))
	var got seen
	got.take(t, r.h, c)
	if want := []string{"pusher_internal:subscription_succeeded", "last", `pusher:recovered {"replayed":1}`}; !slices.Equal(got.events, want) {
		t.Fatalf("the resumed subscriber got %v, want %v", got.events, want)
	}
	fresh := connect(t, r.h, "app")
	r.subscribe(t, fresh, "cache-news", r.recovery(fresh, false, eventlog.ID{}))
	var f seen
	f.take(t, r.h, fresh)
	if want := []string{"pusher_internal:subscription_succeeded", "last"}; !slices.Equal(f.events, want) {
		t.Fatalf("a fresh subscriber got %v, want %v", f.events, want)
	}
}

// A kept publish of several events (a batch, here on two channels) gives
// each event its own position: a recoverable subscriber gets the right one
// before each, and a resume from the one after the first event replays
// exactly the rest.
func TestEachEventOfAKeptPublishHasItsPosition(t *testing.T) {
	r := newRecoveryHub(t)
	old := connect(t, r.h, "app")
	r.subscribe(t, old, "news", r.recovery(old, false, eventlog.ID{}))
	r.subscribe(t, old, "other", r.recovery(old, false, eventlog.ID{}))
	takeFrames(t, old)
	r.advance(time.Millisecond)
	var ms []Message
	for _, e := range []struct{ channel, name string }{{"news", "a"}, {"news", "b"}, {"other", "x"}, {"news", "c"}} {
		ms = append(ms, Message{AppID: "app", Channel: e.channel, Event: e.name, Data: "{}"})
	}
	if kept, err := r.h.PublishKept(r.log, r.policy, r.clock(), ms...); err != nil || !kept {
		t.Fatalf("PublishKept: %v, kept %v", err, kept)
	}
	r.h.Flush()
	// The position announced before each event, per channel: the two
	// channels' workers may interleave their frames, never split a pair.
	positions, pending := map[string]string{}, map[string]string{}
	for _, f := range takeFrames(t, old) {
		if f.Event == "pusher_internal:position" {
			var d struct{ ID string }
			if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
				t.Fatalf("position %q: %v", f.Data, err)
			}
			pending[f.Channel] = d.ID
			continue
		}
		positions[f.Channel+" "+f.Event], pending[f.Channel] = pending[f.Channel], ""
	}
	want := map[string]string{"news a": "1700000000001-0", "news b": "1700000000001-1", "other x": "1700000000001-0", "news c": "1700000000001-2"}
	if !maps.Equal(positions, want) {
		t.Fatalf("positions before each event %v, want %v", positions, want)
	}
	r.h.Remove(old) // the connection drops; it got a, and says so
	c := connect(t, r.h, "app")
	r.subscribe(t, c, "news", r.recovery(c, true, id(t, positions["news a"])))
	var got seen
	got.take(t, r.h, c)
	if want := []string{"pusher_internal:subscription_succeeded", "b", "c", `pusher:recovered {"replayed":2}`}; !slices.Equal(got.events, want) {
		t.Fatalf("the resume from after a got %v, want %v", got.events, want)
	}
}

// clusterRecoveryHub is a recoveryHub in cluster mode on a cluster the
// test answers (joinsCluster), and a connection of it.
func clusterRecoveryHub(t *testing.T) (*recoveryHub, *joinsCluster) {
	t.Helper()
	r := newRecoveryHub(t)
	fc := &joinsCluster{}
	r.h.SetCluster(fc)
	return r, fc
}

// answer completes the last Join of fc, which asked for recovery, with s
// (its app, channel, socket and token filled in).
func (r *recoveryHub) answer(t *testing.T, fc *joinsCluster, s Snapshot) {
	t.Helper()
	fc.mu.Lock()
	j := fc.joins[len(fc.joins)-1]
	fc.mu.Unlock()
	if j.Recovery == nil {
		t.Fatalf("the join %+v does not ask for recovery", j)
	}
	s.AppID, s.Channel, s.SocketID, s.Token = j.AppID, j.Channel, j.SocketID, j.Token
	r.h.ReceiveSnapshot(s)
	r.h.Flush()
}

// framesOf names each frame, with its data for those of recovery.
func framesOf(fs []frame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Event
		if strings.HasPrefix(f.Event, "pusher:recover") || f.Event == "pusher_internal:recovery" {
			out[i] += " " + f.Data
		}
	}
	return out
}

// When the cluster cannot recover a subscription that asked for it (its
// Snapshot has no Recovery), a resume is told so, unavailable, and every
// such subscription gets a secret that recovers nothing: never silence.
func TestAClusterThatCannotRecoverSaysSo(t *testing.T) {
	r, fc := clusterRecoveryHub(t)
	empty := `pusher_internal:recovery {"token":"","position":""}`
	for _, c := range []struct {
		name   string
		resume bool
		want   []string
	}{
		{"a resume", true, []string{"pusher_internal:subscription_succeeded", `pusher:recovery_failed {"reason":"unavailable"}`, empty}},
		{"a recoverable subscription", false, []string{"pusher_internal:subscription_succeeded", empty}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := connect(t, r.h, "app")
			r.subscribe(t, conn, "news", r.recovery(conn, c.resume, id(t, "1-0")))
			r.answer(t, fc, Snapshot{})
			if got := framesOf(takeFrames(t, conn)); !slices.Equal(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
	if st := r.h.RecoveryStats(); st.Error != 1 {
		t.Fatalf("stats %+v, want one recovery unavailable", st)
	}
}

// On a cache channel in a cluster, a resume gets the missed events (the
// last one among them) rather than the cached event on top; a recoverable
// subscription that does not resume gets the cached event as any does.
func TestAClusteredResumeOfACacheChannelGetsItsLastEventOnce(t *testing.T) {
	r, fc := clusterRecoveryHub(t)
	last := eventlog.Event{ID: id(t, "1700000000000-0"), Name: "last", Data: "{}"}
	answer := Snapshot{Cached: true, CacheEvent: "last", CacheData: "{}",
		Recovery: &SnapshotRecovery{Position: last.ID, Mark: "m", Events: []eventlog.Event{last}}}
	for _, c := range []struct {
		name   string
		resume bool
		want   []string
	}{
		{"a resume", true, []string{"pusher_internal:subscription_succeeded", "last", `pusher:recovered {"replayed":1}`}},
		{"a recoverable subscription", false, []string{"pusher_internal:subscription_succeeded", "last"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := connect(t, r.h, "app")
			r.subscribe(t, conn, "cache-news", r.recovery(conn, c.resume, id(t, "1-0")))
			r.answer(t, fc, answer)
			var got seen
			got.take(t, r.h, conn)
			if !slices.Equal(got.events, c.want) {
				t.Fatalf("got %v, want %v", got.events, c.want)
			}
			if got.position != last.ID.String() || got.token == "" {
				t.Fatalf("position %q, token %q: want the snapshot's position and a secret", got.position, got.token)
			}
		})
	}
}

// A kept event (one with a position) on a channel that never had a
// recoverable subscriber reaches its plain subscribers as it is.
func TestAKeptEventReachesPlainSubscribersAsItIs(t *testing.T) {
	r := newRecoveryHub(t)
	plain := connect(t, r.h, "app")
	subscribe(t, r.h, plain, "news", nil)
	takeFrames(t, plain)
	r.publish(t, "news", "e", "")
	r.h.Flush()
	if got := events(takeFrames(t, plain)); got != "e" {
		t.Fatalf("the plain subscriber got %s, want the event alone", got)
	}
}

// recoverableAndPlain is a recoveryHub whose channel news has a
// recoverable subscriber, rc, then a plain one.
func recoverableAndPlain(t *testing.T) (r *recoveryHub, rc, plain *Conn) {
	t.Helper()
	r = newRecoveryHub(t)
	rc = connect(t, r.h, "app")
	r.subscribe(t, rc, "news", r.recovery(rc, false, eventlog.ID{}))
	plain = connect(t, r.h, "app")
	subscribe(t, r.h, plain, "news", nil)
	return r, rc, plain
}

// A kept event counts as delivered (AppStats.Delivered) once for each
// subscriber that gets it, recoverable (after its position) or plain; a
// recoverable subscriber excluded from it gets its position only, which
// does not count.
func TestKeptEventsCountAsDeliveredOncePerSubscriber(t *testing.T) {
	r, rc, plain := recoverableAndPlain(t)
	r.publish(t, "news", "both", "")
	r.publish(t, "news", "not-rc", rc.SocketID())
	r.publish(t, "news", "not-plain", plain.SocketID())
	r.h.Flush()
	if got := events(takeFrames(t, rc)); got != "pusher_internal:subscription_succeeded,pusher_internal:recovery,pusher_internal:position,both,pusher_internal:position,pusher_internal:position,not-plain" {
		t.Fatalf("the recoverable subscriber got %s", got)
	}
	if st := r.h.AppStats(); len(st) != 1 || st[0].Delivered != 4 {
		t.Fatalf("stats %+v, want 4 events delivered", st)
	}
}

// A plain subscriber leaving a channel leaves its recoverable subscribers
// recoverable: they still get a position before each kept event.
func TestAPlainSubscriberLeavingLeavesTheOthersPositions(t *testing.T) {
	r, rc, plain := recoverableAndPlain(t)
	takeFrames(t, rc)
	r.h.Unsubscribe(plain, "news")
	r.publish(t, "news", "e", "")
	r.h.Flush()
	if got := events(takeFrames(t, rc)); got != "pusher_internal:position,e" {
		t.Fatalf("the recoverable subscriber got %s, want the event after its position", got)
	}
}

// keepLockLog is a history that records, when a recoverable subscription
// reads the channel's last position, whether its app's keep lock was held.
type keepLockLog struct {
	*eventlog.Memory
	h    *Hub
	held []bool
}

func (l *keepLockLog) Last(app, channel string) eventlog.ID {
	mu := l.h.keepLock(app)
	free := mu.TryLock()
	if free {
		mu.Unlock()
	}
	l.held = append(l.held, !free)
	return l.Memory.Last(app, channel)
}

// A recoverable subscription reads the position it starts from under its
// app's keep lock, so that no kept publish comes between that read and its
// recovery's turn in the channel's worker (a newer event sent live before
// the replay of older ones).
func TestARecoverableSubscriptionReadsItsPositionUnderTheKeepLock(t *testing.T) {
	r := newRecoveryHub(t)
	log := &keepLockLog{Memory: r.log, h: r.h}
	for _, resume := range []bool{false, true} {
		c := connect(t, r.h, "app")
		rec := r.recovery(c, resume, eventlog.ID{})
		rec.Log = log
		r.subscribe(t, c, "news", rec)
	}
	if !slices.Equal(log.held, []bool{true, true}) {
		t.Fatalf("the keep lock was held at each read of the last position: %v, want both", log.held)
	}
}

// A clustered resume fails for the reason the cluster gives (its history
// does not hold what was missed), or for its own when it was refused
// before it came here, however complete the cluster's answer.
func TestAClusteredResumeFailsForTheClustersReasonOrItsOwn(t *testing.T) {
	r, fc := clusterRecoveryHub(t)
	missed := eventlog.Event{ID: id(t, "1700000000000-0"), Name: "missed", Data: "{}"}
	for _, c := range []struct {
		name    string
		refused string
		answer  SnapshotRecovery
		reason  string
	}{
		{"the cluster's history has a gap", "", SnapshotRecovery{Position: missed.ID, Mark: "m", Reason: RecoveryGap}, RecoveryGap},
		{"a resume refused before", RecoveryRefused, SnapshotRecovery{Position: missed.ID, Mark: "m", Events: []eventlog.Event{missed}}, RecoveryRefused},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := connect(t, r.h, "app")
			rec := r.recovery(conn, true, id(t, "1-0"))
			rec.Refused = c.refused
			r.subscribe(t, conn, "news", rec)
			r.answer(t, fc, Snapshot{Recovery: &c.answer})
			var got seen
			got.take(t, r.h, conn)
			want := []string{"pusher_internal:subscription_succeeded", `pusher:recovery_failed {"reason":"` + c.reason + `"}`}
			if !slices.Equal(got.events, want) || got.position != missed.ID.String() {
				t.Fatalf("got %v at position %q, want %v at the snapshot's", got.events, got.position, want)
			}
		})
	}
}
