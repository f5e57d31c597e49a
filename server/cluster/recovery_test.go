package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// recovering is a subscriber that uses recovery as the plugin does: it
// keeps the token the cluster gave it and the position of the last event
// it got on its channel.
type recovering struct {
	*client
	channel string
	policy  eventlog.Policy
	window  time.Duration
}

// recoverable subscribes a new connection of app on n to channel,
// recoverably, resuming old's subscription when old is set.
func recoverable(n *node, channel string, p eventlog.Policy, window time.Duration, old *recovering) *recovering {
	n.t.Helper()
	r := &recovering{client: n.connect("app"), channel: channel, policy: p, window: window}
	rec := &hub.Recovery{
		Policy: p, Window: window,
		// The tests read the token back: position and mark, in the clear.
		Token: func(position eventlog.ID, mark string) string { return position.String() + "|" + mark },
	}
	if old != nil {
		token, position := old.recoveryState()
		_, mark, _ := strings.Cut(token, "|")
		var after eventlog.ID
		if position != "" { // else old could not be recovered: from the start
			var err error
			if after, err = eventlog.ParseID(position); err != nil {
				n.t.Fatalf("position %q: %v", position, err)
			}
		}
		rec.Resume, rec.After, rec.Mark, rec.OldSocket = true, after, mark, old.conn.SocketID()
	}
	if err := n.hub.Subscribe(r.conn, channel, hub.SubscribeOptions{Recovery: rec}); err != nil {
		n.t.Fatal(err)
	}
	r.wait(channel, "pusher_internal:recovery")
	return r
}

// recoveryState is what the plugin would send on a reconnect: the token of
// the last pusher_internal:recovery, and the position of the last event
// received (a pusher_internal:position counts once the next frame of the
// channel is there, or at once when it says the event was excluded).
func (r *recovering) recoveryState() (token, position string) {
	r.take()
	r.mu.Lock()
	defer r.mu.Unlock()
	pending := ""
	for _, f := range r.frames {
		if f.Channel != r.channel {
			continue
		}
		var d struct {
			Token, Position, ID string
			Excluded            bool
		}
		switch f.Event {
		case "pusher_internal:recovery":
			json.Unmarshal([]byte(f.Data), &d)
			token, position = d.Token, d.Position
		case "pusher_internal:position":
			json.Unmarshal([]byte(f.Data), &d)
			if d.Excluded {
				position = d.ID
			} else {
				pending = d.ID
			}
		default:
			if pending != "" {
				position, pending = pending, ""
			}
		}
	}
	return token, position
}

// keepFirst forgets what r received after its channel's first n events:
// r is as a client the connection dropped from under then.
func (r *recovering) keepFirst(n int) {
	r.take()
	r.mu.Lock()
	defer r.mu.Unlock()
	events := 0
	for i, f := range r.frames {
		if f.Channel == r.channel && !strings.HasPrefix(f.Event, "pusher") {
			if events++; events == n {
				r.frames = r.frames[:i+1]
				return
			}
		}
	}
}

// datas returns the data of the channel's events the app sees (not the
// protocol's own), in order.
func (r *recovering) datas() []string {
	return r.collect(func(f frame) (string, bool) { return f.Data, !strings.HasPrefix(f.Event, "pusher") })
}

// positions are the ids of the pusher_internal:position frames r got on
// its channel, in order.
func (r *recovering) positions() []string {
	return r.collect(func(f frame) (string, bool) {
		var d struct{ ID string }
		json.Unmarshal([]byte(f.Data), &d)
		return d.ID, f.Event == "pusher_internal:position"
	})
}

// collect returns what pick takes of the frames r got on its channel, in
// order.
func (r *recovering) collect(pick func(frame) (string, bool)) []string {
	r.take()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, f := range r.frames {
		if v, ok := pick(f); ok && f.Channel == r.channel {
			out = append(out, v)
		}
	}
	return out
}

