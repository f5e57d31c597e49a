// Package eventlogtest is the suite every eventlog.Store passes: the memory
// store of one node and the cluster's Redis store run the same tests, so
// they keep, order, page and drop events alike.
package eventlogtest

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
)

// NewStore returns an empty store bounded by limits, of its own (no other
// test sees its events).
type NewStore func(t *testing.T, limits eventlog.Limits) eventlog.Store

// t0 is the suite's clock: a fixed time, moved on by the tests.
var t0 = time.UnixMilli(1_764_194_400_000)

var policy = eventlog.Policy{Events: 100, TTL: time.Hour}

// Run runs the suite against the stores newStore makes: RunChannels,
// then the app-wide bounds (an app's channels, bytes and expired
// channels, counted and dropped over all of them).
func Run(t *testing.T, newStore NewStore) {
	RunChannels(t, newStore)
	runAppBounds(t, newStore)
}

// runAppBounds checks the bounds an app's history keeps over all its
// channels at once.
func runAppBounds(t *testing.T, newStore NewStore) {
	t.Run("ForgetsPastTTL", func(t *testing.T) {
		s := newStore(t, eventlog.Limits{})
		p := eventlog.Policy{Events: 100, TTL: time.Minute}
		appendPolicy(t, s, "app", p, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "old"}, {Channel: "idle", Name: "ev", Data: "old"}}, t0)
		appendPolicy(t, s, "app", p, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "new"}}, t0.Add(30*time.Second))
		later := t0.Add(time.Minute + time.Millisecond)
		if got := datas(readAll(t, s, "app", "news", p, false, 100, later)); !slices.Equal(got, []string{"new"}) {
			t.Fatalf("a minute on: got %v, want only the new one", got)
		}
		if got := readAll(t, s, "app", "idle", p, false, 100, later); len(got) != 0 {
			t.Fatalf("a minute on, the idle channel still has %v", got)
		}
		// The next append drops what expired.
		appendPolicy(t, s, "app", p, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "newer"}}, later)
		checkDropped(t, s, eventlog.DroppedAge, 2)
		checkHeld(t, s, "app", 2, costs(1, 5)+costs(1, 7)+eventlog.ChannelCost("news"))
	})

	t.Run("KeepsAnIdleChannelUntilPastTTL", func(t *testing.T) {
		// A channel last written exactly a TTL ago still holds its event
		// (as a read does, the bound is inclusive): another channel's
		// append does not drop it as expired.
		s := newStore(t, eventlog.Limits{})
		p := eventlog.Policy{Events: 100, TTL: time.Minute}
		appendPolicy(t, s, "app", p, []eventlog.Entry{{Channel: "idle", Name: "ev", Data: "old"}}, t0)
		at := t0.Add(time.Minute)
		appendPolicy(t, s, "app", p, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "new"}}, at)
		if got := datas(readAll(t, s, "app", "idle", p, false, 100, at)); !slices.Equal(got, []string{"old"}) {
			t.Fatalf("a TTL on, the idle channel has %v, want its event", got)
		}
		checkDropped(t, s, eventlog.DroppedAge, 0)
	})

	t.Run("ChannelsBound", func(t *testing.T) {
		s := newStore(t, eventlog.Limits{MaxChannels: 3})
		for i, ch := range []string{"a", "b", "c", "a", "d"} {
			appendPolicy(t, s, "app", policy, []eventlog.Entry{{Channel: ch, Name: "ev", Data: "x"}}, t0.Add(time.Duration(i)*time.Millisecond))
		}
		// b was written least recently when d came.
		for ch, want := range map[string]int{"a": 2, "b": 0, "c": 1, "d": 1} {
			if got := readAll(t, s, "app", ch, policy, false, 100, t0); len(got) != want {
				t.Fatalf("channel %s has %d events, want %d", ch, len(got), want)
			}
		}
		checkDropped(t, s, eventlog.DroppedChannels, 1)
	})

	t.Run("BytesBound", func(t *testing.T) {
		data := strings.Repeat("x", 98) // 100 bytes with the name "ev"
		// Room for both channels and ten events.
		limit := eventlog.ChannelCost("old") + eventlog.ChannelCost("new") + costs(10, 100)
		s := newStore(t, eventlog.Limits{MaxBytes: limit})
		for i := range 8 {
			appendPolicy(t, s, "app", policy, []eventlog.Entry{{Channel: "old", Name: "ev", Data: data}}, t0.Add(time.Duration(i)*time.Millisecond))
		}
		for i := range 4 {
			appendPolicy(t, s, "app", policy, []eventlog.Entry{{Channel: "new", Name: "ev", Data: data}}, t0.Add(time.Duration(10+i)*time.Millisecond))
		}
		// Twelve events where ten fit: the two oldest of the channel
		// written least recently went.
		if got := readAll(t, s, "app", "old", policy, false, 100, t0); len(got) != 6 {
			t.Fatalf("old has %d events, want 6", len(got))
		}
		if got := readAll(t, s, "app", "new", policy, false, 100, t0); len(got) != 4 {
			t.Fatalf("new has %d events, want 4", len(got))
		}
		checkDropped(t, s, eventlog.DroppedBytes, 2)
		checkHeld(t, s, "app", 10, limit)
		// Another app has bytes of its own.
		appendPolicy(t, s, "other", policy, []eventlog.Entry{{Channel: "old", Name: "ev", Data: data}}, t0)
		if got := readAll(t, s, "app", "old", policy, false, 100, t0); len(got) != 6 {
			t.Fatalf("after another app's event, old has %d events, want 6", len(got))
		}
		// A channel that must go whole for the bytes takes its own cost
		// with it: one append of six events to a third channel, which
		// costs a little more than "old" with its six events, leaves room
		// for them once "old" is gone and "new" gave the oldest of its
		// four.
		var six []eventlog.Entry
		for range 6 {
			six = append(six, eventlog.Entry{Channel: "third", Name: "ev", Data: data})
		}
		appendPolicy(t, s, "app", policy, six, t0.Add(20*time.Millisecond))
		for ch, want := range map[string]int{"old": 0, "new": 3, "third": 6} {
			if got := readAll(t, s, "app", ch, policy, false, 100, t0); len(got) != want {
				t.Fatalf("after six on a third channel, %s has %d events, want %d", ch, len(got), want)
			}
		}
		checkDropped(t, s, eventlog.DroppedBytes, 2+6+1)
		checkHeld(t, s, "app", 9, eventlog.ChannelCost("new")+eventlog.ChannelCost("third")+costs(9, 100))
	})

}

