package eventlog_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/eventlog/eventlogtest"
)

func TestMemory(t *testing.T) {
	eventlogtest.Run(t, func(t *testing.T, l eventlog.Limits) eventlog.Store { return eventlog.NewMemory(l) })
}

func TestMemorySweepForgetsIdleApps(t *testing.T) {
	m := eventlog.NewMemory(eventlog.Limits{})
	p := eventlog.Policy{Events: 10, TTL: time.Minute}
	t0 := time.Now()
	if err := m.Append(t.Context(), "app", p, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "x"}}, t0); err != nil {
		t.Fatal(err)
	}
	m.Sweep(t0.Add(time.Second))
	if st := m.Stats(); len(st.Apps) != 1 || st.Apps[0].Events != 1 {
		t.Fatalf("a sweep before the TTL: %+v, want the event kept", st.Apps)
	}
	m.Sweep(t0.Add(time.Minute + time.Millisecond))
	if st := m.Stats(); len(st.Apps) != 0 || st.Dropped[eventlog.DroppedAge] != 1 {
		t.Fatalf("a sweep past the TTL: %+v, want the app forgotten and one event dropped for age", st)
	}
	// The app writes again after being forgotten.
	if err := m.Append(t.Context(), "app", p, []eventlog.Entry{{Channel: "news", Name: "ev", Data: "y"}}, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	pg, err := m.Read(t.Context(), "app", "news", p, eventlog.Query{}, t0.Add(2*time.Minute))
	if err != nil || len(pg.Events) != 1 || pg.Events[0].Data != "y" {
		t.Fatalf("after the sweep: %+v, %v; want the new event", pg, err)
	}
}

func TestParseID(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want eventlog.ID
		ok   bool
	}{
		{"1764194400000-0", eventlog.ID{MS: 1764194400000}, true},
		{"5-7", eventlog.ID{MS: 5, Seq: 7}, true},
		{"5", eventlog.ID{}, false},
		{"-5", eventlog.ID{}, false},
		{"5-", eventlog.ID{}, false},
		{"+5-1", eventlog.ID{}, false},
		{"5-x", eventlog.ID{}, false},
		{"99999999999999999999999-0", eventlog.ID{}, false},
	} {
		got, err := eventlog.ParseID(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseID(%q) = %v, %v; want %v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
		if tt.ok && got.String() != tt.in {
			t.Errorf("ParseID(%q).String() = %q", tt.in, got.String())
		}
	}
}

// The bounds the README promises when nothing is set: 10,000 channels and
// 16 MiB an app, 100 events a page.
func TestMemoryDefaultBounds(t *testing.T) {
	if l := (eventlog.Limits{}).WithDefaults(); l.MaxChannels != 10000 || l.MaxBytes != 16<<20 {
		t.Fatalf("default limits %+v, want 10000 channels and 16 MiB", l)
	}
	m := eventlog.NewMemory(eventlog.Limits{})
	p := eventlog.Policy{Events: 1000, TTL: time.Hour}
	now := time.Now()
	var es []eventlog.Entry
	for i := range 10001 {
		es = append(es, eventlog.Entry{Channel: fmt.Sprintf("c-%05d", i), Name: "ev"})
	}
	if err := m.Append(t.Context(), "many", p, es, now); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.Dropped[eventlog.DroppedChannels] != 1 {
		t.Fatalf("10,001 channels: %d dropped for the channels bound, want 1", st.Dropped[eventlog.DroppedChannels])
	}
	// 170 events of 100 KB are over 16 MiB by a few.
	big := eventlog.Entry{Channel: "big", Name: "ev", Data: strings.Repeat("x", 100_000)}
	for range 170 {
		if err := m.Append(t.Context(), "large", p, []eventlog.Entry{big}, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range m.Stats().Apps {
		if a.AppID == "large" && (a.Bytes > 16<<20 || a.Bytes < 16<<20-int64(big.Cost()) || a.Events >= 170) {
			t.Fatalf("170 events of 100 KB: %d held in %d bytes, want within 16 MiB by less than one event", a.Events, a.Bytes)
		}
	}
	pg, err := m.Read(t.Context(), "large", "big", p, eventlog.Query{}, now)
	if err != nil || len(pg.Events) != 100 || !pg.More {
		t.Fatalf("a read without a limit: %d events (more %v), %v; want 100 and more", len(pg.Events), pg.More, err)
	}
}

// A channel's ring wraps around as events expire one at a time while new
// ones come, and grows when full with its oldest slot at its end: the
// events stay in order, each once.
func TestMemoryKeepsOrderAcrossTheRingsWrap(t *testing.T) {
	m := eventlog.NewMemory(eventlog.Limits{})
	p := eventlog.Policy{Events: 100, TTL: 10 * time.Millisecond}
	t0 := time.UnixMilli(1_700_000_000_000)
	// Four slots: e0-e2, then e3-e5 each a TTL after the one three before
	// (which goes), then e6 and e7 in e5's millisecond: the ring is full
	// from its last slot when e7 comes.
	for i, ms := range []int{0, 1, 2, 11, 12, 13, 13, 13} {
		e := eventlog.Entry{Channel: "news", Name: "ev", Data: fmt.Sprint("e", i)}
		if err := m.Append(t.Context(), "app", p, []eventlog.Entry{e}, t0.Add(time.Duration(ms)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(13 * time.Millisecond)
	for _, oldestFirst := range []bool{true, false} {
		pg, err := m.Read(t.Context(), "app", "news", p, eventlog.Query{OldestFirst: oldestFirst}, now)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range pg.Events {
			got = append(got, e.Data)
		}
		if !oldestFirst {
			slices.Reverse(got)
		}
		if want := []string{"e3", "e4", "e5", "e6", "e7"}; !slices.Equal(got, want) || pg.More {
			t.Fatalf("oldest first %v: %v (more %v), want %v", oldestFirst, got, pg.More, want)
		}
	}
}
