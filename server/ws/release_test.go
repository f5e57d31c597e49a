package ws

import "testing"

// Memory is given back once a second passes with no new connection after
// a storm of them, and only then.
func TestStormWatchReleasesOnceAStormHasPassed(t *testing.T) {
	w := newStormWatch()
	released := 0
	w.release = func() { released++ }
	for i, step := range []struct {
		opened int64
		want   int
	}{
		{500, 0},  // connections opening
		{1500, 0}, // still opening
		{1500, 1}, // a quiet second after 1,500: given back
		{1500, 1}, // quiet, nothing new since
		{1900, 1}, // a few more
		{1900, 1}, // quiet, but fewer than a storm since the last time
		{2600, 1}, // a storm again
		{2600, 2}, // and its end
		{2600, 2},
	} {
		w.tick(step.opened)
		if released != step.want {
			t.Fatalf("tick %d (%d opened): released %d times, want %d", i, step.opened, released, step.want)
		}
	}
}