// RunChannels runs the part of the suite that holds for each channel on
// its own, which a store that splits an app's history (over shards, each
// with its share of the bounds) passes too.
func RunChannels(t *testing.T, newStore NewStore) {
	t.Run("IDsIncreaseAndStay", func(t *testing.T) {
		s := newStore(t, eventlog.Limits{})
		// Five in one millisecond, then one a millisecond later.
		appendN(t, s, "app", "news", 5, t0)
		appendN(t, s, "app", "news", 1, t0.Add(time.Millisecond))
		first := readAll(t, s, "app", "news", policy, false, 100, t0)
		if len(first) != 6 {
			t.Fatalf("read %d events, want 6", len(first))
		}
		for i := 1; i < len(first); i++ {
			if !first[i-1].ID.Less(first[i].ID) {
				t.Fatalf("ids out of order: %v then %v", first[i-1].ID, first[i].ID)
			}
		}
		if got := first[5].Time(); !got.Equal(t0.Add(time.Millisecond)) {
			t.Fatalf("the last event's time is %v, want %v", got, t0.Add(time.Millisecond))
		}
		again := readAll(t, s, "app", "news", policy, false, 100, t0)
		if !slices.Equal(first, again) {
			t.Fatalf("a second read differs:\n%v\n%v", first, again)
		}
		newest := page(t, s, "app", "news", policy, eventlog.Query{}, t0)
		if newest.More || len(newest.Events) != 6 || newest.Events[0] != first[5] || newest.Events[5] != first[0] {
			t.Fatalf("newest first: got %v (more %v), want the six reversed", newest.Events, newest.More)
		}
		for i, ev := range first {
			if want := fmt.Sprintf("data %d", i%5); ev.Name != "ev" || ev.Data != want {
				t.Fatalf("event %d is %q %q, want ev %q", i, ev.Name, ev.Data, want)
			}
		}
	})

	t.Run("Pages", func(t *testing.T) {
		s := newStore(t, eventlog.Limits{})
		for i := range 25 {
			appendN(t, s, "app", "news", 1, t0.Add(time.Duration(i)*time.Millisecond))
		}
		all := readAll(t, s, "app", "news", policy, false, 100, t0)
		oldest := readAll(t, s, "app", "news", policy, false, 7, t0)
		if !slices.Equal(all, oldest) || len(all) != 25 {
			t.Fatalf("oldest first in pages of 7: %d events, want the 25 of one read", len(oldest))
		}
		newest := readAll(t, s, "app", "news", policy, true, 10, t0)
		slices.Reverse(newest)
		if !slices.Equal(all, newest) {
			t.Fatal("newest first in pages of 10, reversed, differs from oldest first")
		}
		after := page(t, s, "app", "news", policy, eventlog.Query{OldestFirst: true, After: all[19].ID}, t0)
		if !slices.Equal(after.Events, all[20:]) || after.More {
			t.Fatalf("after the 20th: got %d events (more %v), want the last 5", len(after.Events), after.More)
		}
		// A page that takes exactly what is left has no more after it,
		// either way round.
		if p := page(t, s, "app", "news", policy, eventlog.Query{OldestFirst: true, After: all[19].ID, Limit: 5}, t0); !slices.Equal(p.Events, all[20:]) || p.More {
			t.Fatalf("the last 5 in a page of 5: got %d events (more %v), want 5 and no more", len(p.Events), p.More)
		}
		if p := page(t, s, "app", "news", policy, eventlog.Query{After: all[5].ID, Limit: 5}, t0); len(p.Events) != 5 || p.Events[0] != all[4] || p.Events[4] != all[0] || p.More {
			t.Fatalf("the first 5, newest first, in a page of 5: got %d events (more %v), want 5 and no more", len(p.Events), p.More)
		}
		last := page(t, s, "app", "news", policy, eventlog.Query{OldestFirst: true, After: all[24].ID}, t0)
		if len(last.Events) != 0 || last.More {
			t.Fatalf("after the last: got %v (more %v), want none", last.Events, last.More)
		}
		// An id between two events, as a client may hold after its event
		// was dropped: the events after it.
		between := eventlog.ID{MS: all[10].ID.MS, Seq: all[10].ID.Seq + 1}
		if p := page(t, s, "app", "news", policy, eventlog.Query{OldestFirst: true, After: between, Limit: 1}, t0); len(p.Events) != 1 || p.Events[0] != all[11] || !p.More {
			t.Fatalf("after an id between two: got %v (more %v), want the 12th event and more", p.Events, p.More)
		}
		if p := page(t, s, "app", "none", policy, eventlog.Query{}, t0); len(p.Events) != 0 || p.More {
			t.Fatalf("a channel without history: got %v", p.Events)
		}
	})

	t.Run("HistoryOffKeepsNothing", func(t *testing.T) {
		// An app with no events to keep, or no time to keep them, keeps
		// nothing: turned on later, it reads none of what came before.
		s := newStore(t, eventlog.Limits{})
		for _, off := range []eventlog.Policy{{Events: 0, TTL: time.Hour}, {Events: 5, TTL: 0}} {
			appendPolicy(t, s, "app", off, []eventlog.Entry{{Channel: "news", Name: "ev", Data: fmt.Sprint(off)}}, t0)
		}
		if got := datas(readAll(t, s, "app", "news", policy, false, 100, t0)); len(got) != 0 {
			t.Fatalf("appended with history off, then read with it on: %v, want nothing", got)
		}
	})

	t.Run("KeepsLastN", func(t *testing.T) {
		s := newStore(t, eventlog.Limits{})
		p := eventlog.Policy{Events: 5, TTL: time.Hour}
		for i := range 8 {
			appendPolicy(t, s, "app", p, []eventlog.Entry{{Channel: "news", Name: "ev", Data: fmt.Sprint(i)}}, t0)
		}
		got := readAll(t, s, "app", "news", p, false, 100, t0)
		if data := datas(got); !slices.Equal(data, []string{"3", "4", "5", "6", "7"}) {
			t.Fatalf("kept %v, want the last five", data)
		}
		checkDropped(t, s, eventlog.DroppedEvents, 3)
		// A policy shrunk since: only its newest are returned.
		if got := readAll(t, s, "app", "news", eventlog.Policy{Events: 2, TTL: time.Hour}, false, 100, t0); !slices.Equal(datas(got), []string{"6", "7"}) {
			t.Fatalf("with 2 events: got %v, want the last two", datas(got))
		}
		checkHeld(t, s, "app", 5, costs(5, 3)+eventlog.ChannelCost("news"))
	})

	t.Run("KeepsLastOneWithIDsIncreasing", func(t *testing.T) {
		// A channel that keeps one event drops its only one at each
		// append, in the same millisecond: the new one's id is still past
		// it.
		s := newStore(t, eventlog.Limits{})
		p := eventlog.Policy{Events: 1, TTL: time.Hour}
		var last eventlog.ID
		for i := range 3 {
			appendPolicy(t, s, "app", p, []eventlog.Entry{{Channel: "news", Name: "ev", Data: fmt.Sprint(i)}}, t0)
			got := readAll(t, s, "app", "news", p, false, 100, t0)
			if len(got) != 1 || got[0].Data != fmt.Sprint(i) || !last.Less(got[0].ID) {
				t.Fatalf("after append %d: %v, want only it, with an id past %v", i, got, last)
			}
			last = got[0].ID
		}
		checkDropped(t, s, eventlog.DroppedEvents, 2)
	})

	t.Run("ReadAppliesTheCurrentTTL", func(t *testing.T) {
		s := newStore(t, eventlog.Limits{})
		long := eventlog.Policy{Events: 100, TTL: time.Hour}
		appendPolicy(t, s, "app", long, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "old"}}, t0)
		appendPolicy(t, s, "app", long, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "new"}}, t0.Add(8*time.Minute))
		// The app's TTL was shortened to 5 minutes since: ten minutes on,
		// only what is younger than 5 minutes is read, though the last
		// append kept the first for an hour.
		short := eventlog.Policy{Events: 100, TTL: 5 * time.Minute}
		at := t0.Add(10 * time.Minute)
		for _, newestFirst := range []bool{false, true} {
			if got := datas(readAll(t, s, "app", "news", short, newestFirst, 100, at)); !slices.Equal(got, []string{"new"}) {
				t.Fatalf("with a TTL of 5m, 10m on (newest first %v): got %v, want only the new one", newestFirst, got)
			}
		}
		if got := datas(readAll(t, s, "app", "news", long, false, 100, at)); !slices.Equal(got, []string{"old", "new"}) {
			t.Fatalf("with the TTL of 1h: got %v, want both", got)
		}
	})

	t.Run("ClockBehindKeepsIDsIncreasing", func(t *testing.T) {
		s := newStore(t, eventlog.Limits{})
		// A node whose clock is a minute ahead appends, then one whose
		// clock is right: its event is kept after the first.
		appendPolicy(t, s, "app", policy, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "ahead"}}, t0.Add(time.Minute))
		appendPolicy(t, s, "app", policy, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "behind"}}, t0)
		appendPolicy(t, s, "app", policy, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "later"}}, t0.Add(2*time.Minute))
		got := readAll(t, s, "app", "news", policy, false, 100, t0.Add(2*time.Minute))
		if d := datas(got); !slices.Equal(d, []string{"ahead", "behind", "later"}) {
			t.Fatalf("kept %v, want ahead, behind, later", d)
		}
		if !got[0].ID.Less(got[1].ID) || !got[1].ID.Less(got[2].ID) {
			t.Fatalf("ids %v, %v, %v do not increase", got[0].ID, got[1].ID, got[2].ID)
		}
		if got[1].ID.MS != got[0].ID.MS {
			t.Fatalf("the event from behind has id %v, want the first's millisecond %v", got[1].ID, got[0].ID)
		}
	})

	t.Run("CursorAtTheLastID", func(t *testing.T) {
		s := newStore(t, eventlog.Limits{})
		appendN(t, s, "app", "news", 3, t0)
		ms := uint64(t0.UnixMilli())
		for _, after := range []eventlog.ID{{MS: ms, Seq: math.MaxUint64}, {MS: math.MaxUint64, Seq: math.MaxUint64}} {
			if p := page(t, s, "app", "news", policy, eventlog.Query{OldestFirst: true, After: after}, t0); len(p.Events) != 0 || p.More {
				t.Fatalf("oldest first after %v: got %v (more %v), want nothing", after, p.Events, p.More)
			}
			if p := page(t, s, "app", "news", policy, eventlog.Query{After: after}, t0); len(p.Events) != 3 || p.More {
				t.Fatalf("newest first before %v: got %v (more %v), want the three", after, p.Events, p.More)
			}
		}
	})

	t.Run("AppsApart", func(t *testing.T) {
		s := newStore(t, eventlog.Limits{})
		appendN(t, s, "a", "news", 2, t0)
		if got := readAll(t, s, "b", "news", policy, false, 100, t0); len(got) != 0 {
			t.Fatalf("app b reads app a's events: %v", got)
		}
	})

	t.Run("ConcurrentAppendsEachOnceInOrder", func(t *testing.T) {
		s := newStore(t, eventlog.Limits{})
		const writers, each = 4, 25
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					// Every writer's clock is the same millisecond: IDs still
					// differ and increase.
					appendPolicy(t, s, "app", policy, []eventlog.Entry{{Channel: "news", Name: "ev", Data: fmt.Sprintf("%d/%d", w, i)}}, t0)
				}
			})
		}
		wg.Wait()
		got := readAll(t, s, "app", "news", policy, false, 30, t0)
		if len(got) != 100 {
			t.Fatalf("read %d events, want 100", len(got))
		}
		seen := make(map[string]bool)
		next := make([]int, writers)
		for _, ev := range got {
			if seen[ev.Data] {
				t.Fatalf("%s read twice", ev.Data)
			}
			seen[ev.Data] = true
			var w, i int
			fmt.Sscanf(ev.Data, "%d/%d", &w, &i)
			if i != next[w] {
				t.Fatalf("writer %d's event %d came where %d was due", w, i, next[w])
			}
			next[w]++
		}
	})
}

