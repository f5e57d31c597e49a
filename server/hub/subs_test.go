package hub

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

// A count is throttled only within CountThrottleEvery of the last one: a
// join exactly that long after it is counted at once.
func TestSubscriptionCountThrottleWindowEnds(t *testing.T) {
	h := New(nopLogger())
	now := time.Unix(1000, 0)
	h.now = func() time.Time { return now }
	h.SetSubscriptionCount("1", true)
	first := connect(t, h, "1")
	subscribe(t, h, first, "big", nil)
	for range CountThrottleAbove {
		subscribe(t, h, connect(t, h, "1"), "big", nil)
	}
	first.Take(nil)
	now = now.Add(CountThrottleEvery)
	subscribe(t, h, connect(t, h, "1"), "big", nil)
	frames, _ := first.Take(nil)
	if len(frames) != 1 || !strings.Contains(string(frames[0]), `\"subscription_count\":102`) {
		t.Fatalf("frames %q, want the count of 102 at once", frames)
	}
}

// subscriptions behaves as the map it stands for, below and above
// smallSubscriptions, as channels come and go.
func TestSubscriptionsActAsAMap(t *testing.T) {
	var s subscriptions
	want := map[string]*subscription{}
	check := func(step string) {
		t.Helper()
		if s.len() != len(want) {
			t.Fatalf("%s: len %d, want %d", step, s.len(), len(want))
		}
		got := maps.Collect(s.all())
		if !maps.Equal(got, want) {
			t.Fatalf("%s: holds %v, want %v", step, got, want)
		}
		for name, sub := range want {
			if s.get(name) != sub {
				t.Fatalf("%s: get(%q) is not the subscription set", step, name)
			}
		}
		if s.get("absent") != nil {
			t.Fatalf("%s: get of an absent channel is not nil", step)
		}
	}
	for i := range 2*smallSubscriptions + 3 {
		name, sub := fmt.Sprintf("ch-%d", i), &subscription{userID: fmt.Sprint(i)}
		s.set(name, sub)
		want[name] = sub
		check(fmt.Sprintf("after adding %s", name))
		if i%3 == 0 {
			again := &subscription{}
			s.set(name, again) // replaced, not added
			want[name] = again
			check(fmt.Sprintf("after replacing %s", name))
		}
		if i%4 == 1 {
			s.remove(name)
			delete(want, name)
			check(fmt.Sprintf("after removing %s", name))
		}
	}
	taken := s.takeAll()
	if len(taken) != len(want) || s.len() != 0 {
		t.Fatalf("takeAll returned %d of %d and left %d", len(taken), len(want), s.len())
	}
	for _, e := range taken {
		if want[e.name] != e.sub {
			t.Fatalf("takeAll returned %q with another subscription", e.name)
		}
	}
	// Small again after emptying.
	sub := &subscription{}
	s.set("one", sub)
	if s.many != nil || s.get("one") != sub {
		t.Fatal("an emptied set does not start small again")
	}
}