// outcome waits for the resume's outcome: "" and the count replayed for
// pusher:recovered, else the reason of pusher:recovery_failed.
func (r *recovering) outcome() (reason string, replayed int) {
	r.n.t.Helper()
	wait.Until(r.n.t, "the resume's outcome", func() bool {
		return r.count(r.channel, "pusher:recovered")+r.count(r.channel, "pusher:recovery_failed") > 0
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.frames {
		var d struct {
			Reason   string
			Replayed int
		}
		json.Unmarshal([]byte(f.Data), &d)
		switch {
		case f.Channel != r.channel:
		case f.Event == "pusher:recovered":
			return "", d.Replayed
		case f.Event == "pusher:recovery_failed":
			return d.Reason, 0
		}
	}
	return "", 0
}

// keptPublisher returns a function that triggers, on n, an event of app
// with data on channel, kept in store (n's cluster's history) under p.
func keptPublisher(t *testing.T, n *node, store *EventLogStore, p eventlog.Policy) func(channel, data, exclude string) {
	publish := keptPublisherAt(t, n, store, p)
	return func(channel, data, exclude string) {
		t.Helper()
		publish(channel, data, exclude, time.Now())
	}
}

// keptPublisherAt is keptPublisher whose events are kept as of at (the
// history's clock), so that a test makes them old without waiting. A
// channel's events are never kept as older than its newest.
func keptPublisherAt(t *testing.T, n *node, store *EventLogStore, p eventlog.Policy) func(channel, data, exclude string, at time.Time) {
	return func(channel, data, exclude string, at time.Time) {
		t.Helper()
		kept, err := n.hub.PublishKept(store, p, at, hub.Message{AppID: "app", Channel: channel, Event: "tick", Data: data, ExcludeSocketID: exclude})
		if err != nil || !kept {
			t.Errorf("publish %s: kept %v, %v", data, kept, err)
		}
	}
}

// A subscription made recoverable on one node is resumed on another (the
// usual case behind a load balancer), on one Redis, over shards and over a
// Redis Cluster: it gets every event it missed, once
// and in order, before any newer one, but for one its old connection was
// excluded from, then pusher:recovered; newer events go on live, with
// positions, and a second resume from the new connection works as well.
func TestClusterRecoveryOnAnotherNode(t *testing.T) {
	onEachTopology(t, func(t *testing.T, start startCluster) {
		ns := start(3)
		p := eventlog.Policy{Events: 100, TTL: time.Hour}
		publish := keptPublisher(t, ns[2], ns[2].c.EventLog(eventlog.Limits{}), p)
		old := recoverable(ns[0], "news", p, time.Minute, nil)
		for i := 1; i <= 3; i++ {
			publish("news", fmt.Sprint(i), "")
		}
		wait.Until(t, "the old connection gets 1 to 3", func() bool { return len(old.datas()) == 3 })
		// The connection drops: what follows it misses.
		ns[0].hub.Remove(old.conn)
		publish("news", "4", "")
		publish("news", "5", old.conn.SocketID()) // not for it live either
		publish("news", "6", "")

		again := recoverable(ns[1], "news", p, time.Minute, old)
		if reason, replayed := again.outcome(); reason != "" || replayed != 2 {
			t.Fatalf("resume: %q, %d replayed; want recovered, 2", reason, replayed)
		}
		publish("news", "7", "")
		wait.Until(t, "7 arrives live", func() bool { return len(again.datas()) == 3 })
		if got := again.datas(); !slices.Equal(got, []string{"4", "6", "7"}) {
			t.Fatalf("the new connection got %v, want 4 6 7", got)
		}

		ns[1].hub.Remove(again.conn)
		publish("news", "8", "")
		third := recoverable(ns[2], "news", p, time.Minute, again)
		if reason, replayed := third.outcome(); reason != "" || replayed != 1 {
			t.Fatalf("second resume: %q, %d replayed; want recovered, 1", reason, replayed)
		}
		if got := third.datas(); !slices.Equal(got, []string{"8"}) {
			t.Fatalf("the third connection got %v, want 8", got)
		}
	})
}

// Events published at once from every node get positions in the order each
// subscriber receives them, on every node: a resume from any of them
// replays exactly what came after it.
func TestClusterRecoveryPositionsFollowDeliveryOrder(t *testing.T) {
	ns := cluster(t, testredis.Start(t), 3)
	p := eventlog.Policy{Events: 1000, TTL: time.Hour}
	subs := make([]*recovering, len(ns))
	for i, n := range ns {
		subs[i] = recoverable(n, "feed", p, time.Minute, nil)
	}
	const each = 60
	var wg sync.WaitGroup
	for i, n := range ns {
		publish := keptPublisher(t, n, n.c.EventLog(eventlog.Limits{}), p)
		wg.Go(func() {
			for j := range each {
				publish("feed", fmt.Sprintf("n%d-%d", i, j), "")
			}
		})
	}
	wg.Wait()
	total := each * len(ns)
	for _, s := range subs {
		wait.Until(t, "every event delivered", func() bool { return len(s.datas()) == total })
	}
	order := subs[0].datas()
	for i, s := range subs {
		// One order on every node, and positions increasing along it.
		if got := s.datas(); !slices.Equal(got, order) {
			t.Fatalf("node %d delivered another order", i+1)
		}
		var last eventlog.ID
		for _, f := range s.frames {
			if f.Event != "pusher_internal:position" {
				continue
			}
			var d struct{ ID string }
			json.Unmarshal([]byte(f.Data), &d)
			id, err := eventlog.ParseID(d.ID)
			if err != nil || !last.Less(id) {
				t.Fatalf("node %d: position %q after %v", i+1, d.ID, last)
			}
			last = id
		}
	}
	// Cut a copy of the first subscriber's frames at a third: its resume
	// gets the other two thirds, exactly.
	cut := subs[0]
	cut.keepFirst(total / 3)
	ns[0].hub.Remove(cut.conn)
	again := recoverable(ns[1], "feed", p, time.Minute, cut)
	if reason, replayed := again.outcome(); reason != "" || replayed != total-total/3 {
		t.Fatalf("resume: %q, %d replayed; want recovered, %d", reason, replayed, total-total/3)
	}
	if got := again.datas(); !slices.Equal(got, order[total/3:]) {
		t.Fatalf("replayed %d events, not the %d after the position in order", len(got), total-total/3)
	}
}

// Where the history cannot prove nothing was lost, a resume fails closed,
// with the reason, and the subscription is recoverable again from where it
// now is.
func TestClusterRecoveryFailsClosed(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	store := ns[0].c.EventLog(eventlog.Limits{MaxChannels: 2})
	p := eventlog.Policy{Events: 3, TTL: time.Hour}
	publish := keptPublisher(t, ns[0], store, p)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()

	// cutAfter subscribes on node 1, gets one event, and drops; then more
	// events, with what happens between, before the resume on node 2.
	cutAfter := func(channel string, window time.Duration, between func()) *recovering {
		t.Helper()
		old := recoverable(ns[0], channel, p, window, nil)
		publish(channel, "first", "")
		wait.Until(t, "the first event", func() bool { return len(old.datas()) == 1 })
		ns[0].hub.Remove(old.conn)
		between()
		return recoverable(ns[1], channel, p, window, old)
	}
	for _, tc := range []struct {
		name, reason string
		window       time.Duration
		between      func(channel string)
	}{
		{"the channel dropped more than it keeps", "gap", time.Minute, func(ch string) {
			for i := range 4 {
				publish(ch, fmt.Sprint(i), "")
			}
		}},
		{"the first missed event is older than the window", "expired", time.Millisecond, func(ch string) {
			publish(ch, "late", "")
			time.Sleep(5 * time.Millisecond) // the clock the window is measured on, not a wait for an event
		}},
		{"the channel was dropped whole", "gap", time.Minute, func(ch string) {
			publish(ch, "lost", "")
			publish(ch+"-a", "x", "") // two channels more than the app may keep: ch goes
			publish(ch+"-b", "x", "")
		}},
		{"a node lost Redis for a moment (a failover may have lost the last appends)", "gap", time.Minute, func(ch string) {
			resyncs := ns[0].c.Stats().Resyncs
			ns[0].m().setHealthy(false, errors.New("a connection reset"))
			wait.Until(t, "node 1 back, its record rebuilt", func() bool { return ns[0].c.Stats().Resyncs > resyncs })
			publish(ch, "after", "")
		}},
		{"another Redis server answers (a failover behind one address)", "gap", time.Minute, func(ch string) {
			ns[0].m().serverChanged("new", "old")
			wait.Until(t, "the history's new generation", func() bool { return !ns[0].m().historySuspect.Load() })
			publish(ch, "after", "")
		}},
		{"Redis lost its data", "gap", time.Minute, func(ch string) {
			resyncs := ns[1].c.Stats().Resyncs
			if err := rdb.FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			wait.Until(t, "the nodes rebuild", func() bool { return ns[1].c.Stats().Resyncs > resyncs })
			publish(ch, "after", "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := strings.ReplaceAll(tc.name, " ", "-")
			again := cutAfter(ch, tc.window, func() { tc.between(ch) })
			if reason, _ := again.outcome(); reason != tc.reason {
				t.Fatalf("resume: %q, want %q", reason, tc.reason)
			}
			if got := again.datas(); len(got) != 0 {
				t.Fatalf("a failed resume delivered %v", got)
			}
			publish(ch, "next", "")
			wait.Until(t, "the next event", func() bool { return len(again.datas()) == 1 })
			if token, position := again.recoveryState(); token == "" || position == "" {
				t.Fatal("no recovery state after a failed resume")
			}
		})
	}
}

// A resume from a position past the channel's newest event is refused (on
// a channel without events, whose events may be gone, it is a gap); a
// channel that had no history when the subscription was made, and still
// has none, recovers with nothing to replay.
func TestClusterRecoveryRefusesAPositionNeverReached(t *testing.T) {
	ns := cluster(t, testredis.Start(t), 2)
	p := eventlog.Policy{Events: 10, TTL: time.Hour}
	empty := recoverable(ns[0], "quiet", p, time.Minute, nil)
	ns[0].hub.Remove(empty.conn)
	if reason, replayed := recoverable(ns[1], "quiet", p, time.Minute, empty).outcome(); reason != "" || replayed != 0 {
		t.Fatalf("resume of a quiet channel: %q, %d; want recovered, 0", reason, replayed)
	}
	publish := keptPublisher(t, ns[0], ns[0].c.EventLog(eventlog.Limits{}), p)
	for ch, want := range map[string]string{"busy": "refused", "quiet2": "gap"} {
		forged := recoverable(ns[0], ch, p, time.Minute, nil)
		if ch == "busy" {
			publish(ch, "one", "")
			wait.Until(t, "the event", func() bool { return len(forged.datas()) == 1 })
		}
		forged.mu.Lock()
		forged.frames = append(forged.frames, frame{Event: "pusher_internal:position", Channel: ch, Data: `{"id":"99999999999999-0","excluded":true}`})
		forged.mu.Unlock()
		ns[0].hub.Remove(forged.conn)
		if reason, _ := recoverable(ns[1], ch, p, time.Minute, forged).outcome(); reason != want {
			t.Fatalf("%s: resume from a position never reached: %q, want %q", ch, reason, want)
		}
	}
}

// A resume whose missed events may have expired with the whole history of
// the app (its count of drops starts again then) is a gap: a subscription
// made, and a position taken, longer than the TTL ago, on a channel whose
// log began after it.
func TestClusterRecoveryPastTheTTLOfAHistoryThatWentWhole(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	p := eventlog.Policy{Events: 10, TTL: time.Hour}
	old := recoverable(ns[0], "news", p, 3*time.Hour, nil)
	ns[0].hub.Remove(old.conn)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if keys, err := rdb.Keys(t.Context(), "*hist:{app}*").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("history before any event: %v, %v", keys, err)
	}
	// The subscription as if made two hours ago: its mark's time moved
	// back (what a history gone whole since would leave: nothing to tell).
	old.mu.Lock()
	for i, f := range old.frames {
		if f.Event == "pusher_internal:recovery" {
			var d struct{ Token, Position string }
			json.Unmarshal([]byte(f.Data), &d)
			cut := strings.LastIndexByte(d.Token, '/')
			d.Token = d.Token[:cut+1] + fmt.Sprint(time.Now().Add(-2*time.Hour).UnixMilli())
			data, _ := json.Marshal(map[string]string{"token": d.Token, "position": d.Position})
			old.frames[i].Data = string(data)
		}
	}
	old.mu.Unlock()
	keptPublisher(t, ns[0], ns[0].c.EventLog(eventlog.Limits{}), p)("news", "after", "")
	again := recoverable(ns[1], "news", p, 3*time.Hour, old)
	if reason, _ := again.outcome(); reason != "gap" {
		t.Fatalf("resume: %q, want gap", reason)
	}
}
