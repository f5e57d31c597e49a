package traffic

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2024, 5, 2, 10, 0, 0, 0, time.UTC)

// fakeApps is a Sources.Apps whose readings the test sets.
type fakeApps struct {
	mu       sync.Mutex
	readings []AppReading
	gone     map[string]bool // ids that no longer exist
}

func (f *fakeApps) sources() Sources {
	return Sources{
		Apps: func() []AppReading {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.readings
		},
		Exists: func(_ Kind, id string) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return !f.gone[id]
		},
	}
}

func TestRatesAndGauges(t *testing.T) {
	src := &fakeApps{readings: []AppReading{{AppID: "1", Connections: 3, Delivered: 100, Triggered: 5}}, gone: map[string]bool{}}
	r := New(src.sources(), Options{Interval: 5 * time.Second, Points: 10})
	r.Sample(t0) // the first reading of the running totals counts from zero, over Interval
	r.Count(App, "1", AppWebhooksSent, 5)
	r.Count(App, "1", AppWebhooksFailed, 1)
	r.Count(Instance, "in-1", InstanceFailed, 20)
	src.readings = []AppReading{{AppID: "1", Connections: 4, Delivered: 150, Triggered: 15}}
	r.Sample(t0.Add(5 * time.Second))

	h := r.Get(App, "1")
	if len(h.Times) != 2 || h.Times[1] != t0.Add(5*time.Second).UnixMilli() || !h.Tracked {
		t.Fatalf("times %v tracked %v", h.Times, h.Tracked)
	}
	want := map[int][2]float32{
		AppConnections:    {3, 4},
		AppTriggered:      {1, 2},   // 5, then 10, in 5 s
		AppDelivered:      {20, 10}, // 100, then 50, in 5 s
		AppWebhooksSent:   {0, 1},   // 5 in 5 s
		AppWebhooksFailed: {0, 0.2}, // 1 in 5 s
	}
	for s, w := range want {
		if got := h.Series[s]; got[0] != w[0] || got[1] != w[1] {
			t.Errorf("%s = %v, want %v", AppSeriesNames[s], got, w)
		}
	}
	in := r.Get(Instance, "in-1")
	if in.Series[InstanceFailed][1] != 4 || in.Series[InstanceDelivered][1] != 0 || len(in.Series) != len(InstanceSeriesNames) {
		t.Fatalf("instance %v", in.Series)
	}
	// Counts are taken once, running totals that did not move are no
	// rate: the next point is back to 0.
	r.Sample(t0.Add(10 * time.Second))
	if h := r.Get(App, "1"); h.Series[AppTriggered][2] != 0 || h.Series[AppWebhooksSent][2] != 0 || h.Series[AppConnections][2] != 4 {
		t.Fatalf("third point %v", h.Series)
	}
	// An app with no figures yet has zeros at every point.
	if h := r.Get(App, "2"); len(h.Times) != 3 || h.Series[AppTriggered][0] != 0 || !h.Tracked {
		t.Fatalf("unknown app %+v", h)
	}
}

// TestRingIsBounded: however many samples, a key keeps Points points, the
// oldest go first, and a sample in steady state allocates nothing, so the
// memory stays flat however long the node runs.
func TestRingIsBounded(t *testing.T) {
	src := &fakeApps{readings: []AppReading{{AppID: "1", Connections: 1}, {AppID: "2"}}, gone: map[string]bool{}}
	r := New(src.sources(), Options{Interval: time.Second, Points: 10})
	now := t0
	for i := range 35 {
		r.Count(App, "1", AppWebhooksSent, int64(i))
		now = now.Add(time.Second)
		r.Sample(now)
	}
	h := r.Get(App, "1")
	if len(h.Times) != 10 || h.Times[0] != t0.Add(26*time.Second).UnixMilli() || h.Times[9] != now.UnixMilli() {
		t.Fatalf("times %v", h.Times)
	}
	for i, v := range h.Series[AppWebhooksSent] {
		if want := float32(25 + i); v != want {
			t.Fatalf("point %d = %v, want %v (oldest first)", i, v, want)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		r.Count(App, "1", AppWebhooksSent, 1)
		r.Count(App, "2", AppWebhooksFailed, 1)
		now = now.Add(time.Second)
		r.Sample(now)
	})
	if allocs != 0 {
		t.Fatalf("a sample allocates %v times; the history would grow", allocs)
	}
}

