package hub

import (
	"errors"
	"slices"
	"testing"

	"go.uber.org/zap"
)

// A client event goes to the channel's other subscribers and is reported
// to the observer (the client_event webhook) once it is published; one
// whose publish failed (the cluster cannot be reached) is not reported.
func TestAClientEventIsReportedOnceItIsPublished(t *testing.T) {
	m := Message{AppID: "1", Channel: "private-chat", Event: "client-typing", Data: "{}"}
	h := New(zap.NewNop())
	defer h.Close()
	sender, other := connect(t, h, "1"), connect(t, h, "1")
	for _, c := range []*Conn{sender, other} {
		subscribe(t, h, c, m.Channel, nil)
		takeFrames(t, c)
	}
	rec := &recorder{}
	h.SetObserver(rec)
	m.ExcludeSocketID = sender.SocketID()
	if err := h.PublishClientEvent(m); err != nil {
		t.Fatal(err)
	}
	h.Flush()
	if got := events(takeFrames(t, other)); got != "client-typing" {
		t.Fatalf("the other subscriber got %s", got)
	}
	if !slices.Equal(rec.kinds, []string{"client_event:"}) {
		t.Fatalf("the observer saw %v, want one client_event", rec.kinds)
	}

	hc, fc := clusterHub(t)
	fc.down = true
	rec = &recorder{}
	hc.SetObserver(rec)
	if err := hc.PublishClientEvent(m); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a client event through a cluster that is down: %v, want ErrUnavailable", err)
	}
	if len(rec.kinds) != 0 {
		t.Fatalf("the observer saw %v of an event not published", rec.kinds)
	}
}
