package eventlog

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// A channel's ring holds no more slots than its policy keeps events once
// full, and gives most of them back once mostly empty: the slots are not
// counted against Limits.MaxBytes (EventOverhead covers one slot for each
// event kept), so slack in them would be memory the bytes bound misses.
func TestRingHoldsNoSlack(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	// appendAt appends n events to app's channel news at ms after t0, and
	// returns its ring's slots.
	appendAt := func(t *testing.T, m *Memory, p Policy, n, ms int) int {
		t.Helper()
		for range n {
			if err := m.Append(t.Context(), "app", p, []Entry{{Channel: "news", Name: "ev", Data: fmt.Sprint(ms)}}, t0.Add(time.Duration(ms)*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
		return len(m.apps["app"].channels["news"].ring)
	}
	t.Run("FullAtItsCount", func(t *testing.T) {
		for _, events := range []int{1, 5} {
			m := NewMemory(Limits{})
			p := Policy{Events: events, TTL: time.Hour}
			// Each append past the count drops one and keeps one.
			if got := appendAt(t, m, p, 3*events+1, 0); got != events {
				t.Fatalf("a channel of count %d holds %d slots, want %d", events, got, events)
			}
		}
	})
	t.Run("ShrinksOnceAQuarterFull", func(t *testing.T) {
		m := NewMemory(Limits{})
		p := Policy{Events: 100, TTL: 100 * time.Millisecond}
		appendAt(t, m, p, 16, 0)
		if got := appendAt(t, m, p, 7, 50); got != 32 {
			t.Fatalf("23 events in %d slots, want 32", got)
		}
		// The 24th comes when the first 16 expire: 8 left, a quarter of
		// the slots, which halve.
		if got := appendAt(t, m, p, 1, 101); got != 16 {
			t.Fatalf("8 events left of 24 hold %d slots, want 16", got)
		}
		pg, err := m.Read(t.Context(), "app", "news", p, Query{OldestFirst: true}, t0.Add(101*time.Millisecond))
		var got []string
		for _, e := range pg.Events {
			got = append(got, e.Data)
		}
		if want := []string{"50", "50", "50", "50", "50", "50", "50", "101"}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("after the shrink: %v, %v; want %v", got, err, want)
		}
	})
}
