package console

import "encoding/json"

// Relay carries the console's events between the nodes of a cluster
// (server/cluster's ConsoleRelay is one), so that a stream shows what every
// node saw of its app. It must never block: its methods are called on the
// hub's and the HTTP API's paths.
type Relay interface {
	// Wanted reports whether a stream for appID is open on another node;
	// it is asked for every event, so it must be cheap.
	Wanted(appID string) bool
	// Send queues one event of appID (JSON) for the other nodes.
	Send(appID string, event []byte)
	// Watch says this node's first stream for appID opened, Unwatch that
	// its last one closed: the relay receives the app's events from the
	// other nodes in between.
	Watch(appID string)
	Unwatch(appID string)
}

// SetRelay puts the console in a cluster: node is this node's id, carried
// by each event it sees, and relay carries the events between the nodes.
// Call it before serving; events from the other nodes come in through
// Deliver.
func (c *Console) SetRelay(node string, relay Relay) {
	c.node, c.relay = node, relay
}

// Deliver hands events another node saw of appID (Event JSON, its node
// named in it) to this node's streams of the app, with how many that node
// dropped before them; a stream that falls behind drops them as it drops
// its own.
func (c *Console) Deliver(appID string, events []json.RawMessage, dropped int) {
	if len(events) == 0 {
		c.fanOut(appID, nil, dropped)
		return
	}
	for i, b := range events {
		if i > 0 {
			dropped = 0
		}
		c.fanOut(appID, b, dropped)
	}
}
