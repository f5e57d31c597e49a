package ws

import (
	"fmt"
	"strings"
	"testing"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/wait"
)

// One poller that stops polling, among many WebSocket clients that read,
// costs them nothing: every event still reaches every WebSocket client,
// while the poller's frames pile up only to the session's byte bound, where
// it is closed (4100) and told so when it polls again. Nothing here is
// timed: the checks are on deliveries, counters and the queue's bound.
func TestXHRSlowPollerCostsTheOthersNothing(t *testing.T) {
	const (
		fast      = 20
		events    = 40
		maxQueue  = 8 << 10
		eventSize = 1 << 10 // 40 events: five times the bound
	)
	s := newWSServer(t, Options{MaxQueueBytes: maxQueue})
	var clients []*client
	for range fast {
		c := s.dial(t, "key1")
		c.subscribe("busy", "", "")
		c.expect("pusher_internal:subscription_succeeded", "busy")
		clients = append(clients, c)
	}
	slow := s.xhrOpen(t, "key1", transportPolling)
	slow.established()
	slow.subscribe("busy", "", "")
	slow.expect("pusher_internal:subscription_succeeded", "busy")
	slow.stopReceiving() // polls no more; its session waits for the disconnect delay (5 s)

	// One event at a time, each read by every WebSocket client before the
	// next: their queues never hold more than one, the poller's all.
	data := strings.Repeat("x", eventSize)
	for i := range events {
		if err := s.hub.Publish(hub.Message{AppID: "1", Channel: "busy", Event: fmt.Sprint("e", i), Data: data}); err != nil {
			t.Fatal(err)
		}
		for _, c := range clients {
			c.expect(fmt.Sprint("e", i), "busy")
		}
	}
	if n := s.handler.SlowConsumersClosed(); n != 1 {
		t.Fatalf("%d slow consumers closed, want 1 (the poller)", n)
	}
	if n := s.hub.Connections("1"); n != fast+1 {
		t.Fatalf("%d connections, want %d: the closed poller waits for its next poll", n, fast+1)
	}
	// It polls again: the close frame, none of the events it could not hold.
	slow.receive(transportPolling, "protocol=7")
	if code, errCode := slow.expectClose(); code != 4100 || errCode != 4100 {
		t.Fatalf("slow poller: closed with %d after pusher:error %d, want 4100", code, errCode)
	}
	wait.NoError(t, func() error {
		if n := s.hub.Connections("1"); n != fast {
			return fmt.Errorf("%d connections, want %d once the poller has its close frame", n, fast)
		}
		return nil
	})
	for _, c := range clients {
		c.ping()
	}
}
