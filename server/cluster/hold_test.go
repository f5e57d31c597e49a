package cluster

import (
	"testing"
	"time"
)

// A node looks for due held-back webhooks when the earliest is due, never
// more often than every 5 ms nor less often than once a hold, once a hold
// while nothing is held, and every 100 ms while Redis does not answer.
func TestNextLookIsWhenTheEarliestHeldEventIsDue(t *testing.T) {
	const hold = 3 * time.Second
	for _, tt := range []struct {
		next     time.Duration
		answered bool
		want     time.Duration
	}{
		{200 * time.Millisecond, true, 200 * time.Millisecond},
		{0, true, 5 * time.Millisecond},
		{time.Millisecond, true, 5 * time.Millisecond},
		{10 * time.Second, true, hold},
		{-1, true, hold},
		{200 * time.Millisecond, false, 100 * time.Millisecond},
	} {
		if got := nextLook(tt.next, tt.answered, hold); got != tt.want {
			t.Errorf("nextLook(%v, %v, %v) = %v, want %v", tt.next, tt.answered, hold, got, tt.want)
		}
	}
}
