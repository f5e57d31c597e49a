package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// A resume is judged by the app's settings when it comes, which the join
// sends to Redis: its window (in milliseconds) is measured on the first
// missed event, however recent the later ones; an event count shrunk
// below what the channel's log still holds is a gap, not the newest
// events replayed as if they were all. The events are kept as of a time
// in the past (the history's clock) rather than waited for.
func TestClusterRecoveryUnderTheAppsSettingsNow(t *testing.T) {
	ns := cluster(t, testredis.Start(t), 2)
	p := eventlog.Policy{Events: 100, TTL: time.Hour}
	publish := keptPublisherAt(t, ns[1], ns[1].c.EventLog(eventlog.Limits{}), p)
	ago := func(ds ...time.Duration) []time.Duration { return ds }
	for _, tc := range []struct {
		name string
		// seen is the age of the event the old connection got, missed
		// those of the events it missed, oldest first.
		seen    time.Duration
		missed  []time.Duration
		window  time.Duration
		events  int // the app's event count at the resume
		reason  string
		replays int
	}{
		// A window taken for seconds would be 60 ms here.
		{"missed within the window, long before a thousandth of it", 40 * time.Second, ago(30*time.Second, 20*time.Second), time.Minute, 100, "", 2},
		{"the first missed older than the window, the later within it", 3 * time.Minute, ago(2*time.Minute, 10*time.Second, 0), time.Minute, 100, "expired", 0},
		{"every missed older than the window", 3 * time.Minute, ago(150*time.Second, 2*time.Minute), time.Minute, 100, "expired", 0},
		{"the event count shrank below what the log holds", 0, ago(0, 0, 0, 0, 0), time.Minute, 3, "gap", 0},
		{"the event count shrank to what was missed", 0, ago(0, 0, 0, 0, 0), time.Minute, 5, "", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := strings.ReplaceAll(tc.name, " ", "-")
			now := time.Now()
			old := recoverable(ns[0], ch, p, tc.window, nil)
			publish(ch, "seen", "", now.Add(-tc.seen))
			wait.Until(t, "the first event", func() bool { return len(old.datas()) == 1 })
			ns[0].hub.Remove(old.conn)
			var want []string
			for i, age := range tc.missed {
				publish(ch, fmt.Sprint(i), "", now.Add(-age))
				want = append(want, fmt.Sprint(i))
			}
			again := recoverable(ns[1], ch, eventlog.Policy{Events: tc.events, TTL: p.TTL}, tc.window, old)
			reason, replayed := again.outcome()
			if reason != tc.reason || replayed != tc.replays {
				t.Fatalf("resume: %q, %d replayed; want %q, %d", reason, replayed, tc.reason, tc.replays)
			}
			if reason != "" {
				want = nil
			}
			if got := again.datas(); !slices.Equal(got, want) {
				t.Fatalf("the resume delivered %v, want %v", got, want)
			}
		})
	}
}

// A channel that had no log when it was subscribed to, and has none at the
// resume, recovers with nothing only when the history can tell its log was
// not dropped whole meanwhile: it remembers the last dropsKept channels
// dropped, and one more dropped since the subscription makes the resume a
// gap (the channel may have been that one).
func TestClusterRecoveryOfAChannelWithoutALogAfterManyDrops(t *testing.T) {
	rs := testredis.Start(t)
	p := eventlog.Policy{Events: 10, TTL: time.Hour}
	for _, tc := range []struct {
		drops  int // channels dropped whole after the subscription, not it
		reason string
	}{
		{5, ""},
		{dropsKept, ""},
		{dropsKept + 1, "gap"},
	} {
		t.Run(fmt.Sprint(tc.drops, " drops"), func(t *testing.T) {
			n := cluster(t, rs, 1)[0]
			// One channel at most: each channel appended to drops the one
			// before it.
			store := n.c.EventLog(eventlog.Limits{MaxChannels: 1})
			old := recoverable(n, "quiet", p, time.Minute, nil)
			n.hub.Remove(old.conn)
			fillHistory(t, store, "app", "busy", tc.drops+1, 1, "x", p, time.Now())
			if got := store.Stats().Dropped[eventlog.DroppedChannels]; got != int64(tc.drops) {
				t.Fatalf("%d channels dropped, want %d", got, tc.drops)
			}
			reason, replayed := recoverable(n, "quiet", p, time.Minute, old).outcome()
			if reason != tc.reason || replayed != 0 {
				t.Fatalf("resume: %q, %d replayed; want %q, 0", reason, replayed, tc.reason)
			}
		})
	}
}

// Over shards and a Redis Cluster each channel's history is on its own
// shard: a resume recovers on every shard, the app's home shard and the
// others alike, as on one Redis.
func TestClusterRecoveryOnEveryShard(t *testing.T) {
	onEachTopology(t, func(t *testing.T, start startCluster) {
		ns := start(2)
		p := eventlog.Policy{Events: 10, TTL: time.Hour}
		store := ns[0].c.EventLog(eventlog.Limits{})
		ms := members(ns[0].c)
		on := map[int]bool{}
		for i := 0; len(on) < len(ms); i++ {
			ch := fmt.Sprint("feed", i)
			k := shardOf("app", ch, len(ms))
			if on[k] {
				continue
			}
			on[k] = true
			old := recoverable(ns[0], ch, p, time.Minute, nil)
			if token, _ := old.recoveryState(); token == "" {
				t.Fatalf("%s (shard %d): no token", ch, k)
			}
			ns[0].hub.Remove(old.conn)
			m := hub.Message{AppID: "app", Channel: ch, Event: "tick", Data: "missed"}
			if kept, err := ns[0].hub.PublishKept(store, p, time.Now(), m); err != nil || !kept {
				t.Fatalf("%s: kept %v, %v", ch, kept, err)
			}
			again := recoverable(ns[1], ch, p, time.Minute, old)
			if reason, replayed := again.outcome(); reason != "" || replayed != 1 {
				t.Fatalf("%s (shard %d): resume %q, %d replayed; want recovered, 1", ch, k, reason, replayed)
			}
		}
	})
}
