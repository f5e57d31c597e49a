package eventlog_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
)

// positioned appends n events named e0, e1, … to channel at t, a
// millisecond apart, and returns their IDs.
func positioned(t *testing.T, m *eventlog.Memory, p eventlog.Policy, channel string, n int, t0 time.Time) []eventlog.ID {
	t.Helper()
	var ids []eventlog.ID
	for i := range n {
		got, err := m.AppendIDs(t.Context(), "app", p, []eventlog.Entry{{Channel: channel, Name: fmt.Sprint("e", i), Data: "{}"}}, t0.Add(time.Duration(i)*time.Millisecond))
		if err != nil || len(got) != 1 {
			t.Fatal(got, err)
		}
		ids = append(ids, got[0])
	}
	return ids
}

func names(evs []eventlog.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Name)
	}
	return out
}

// Since gives back every event after a position up to another, oldest
// first, and says the log is complete while it holds all of them; Last is
// the newest ID; AppendIDs' IDs are those Read returns.
func TestSinceReturnsWhatFollowsAPosition(t *testing.T) {
	m := eventlog.NewMemory(eventlog.Limits{})
	p := eventlog.Policy{Events: 10, TTL: time.Hour}
	t0 := time.UnixMilli(1_700_000_000_000)
	ids := positioned(t, m, p, "news", 5, t0)
	if got := m.Last("app", "news"); got != ids[4] {
		t.Fatalf("Last = %s, want %s", got, ids[4])
	}
	page, _ := m.Read(t.Context(), "app", "news", p, eventlog.Query{OldestFirst: true}, t0)
	for i, e := range page.Events {
		if e.ID != ids[i] {
			t.Fatalf("Read's event %d has ID %s, AppendIDs gave %s", i, e.ID, ids[i])
		}
	}
	evs, complete, err := m.Since(t.Context(), "app", "news", p, ids[1], ids[3], t0)
	if err != nil || !complete || !slices.Equal(names(evs), []string{"e2", "e3"}) {
		t.Fatalf("Since(e1, e3) = %v, %v, %v; want e2 e3, complete", names(evs), complete, err)
	}
	evs, complete, _ = m.Since(t.Context(), "app", "news", p, eventlog.ID{}, ids[4], t0)
	if !complete || len(evs) != 5 {
		t.Fatalf("Since(zero) = %v, %v; want every event", names(evs), complete)
	}
	evs, complete, _ = m.Since(t.Context(), "app", "quiet", p, ids[4], ids[4], t0)
	if !complete || len(evs) != 0 {
		t.Fatalf("a channel never written: %v, %v; want nothing missed", names(evs), complete)
	}
}