// TestDeletedKeysAreDropped: the series of an app or instance that no
// longer exists go at the next sample, with its pending counts.
func TestDeletedKeysAreDropped(t *testing.T) {
	src := &fakeApps{readings: []AppReading{{AppID: "1"}, {AppID: "2"}}, gone: map[string]bool{}}
	r := New(src.sources(), Options{Points: 4})
	r.Count(Instance, "in-1", InstanceDelivered, 1)
	r.Count(App, "2", AppWebhooksSent, 1)
	r.Sample(t0)
	if st := r.Stats(); st.Tracked != 3 || st.Counted != 2 {
		t.Fatalf("stats %+v", st)
	}
	src.mu.Lock()
	src.readings = src.readings[:1]
	src.gone["2"], src.gone["in-1"] = true, true
	src.mu.Unlock()
	r.Sample(t0.Add(5 * time.Second))
	if st := r.Stats(); st.Tracked != 1 || st.Counted != 0 {
		t.Fatalf("after deleting app 2 and in-1: %+v", st)
	}
	if h := r.Get(App, "2"); h.Series[AppWebhooksSent][0] != 0 {
		t.Fatalf("deleted app kept its points: %v", h.Series)
	}
}

// TestKeysAreCapped: however many apps and instances appear, at most
// MaxKeys are tracked and counted; the others' counts are lost, and said to
// be.
func TestKeysAreCapped(t *testing.T) {
	src := &fakeApps{gone: map[string]bool{}}
	for i := range 10 {
		src.readings = append(src.readings, AppReading{AppID: fmt.Sprint("app-", i), Connections: 1})
	}
	r := New(src.sources(), Options{Points: 4, MaxKeys: 3})
	for i := range 10 {
		r.Count(Instance, fmt.Sprint("in-", i), InstanceDelivered, 1)
	}
	r.Sample(t0)
	st := r.Stats()
	if st.Tracked != 3 || st.Counted != 3 || st.Lost != 7 {
		t.Fatalf("stats %+v, want 3 tracked, 3 counted, 7 lost", st)
	}
	if h := r.Get(Instance, "in-9"); h.Tracked {
		t.Fatal("an untracked key says it is tracked")
	}
	if h := r.Get(App, "app-0"); !h.Tracked || h.Series[AppConnections][0] != 1 {
		t.Fatalf("first app %+v", h)
	}
}

// TestUntrackedKeysStartClean: what happens to a key while MaxKeys keys are
// tracked is forgotten at each sample, counts and running totals alike, so
// when the key gets a track its first point shows only its last interval.
func TestUntrackedKeysStartClean(t *testing.T) {
	src := &fakeApps{readings: []AppReading{{AppID: "a"}}, gone: map[string]bool{}}
	set := func(readings []AppReading, gone string) {
		src.mu.Lock()
		defer src.mu.Unlock()
		src.readings = readings
		src.gone[gone] = true
	}
	r := New(src.sources(), Options{Interval: time.Second, Points: 4, MaxKeys: 1})
	now := t0
	sample := func() {
		now = now.Add(time.Second)
		r.Sample(now)
	}
	// Counts: in-1 is counted while app a holds the only track.
	r.Count(Instance, "in-1", InstanceDelivered, 50)
	sample()
	if st := r.Stats(); st.Tracked != 1 || st.Counted != 1 {
		t.Fatalf("stats %+v, want 1 tracked, 1 counted", st)
	}
	set(nil, "a")
	sample() // a's track goes
	r.Count(Instance, "in-1", InstanceDelivered, 4)
	sample() // in-1 takes it
	if got := r.Get(Instance, "in-1").Series[InstanceDelivered]; got[len(got)-1] != 4 {
		t.Errorf("in-1's points %v, want 4 last (its counts while untracked dropped)", got)
	}

	// Running totals: app b's frames grow while in-1 holds the track.
	set([]AppReading{{AppID: "b", Delivered: 100}}, "in-1")
	sample() // b read, untracked; in-1's track goes
	set([]AppReading{{AppID: "b", Delivered: 103}}, "")
	sample() // b takes it
	if got := r.Get(App, "b").Series[AppDelivered]; got[len(got)-1] != 3 {
		t.Errorf("b's delivered points %v, want 3 last (103 - 100)", got)
	}
}