// appendN appends n events "ev" with data "data <i>" on channel under policy.
func appendN(t *testing.T, s eventlog.Store, app, channel string, n int, now time.Time) {
	t.Helper()
	var es []eventlog.Entry
	for i := range n {
		es = append(es, eventlog.Entry{Channel: channel, Name: "ev", Data: fmt.Sprintf("data %d", i)})
	}
	appendPolicy(t, s, app, policy, es, now)
}

func appendPolicy(t *testing.T, s eventlog.Store, app string, p eventlog.Policy, es []eventlog.Entry, now time.Time) {
	t.Helper()
	if err := s.Append(t.Context(), app, p, es, now); err != nil {
		t.Fatal(err)
	}
}

func page(t *testing.T, s eventlog.Store, app, channel string, p eventlog.Policy, q eventlog.Query, now time.Time) eventlog.Page {
	t.Helper()
	pg, err := s.Read(t.Context(), app, channel, p, q, now)
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

// readAll reads every event of channel in pages of limit, following each
// page's last event as the cursor.
func readAll(t *testing.T, s eventlog.Store, app, channel string, p eventlog.Policy, newestFirst bool, limit int, now time.Time) []eventlog.Event {
	t.Helper()
	var all []eventlog.Event
	q := eventlog.Query{Limit: limit, OldestFirst: !newestFirst}
	for range 1000 {
		pg := page(t, s, app, channel, p, q, now)
		if len(pg.Events) > limit {
			t.Fatalf("a page of %d events for a limit of %d", len(pg.Events), limit)
		}
		all = append(all, pg.Events...)
		if !pg.More {
			return all
		}
		q.After = pg.Events[len(pg.Events)-1].ID
	}
	t.Fatal("paging did not end")
	return nil
}

// costs is what n events of size bytes (name and data) cost.
func costs(n, size int) int {
	return n * eventlog.Entry{Data: strings.Repeat("x", size)}.Cost()
}

func datas(evs []eventlog.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Data)
	}
	return out
}

func checkDropped(t *testing.T, s eventlog.Store, r eventlog.Reason, want int64) {
	t.Helper()
	if got := s.Stats().Dropped[r]; got != want {
		t.Fatalf("dropped for %s: %d, want %d", r, got, want)
	}
}

func checkHeld(t *testing.T, s eventlog.Store, app string, events int64, bytes int) {
	t.Helper()
	for _, a := range s.Stats().Apps {
		if a.AppID == app {
			if a.Events != events || a.Bytes != int64(bytes) {
				t.Fatalf("app %s holds %d events of %d bytes, want %d of %d", app, a.Events, a.Bytes, events, bytes)
			}
			return
		}
	}
	t.Fatalf("no figures for app %s in %+v", app, s.Stats().Apps)
}