// Since is not complete once any event after the position has gone: past
// the channel's count, past the bytes, for age, with its whole channel, or
// past a policy that shrank.
func TestSinceIsIncompleteOnceAnEventAfterThePositionWent(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	for _, c := range []struct {
		name  string
		after func(m *eventlog.Memory, p *eventlog.Policy, ids []eventlog.ID) (from eventlog.ID, now time.Time)
	}{
		{"past the count", func(m *eventlog.Memory, p *eventlog.Policy, ids []eventlog.ID) (eventlog.ID, time.Time) {
			positioned(t, m, *p, "news", 4, t0.Add(time.Second)) // 3 + 4 > 5: e0's successors go
			return ids[0], t0.Add(time.Second)
		}},
		{"for age", func(m *eventlog.Memory, p *eventlog.Policy, ids []eventlog.ID) (eventlog.ID, time.Time) {
			return ids[0], t0.Add(time.Hour + 2*time.Millisecond) // e1 is past the TTL
		}},
		{"with its channel", func(m *eventlog.Memory, p *eventlog.Policy, ids []eventlog.ID) (eventlog.ID, time.Time) {
			for i := range 2 { // two other channels push news out of the app's 2
				positioned(t, m, *p, fmt.Sprint("other", i), 1, t0.Add(time.Second))
			}
			positioned(t, m, *p, "news", 1, t0.Add(2*time.Second)) // a new log of news
			return ids[0], t0.Add(2 * time.Second)
		}},
		{"past a shrunk policy", func(m *eventlog.Memory, p *eventlog.Policy, ids []eventlog.ID) (eventlog.ID, time.Time) {
			p.Events = 1
			return ids[0], t0
		}},
		{"with the whole app, swept past its TTL", func(m *eventlog.Memory, p *eventlog.Policy, ids []eventlog.ID) (eventlog.ID, time.Time) {
			later := t0.Add(2 * time.Hour)
			m.Sweep(later) // every event past the TTL: the app is forgotten
			if m.Last("app", "news") != (eventlog.ID{}) {
				t.Fatal("the app was not forgotten")
			}
			positioned(t, m, *p, "news", 1, later) // a new log of news
			return ids[0], later
		}},
		{"with the whole app, swept, nothing since", func(m *eventlog.Memory, p *eventlog.Policy, ids []eventlog.ID) (eventlog.ID, time.Time) {
			m.Sweep(t0.Add(2 * time.Hour))
			return ids[0], t0.Add(2 * time.Hour)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := eventlog.NewMemory(eventlog.Limits{MaxChannels: 2})
			p := eventlog.Policy{Events: 5, TTL: time.Hour}
			ids := positioned(t, m, p, "news", 3, t0)
			from, now := c.after(m, &p, ids)
			evs, complete, err := m.Since(t.Context(), "app", "news", p, from, m.Last("app", "news"), now)
			if err != nil || complete || len(evs) != 0 {
				t.Fatalf("Since = %v, complete %v, %v; want incomplete and nothing", names(evs), complete, err)
			}
		})
	}
}

// An event dropped at or before the position costs nothing: the log still
// holds everything after it.
func TestSinceIgnoresWhatWentBeforeThePosition(t *testing.T) {
	m := eventlog.NewMemory(eventlog.Limits{})
	p := eventlog.Policy{Events: 3, TTL: time.Hour}
	t0 := time.UnixMilli(1_700_000_000_000)
	ids := positioned(t, m, p, "news", 5, t0) // e0 and e1 went
	evs, complete, _ := m.Since(t.Context(), "app", "news", p, ids[1], ids[4], t0)
	if !complete || !slices.Equal(names(evs), []string{"e2", "e3", "e4"}) {
		t.Fatalf("Since(e1) = %v, %v; want e2 e3 e4, complete", names(evs), complete)
	}
	if _, complete, _ := m.Since(t.Context(), "app", "news", p, ids[0], ids[4], t0); complete {
		t.Fatal("Since(e0) is complete though e1 went")
	}
}

// What an entry's Exclude costs counts, and comes back with the event.
func TestExcludeIsKeptAndCounted(t *testing.T) {
	m := eventlog.NewMemory(eventlog.Limits{})
	p := eventlog.Policy{Events: 3, TTL: time.Hour}
	t0 := time.UnixMilli(1_700_000_000_000)
	e := eventlog.Entry{Channel: "news", Name: "ev", Data: "{}", Exclude: "123.456"}
	if _, err := m.AppendIDs(t.Context(), "app", p, []eventlog.Entry{e}, t0); err != nil {
		t.Fatal(err)
	}
	evs, _, _ := m.Since(t.Context(), "app", "news", p, eventlog.ID{}, m.Last("app", "news"), t0)
	if len(evs) != 1 || evs[0].Exclude != "123.456" {
		t.Fatalf("Since = %+v, want the event with its Exclude", evs)
	}
	if st := m.Stats(); st.Apps[0].Bytes != int64(e.Cost()+eventlog.ChannelCost("news")) || e.Cost() != len("ev{}123.456")+eventlog.EventOverhead {
		t.Fatalf("bytes %d, want the entry's cost with its Exclude and the channel's", st.Apps[0].Bytes)
	}
}