// TestOptionsDefaults: a zero option takes its default, a set one is kept.
func TestOptionsDefaults(t *testing.T) {
	want := Options{Interval: 5 * time.Second, Points: 720, MaxKeys: 1000}
	if got := (Options{}).WithDefaults(); got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	if got := (Options{Interval: -1, Points: -1, MaxKeys: -1}).WithDefaults(); got != want {
		t.Errorf("negative fields took %+v, want the defaults %+v", got, want)
	}
	if got := New(Sources{}, Options{}).Interval(); got != DefaultInterval {
		t.Errorf("default interval %v, want %v", got, DefaultInterval)
	}
	if got := New(Sources{}, Options{Interval: 2 * time.Second}).Interval(); got != 2*time.Second {
		t.Errorf("interval %v, want the 2 s set", got)
	}
	r := New(Sources{}, Options{})
	now := t0
	for range DefaultPoints + 1 {
		now = now.Add(time.Second)
		r.Sample(now)
	}
	if got := len(r.Get(App, "1").Times); got != DefaultPoints {
		t.Errorf("%d points kept, want the default %d", got, DefaultPoints)
	}
}

// TestSeriesOutOfRangeIgnored: a count for a series its kind does not have
// (an instance's series past its last, an app's, a negative one) or for no
// id is ignored: nothing is counted and nothing panics.
func TestSeriesOutOfRangeIgnored(t *testing.T) {
	r := New(Sources{}, Options{Points: 4})
	r.Count(Instance, "in-1", seriesOf(Instance), 7)
	r.Count(App, "1", seriesOf(App), 7)
	r.Count(App, "1", -1, 7)
	r.Count(App, "", AppWebhooksSent, 7)
	if st := r.Stats(); st.Counted != 0 || st.Lost != 0 {
		t.Fatalf("stats %+v, want nothing counted", st)
	}
}

// TestUntrackedCountedKeysDroppedWhenGone: a key counted but never tracked
// (MaxKeys keys tracked) goes when it no longer exists, freeing its room for
// the counts of another.
func TestUntrackedCountedKeysDroppedWhenGone(t *testing.T) {
	src := &fakeApps{readings: []AppReading{{AppID: "a"}}, gone: map[string]bool{}}
	r := New(src.sources(), Options{Points: 4, MaxKeys: 1})
	r.Count(Instance, "in-1", InstanceDelivered, 1)
	r.Sample(t0) // a takes the only track; in-1 stays counted
	if st := r.Stats(); st.Tracked != 1 || st.Counted != 1 {
		t.Fatalf("stats %+v, want 1 tracked, 1 counted", st)
	}
	src.mu.Lock()
	src.gone["in-1"] = true
	src.mu.Unlock()
	r.Sample(t0.Add(5 * time.Second))
	r.Count(Instance, "in-2", InstanceDelivered, 1)
	if st := r.Stats(); st.Counted != 1 || st.Lost != 0 {
		t.Fatalf("stats %+v, want in-1 gone and in-2 counted in its room", st)
	}
}
