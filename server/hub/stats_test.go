package hub

import (
	"testing"

	"go.uber.org/zap"
)

// AppStats.Delivered counts the event frames queued to each app's
// connections, the excluded sender left out, as a running total.
func TestAppStatsDelivered(t *testing.T) {
	h := New(zap.NewNop())
	a, b := connect(t, h, "1"), connect(t, h, "1")
	subscribe(t, h, a, "news", nil)
	subscribe(t, h, b, "news", nil)
	other := connect(t, h, "2")
	subscribe(t, h, other, "news", nil)
	h.publishNow(Message{AppID: "1", Channel: "news", Event: "e", Data: "{}"})
	h.publishNow(Message{AppID: "1", Channel: "news", Event: "e", Data: "{}", ExcludeSocketID: b.SocketID()})
	h.publishNow(Message{AppID: "1", Channel: "empty", Event: "e", Data: "{}"})
	st := h.AppStats()
	if len(st) != 2 || st[0].Delivered != 3 || st[1].Delivered != 0 {
		t.Fatalf("stats %+v, want 3 frames delivered to app 1 and none to app 2", st)
	}
}
