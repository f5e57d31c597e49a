package hub

import (
	"hash/fnv"
	"runtime"
	"slices"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
)

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
	// Position is the event's ID in its channel's history, when it has one
	// (PublishKept); recoverable subscribers get it (recovery.go).
	Position eventlog.ID
}

// Publish hands the messages on for delivery on every node: on a single node
// to the fan-out workers, in cluster mode to the cluster. It returns once
// they are queued (in a cluster: once the cluster has them):
// delivery is asynchronous, so a publisher (an HTTP trigger, a client event)
// never waits for a large fan-out. Messages of one channel are delivered in
// the order they were published. An error (ErrUnavailable in a cluster
// that cannot be reached) means none was accepted.
func (h *Hub) Publish(ms ...Message) error {
	if h.cluster != nil {
		// A copy, so that ms does not escape on a single node, where a
		// trigger's messages stay on its stack.
		return h.cluster.Publish(slices.Clone(ms)...)
	}
	for _, m := range ms {
		h.enqueue(m)
	}
	return nil
}

// Keeper is a channel history kept by a cluster (server/cluster's), which
// appends a publish's events to it in the round trip that publishes them,
// rather than in one of its own after it.
type Keeper interface {
	eventlog.Store
	// PublishKept publishes ms through the cluster, as Publish does, and,
	// when it can, appends them to this history (of their app, under p,
	// at now) in the same round trip; it reports whether it did. A failed
	// append is its to log: the events are published by then.
	PublishKept(p eventlog.Policy, now time.Time, ms []Message) (kept bool, err error)
}

// PublishClientEvent publishes a client event, whose sender is the
// connection m.ExcludeSocketID names (and, on a presence channel, the user
// m.UserID), and reports it to the observer (the client_event webhook), once,
// on the node where the client sent it. The transport has checked that the
// sender may send it.
func (h *Hub) PublishClientEvent(m Message) error {
	if err := h.Publish(m); err != nil {
		return err
	}
	h.notify(Event{AppID: m.AppID, Kind: ClientEvent, Channel: m.Channel, Name: m.Event, Data: m.Data, SocketID: m.ExcludeSocketID, UserID: m.UserID})
	return nil
}

// fanoutQueue is how many messages each fan-out worker buffers. When every
// slot is taken the publisher waits: the server is over capacity, and waiting
// is better than dropping events it has accepted.
const fanoutQueue = 4096

// fanoutItem is a message to deliver, a cluster's answer to a subscription
// (snap), or (with done set) a marker that Flush waits on.
type fanoutItem struct {
	msg     Message
	snap    *Snapshot
	recover *recoverItem
	done    chan struct{}
}

// startWorkers starts one fan-out worker per CPU. A channel always maps to
// the same worker, which keeps its events in order; different channels spread
// over the CPUs.
func (h *Hub) startWorkers() {
	h.workers = make([]chan fanoutItem, runtime.GOMAXPROCS(0))
	for i := range h.workers {
		q := make(chan fanoutItem, fanoutQueue)
		h.workers[i] = q
		h.workerWG.Add(1)
		go func() {
			defer h.workerWG.Done()
			for it := range q {
				switch {
				case it.done != nil:
					close(it.done)
				case it.snap != nil:
					h.completeSubscribe(it.snap)
				case it.recover != nil:
					h.recover(it.recover)
				default:
					h.Deliver(it.msg)
				}
			}
		}()
	}
}

func (h *Hub) enqueue(m Message) {
	h.workers[workerOf(m.AppID, m.Channel, len(h.workers))] <- fanoutItem{msg: m}
}

// workerOf is the fan-out worker of a channel, out of n.
func workerOf(appID, channel string, n int) int {
	f := fnv.New32a()
	f.Write([]byte(appID))
	f.Write([]byte{0})
	f.Write([]byte(channel))
	return int(f.Sum32() % uint32(n))
}

// Flush waits until every message published before it has been queued to
// its subscribers.
func (h *Hub) Flush() {
	dones := make([]chan struct{}, len(h.workers))
	for i, q := range h.workers {
		dones[i] = make(chan struct{})
		q <- fanoutItem{done: dones[i]}
	}
	for _, d := range dones {
		<-d
	}
}

// Close delivers what is queued and stops the fan-out workers. Publish must
// not be called afterwards.
func (h *Hub) Close() {
	for _, q := range h.workers {
		close(q)
	}
	h.workerWG.Wait()
}

// Deliver queues m to every local subscriber of its channel except the
// excluded socket, and records it as the cached event of a cache channel. The
// frame is encoded once and the same bytes are queued for every subscriber.
// It never blocks: a subscriber whose queue is full is closed instead.
func (h *Hub) Deliver(m Message) {
	cache := m.Cache && h.cluster == nil // a cluster keeps the cache itself
	a := h.app(m.AppID, cache)
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
		if cache {
			a.setCache(m, h.now())
		}
		a.mu.RUnlock()
		return
	}
	ch.mu.RLock()
	a.mu.RUnlock()
	if cache {
		a.setCache(m, h.now())
	}
	frame := EventFrame(m.Event, m.Channel, m.Data, m.UserID)
	sent := 0
	if ch.recoverable > 0 && !m.Position.IsZero() {
		sent = deliverPositioned(ch, m, frame)
	} else {
		for _, c := range ch.subs {
			if c.socketID != m.ExcludeSocketID {
				c.Send(frame)
				sent++
			}
		}
	}
	ch.mu.RUnlock()
	a.delivered.Add(int64(sent))
}

func (a *appState) setCache(m Message, now time.Time) {
	a.cacheMu.Lock()
	a.cache[m.Channel] = cachedEvent{event: m.Event, data: m.Data, expires: now.Add(CacheTTL)}
	a.cacheMu.Unlock()
}
