package hub

import "time"

// Message is one event on one channel as it travels between publishers and the
// nodes that hold subscribers.
type Message struct {
	AppID           string
	Channel         string
	Event           string
	Data            string
	UserID          string // sender of a presence client event; "" otherwise
	ExcludeSocketID string // the connection that must not receive it; "" for none
	// Cache marks an HTTP-triggered event on a cache channel, which becomes the
	// channel's cached event. Client events are never cached.
	Cache bool
}

// Broker carries messages to every node's hub. The in-process broker delivers
// straight to this hub; a cluster broker (Redis, NATS) will publish to the
// others too, each message carrying what receivers need to deliver it exactly
// once.
type Broker interface {
	Publish(Message)
}

type localBroker struct{ h *Hub }

func (b localBroker) Publish(m Message) { b.h.Deliver(m) }

// Publish hands m to the broker for delivery on every node.
func (h *Hub) Publish(m Message) {
	h.broker.Publish(m)
}

// Deliver queues m to every local subscriber of its channel except the
// excluded socket, and records it as the cached event of a cache channel. The
// frame is encoded once and the same bytes are queued for every subscriber.
// It never blocks: a subscriber whose queue is full is closed instead.
func (h *Hub) Deliver(m Message) {
	a := h.app(m.AppID, m.Cache)
	if a == nil {
		return
	}
	// The cache is written under the channel lock (or, with no channel, under
	// the app lock that creating one needs), so a concurrent Subscribe sees
	// either this event in the cache or this event in its queue, never both
	// and never neither.
	a.mu.RLock()
	ch := a.channels[m.Channel]
	if ch == nil {
		if m.Cache {
			a.setCache(m, h.now())
		}
		a.mu.RUnlock()
		return
	}
	ch.mu.RLock()
	a.mu.RUnlock()
	if m.Cache {
		a.setCache(m, h.now())
	}
	frame := eventFrame(m.Event, m.Channel, m.Data, m.UserID)
	for _, c := range ch.subs {
		if c.socketID != m.ExcludeSocketID {
			c.Send(frame)
		}
	}
	ch.mu.RUnlock()
}

func (a *appState) setCache(m Message, now time.Time) {
	a.cacheMu.Lock()
	a.cache[m.Channel] = cachedEvent{event: m.Event, data: m.Data, expires: now.Add(CacheTTL)}
	a.cacheMu.Unlock()
}
