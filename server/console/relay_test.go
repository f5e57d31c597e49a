package console

import (
	"bufio"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
)

// fakeRelay records what the console asks of its relay; wanted says
// which apps another node watches.
type fakeRelay struct {
	mu      sync.Mutex
	wanted  map[string]bool
	sent    []string // app: event
	watches []string // +app, -app
	asked   int      // calls of Wanted
}

func (f *fakeRelay) Wanted(appID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	return f.wanted[appID]
}

func (f *fakeRelay) Send(appID string, event []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, appID+": "+string(event))
}

func (f *fakeRelay) Watch(appID string)   { f.record("+" + appID) }
func (f *fakeRelay) Unwatch(appID string) { f.record("-" + appID) }

func (f *fakeRelay) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watches = append(f.watches, s)
}

func (f *fakeRelay) state() (sent, watches string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.sent, "\n"), strings.Join(f.watches, " ")
}

// In a cluster the console names its node in each event, sends an event
// to the relay only when another node watches its app, tells the relay
// when its first stream of an app opens and its last closes, and shows
// the events the relay delivers, with their drops.
func TestRelay(t *testing.T) {
	relay := &fakeRelay{wanted: map[string]bool{"1": true}}
	c, base := serveWith(t, func(c *Console) {
		c.now = func() time.Time { return time.UnixMilli(1700000000123) }
		c.SetRelay("node-a", relay)
	})

	c.Triggered("2", "news", "nobody", "{}") // nobody watches app 2 anywhere: free
	c.Triggered("1", "news", "elsewhere", "{}")
	if sent, watches := relay.state(); sent != `1: {"time_ms":1700000000123,"app_id":"1","kind":"trigger","channel":"news","event":"elsewhere","data":"{}","node":"node-a"}` || watches != "" {
		t.Fatalf("sent %q, watches %q", sent, watches)
	}
	relay.mu.Lock()
	asked := relay.asked
	relay.mu.Unlock()
	if asked != 2 {
		t.Fatalf("the relay was asked %d times whether two events were wanted, want once each", asked)
	}

	res := get(t, base+"/console/events?app=2", "Authorization", "Bearer "+token)
	defer res.Body.Close()
	second := get(t, base+"/console/events?app=2", "Authorization", "Bearer "+token)
	r := bufio.NewReader(res.Body)
	readEvent(t, r) // the opening comment
	readEvent(t, bufio.NewReader(second.Body))
	if _, watches := relay.state(); watches != "+2" {
		t.Fatalf("watches %q after two streams of app 2, want +2 once", watches)
	}

	c.Observe(hub.Event{AppID: "2", Kind: hub.ChannelOccupied, Channel: "here"})
	if got := readEvent(t, r); len(got) != 1 || got[0] != `data: {"time_ms":1700000000123,"app_id":"2","kind":"channel_occupied","channel":"here","node":"node-a"}` {
		t.Fatalf("message %q, want the event naming this node", got)
	}
	// Another node's events as they came, after the drops it reports.
	c.Deliver("2", []json.RawMessage{json.RawMessage(`{"kind":"trigger","node":"node-b"}`), json.RawMessage(`{"kind":"webhook","node":"node-b"}`)}, 3)
	want := [][]string{
		{"event: dropped", "data: 3"},
		{`data: {"kind":"trigger","node":"node-b"}`},
		{`data: {"kind":"webhook","node":"node-b"}`},
	}
	for _, w := range want {
		if got := readEvent(t, r); strings.Join(got, "\n") != strings.Join(w, "\n") {
			t.Fatalf("message %q, want %q", got, w)
		}
	}
	if sent, _ := relay.state(); strings.Contains(sent, `"app_id":"2"`) {
		t.Fatalf("app 2's events went to the relay though no other node watches it:\n%s", sent)
	}

	res.Body.Close()
	second.Body.Close()
	wait.Until(t, "the last stream of app 2 to tell the relay", func() bool {
		_, watches := relay.state()
		return watches == "+2 -2"
	})
}
