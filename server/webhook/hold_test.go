package webhook

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/hub"
)

// named is an event as the hold tests write them: kind:channel[:user].
func named(ev hub.Event) string {
	s := string(ev.Kind) + ":" + ev.Channel
	if ev.UserID != "" {
		s += ":" + ev.UserID
	}
	return s
}

func namedAll(evs []hub.Event) string {
	var out []string
	for _, ev := range evs {
		out = append(out, named(ev))
	}
	return strings.Join(out, " ")
}

// A memory hold keeps a departure for exactly the hold, by the clock it is
// given, and lets everything else through; a return within the hold
// cancels its departure, and neither goes out; a return after it, or of
// another channel or member, goes out.
func TestMemoryHoldKeepsDeparturesForTheHold(t *testing.T) {
	const hold = 3 * time.Second
	t0 := time.Unix(1000, 0)
	ev := func(kind hub.EventKind, channel, user string) hub.Event {
		return hub.Event{AppID: "1", Kind: kind, Channel: channel, UserID: user}
	}
	for _, tt := range []struct {
		name   string
		events []hub.Event // taken at t0, t0+1s, t0+2s, …
		now    []string    // what Take let through, in order
		due    string      // what Due returns a hold after the first event
		later  string      // what Due returns a second after that
	}{
		{
			name:   "departures wait a hold",
			events: []hub.Event{ev(hub.ChannelVacated, "c", ""), ev(hub.MemberRemoved, "presence-c", "u")},
			due:    "channel_vacated:c", later: "member_removed:presence-c:u",
		},
		{
			name:   "a return within the hold cancels both",
			events: []hub.Event{ev(hub.ChannelVacated, "c", ""), ev(hub.MemberRemoved, "presence-c", "u"), ev(hub.ChannelOccupied, "c", ""), ev(hub.MemberAdded, "presence-c", "u")},
		},
		{
			name:   "another channel's or member's return goes out",
			events: []hub.Event{ev(hub.ChannelVacated, "c", ""), ev(hub.MemberRemoved, "presence-c", "u"), ev(hub.ChannelOccupied, "d", ""), ev(hub.MemberAdded, "presence-c", "v")},
			now:    []string{"channel_occupied:d", "member_added:presence-c:v"},
			due:    "channel_vacated:c", later: "member_removed:presence-c:u",
		},
		{
			name:   "two members' departures are held apart",
			events: []hub.Event{ev(hub.MemberRemoved, "presence-c", "u"), ev(hub.MemberRemoved, "presence-c", "v")},
			due:    "member_removed:presence-c:u", later: "member_removed:presence-c:v",
		},
		{
			name:   "other events go at once",
			events: []hub.Event{ev(hub.ClientEvent, "c", "u"), ev(hub.CacheMiss, "cache-c", ""), ev(hub.SubscriptionCount, "c", ""), ev(hub.ChannelOccupied, "c", "")},
			now:    []string{"client_event:c:u", "cache_miss:cache-c", "subscription_count:c", "channel_occupied:c"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := NewMemoryHold(hold)
			var now []string
			for i, e := range tt.events {
				if h.Take(e, t0.Add(time.Duration(i)*time.Second)) {
					now = append(now, named(e))
				}
			}
			if !slices.Equal(now, tt.now) {
				t.Errorf("let through %q, want %q", now, tt.now)
			}
			if got := namedAll(h.Due(t0.Add(hold-time.Nanosecond), false)); got != "" {
				t.Errorf("due before the hold passed: %s", got)
			}
			if got := namedAll(h.Due(t0.Add(hold), false)); got != tt.due {
				t.Errorf("due a hold after: %q, want %q", got, tt.due)
			}
			if got := namedAll(h.Due(t0.Add(hold+time.Second), false)); got != tt.later {
				t.Errorf("due a second later: %q, want %q", got, tt.later)
			}
			if got := namedAll(h.Due(t0.Add(time.Hour), true)); got != "" {
				t.Errorf("left held: %s", got)
			}
		})
	}
}

// Once its departure went out, a return goes out too.
func TestMemoryHoldReportsAReturnAfterTheHold(t *testing.T) {
	h := NewMemoryHold(time.Second)
	t0 := time.Unix(1000, 0)
	h.Take(hub.Event{AppID: "1", Kind: hub.ChannelVacated, Channel: "c"}, t0)
	if got := namedAll(h.Due(t0.Add(time.Second), false)); got != "channel_vacated:c" {
		t.Fatalf("due: %q", got)
	}
	if !h.Take(hub.Event{AppID: "1", Kind: hub.ChannelOccupied, Channel: "c"}, t0.Add(time.Second)) {
		t.Fatal("the channel_occupied after the channel_vacated went out was cancelled")
	}
}

// At shutdown every departure held goes, due or not, in the order they were
// taken (a departure taken again counts from its last time), apps apart.
func TestMemoryHoldReleasesAllInOrderAtShutdown(t *testing.T) {
	h := NewMemoryHold(time.Hour)
	t0 := time.Unix(1000, 0)
	for i, e := range []hub.Event{
		{AppID: "1", Kind: hub.ChannelVacated, Channel: "a"},
		{AppID: "1", Kind: hub.ChannelVacated, Channel: "b"},
		{AppID: "2", Kind: hub.ChannelVacated, Channel: "a"},
		{AppID: "1", Kind: hub.MemberRemoved, Channel: "presence-c", UserID: "u"},
		{AppID: "1", Kind: hub.ChannelVacated, Channel: "a"},
	} {
		h.Take(e, t0.Add(time.Duration(i)*time.Millisecond))
	}
	got := h.Due(t0, true)
	var apps []string
	for _, e := range got {
		apps = append(apps, e.AppID)
	}
	if n := namedAll(got); n != "channel_vacated:b channel_vacated:a member_removed:presence-c:u channel_vacated:a" || strings.Join(apps, "") != "1211" {
		t.Fatalf("released %s of apps %v", n, apps)
	}
	if left := h.Due(t0.Add(2*time.Hour), true); len(left) != 0 {
		t.Fatalf("held after all went: %s", namedAll(left))
	}
}
