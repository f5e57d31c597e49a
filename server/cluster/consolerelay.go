package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Bounds and timing of the console relay.
const (
	// relayFlush is how often queued console events go out, in one PUBLISH
	// per app, all in one pipeline.
	relayFlush = 100 * time.Millisecond
	// relayRefresh is how often the node asks Redis which apps have a
	// console open on another node.
	relayRefresh = time.Second
	// relayMaxEvents and relayMaxBytes bound what one flush sends (so at
	// most 10 times that per second); events beyond are dropped, counted
	// and reported to the watching consoles with the next flush.
	relayMaxEvents = 256
	relayMaxBytes  = 256 << 10
	// relayMaxMessage bounds a message taken from Redis: larger ones are
	// not from a node of this version and are ignored.
	relayMaxMessage = 2 * relayMaxBytes
)

// ConsoleRelay carries the debug console's live events between the nodes
// of the cluster, over Redis pub/sub on one channel per app
// (<prefix>console:<app>), and only while a console stream for that app is
// open on another node: a node subscribes to an app's channel while it has
// a stream for the app open (Watch, Unwatch), and every relayRefresh asks
// Redis which of the channels have subscribers (PUBSUB CHANNELS and
// NUMSUB, one round trip, whatever the traffic). Events are queued without
// touching Redis (Send) and published every relayFlush, bounded per flush.
// Pub/sub rather than the cluster's stream: what a console misses while
// Redis is away is not worth keeping.
//
// It implements console.Relay.
type ConsoleRelay struct {
	c       *member
	deliver func(appID string, events []json.RawMessage, dropped int)
	channel string // the channels' prefix: <prefix>console:

	// wanted holds the apps whose events another node's console wants; nil
	// when none, so that an event costs one atomic load then.
	wanted atomic.Pointer[map[string]bool]

	watchMu sync.Mutex
	watched map[string]bool // apps with a stream open here
	changed chan struct{}   // watched changed: subscribe to match

	queue relayQueue

	published, sent, received atomic64
}

// relayMessage is one PUBLISH: the events of one app that one node saw
// since its previous flush, and how many it dropped meanwhile.
type relayMessage struct {
	Node    string            `json:"node"`
	Dropped int               `json:"dropped,omitempty"`
	Events  []json.RawMessage `json:"events"`
}

// ConsoleRelay starts relaying console events for this node; deliver gets
// the events other nodes saw of an app this node watches, with how many
// they dropped. Call it once; it stops with Close.
func (c *member) ConsoleRelay(deliver func(appID string, events []json.RawMessage, dropped int)) *ConsoleRelay {
	r := &ConsoleRelay{
		c:       c,
		deliver: deliver,
		channel: c.key("console:"),
		watched: make(map[string]bool),
		changed: make(chan struct{}, 1),
	}
	r.queue.init()
	c.relay.Store(r)
	c.run(r.loop)
	return r
}

// Wanted reports whether a console stream for appID is open on another
// node, as Redis said at the last refresh.
func (r *ConsoleRelay) Wanted(appID string) bool {
	m := r.wanted.Load()
	return m != nil && (*m)[appID]
}

// Send queues one event (JSON) of appID for the other nodes' consoles,
// without waiting; beyond the bounds of a flush it is dropped and counted.
func (r *ConsoleRelay) Send(appID string, event []byte) {
	r.queue.add(appID, event)
}

// Watch says a console stream for appID opened on this node and none was
// open before; Unwatch that the last one closed.
func (r *ConsoleRelay) Watch(appID string)   { r.setWatched(appID, true) }
func (r *ConsoleRelay) Unwatch(appID string) { r.setWatched(appID, false) }

func (r *ConsoleRelay) setWatched(appID string, on bool) {
	r.watchMu.Lock()
	if on {
		r.watched[appID] = true
	} else {
		delete(r.watched, appID)
	}
	r.watchMu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// RelayStats are the relay's counts since the node started.
type RelayStats struct {
	Published int64 // PUBLISH commands sent
	Sent      int64 // events in them
	Dropped   int64 // events dropped past the bounds of a flush
	Received  int64 // events received from other nodes
}

// Stats returns the relay's counts; a nil relay has none.
func (r *ConsoleRelay) Stats() RelayStats {
	if r == nil {
		return RelayStats{}
	}
	return RelayStats{
		Published: r.published.Load(), Sent: r.sent.Load(),
		Dropped: r.queue.droppedTotal.Load(), Received: r.received.Load(),
	}
}

// loop keeps the subscriptions in step with the streams open here, learns
// which apps other nodes watch, and flushes the queue, until the node
// leaves the cluster.
func (r *ConsoleRelay) loop() {
	var sub relaySubscription
	defer sub.close()
	flush, stopFlush := r.c.opts.ticker(relayFlush)
	defer stopFlush()
	refresh, stopRefresh := r.c.opts.ticker(relayRefresh)
	defer stopRefresh()
	for {
		select {
		case <-r.c.ctx.Done():
			return
		case <-r.changed:
			sub.match(r, r.watchedNow())
		case <-refresh:
			r.refresh(sub.apps)
		case <-flush:
			r.flush()
		}
	}
}

func (r *ConsoleRelay) watchedNow() map[string]bool {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	out := make(map[string]bool, len(r.watched))
	for app := range r.watched {
		out[app] = true
	}
	return out
}

// refresh asks Redis which apps' console channels have subscribers on
// other nodes: those of PUBSUB CHANNELS that this node is not subscribed
// to (mine: the loop's subscription, not the streams open here, which it
// may not have caught up with), and those it is subscribed to with more
// than one subscriber.
func (r *ConsoleRelay) refresh(mine map[string]bool) {
	ctx, cancel := context.WithTimeout(r.c.ctx, relayRefresh)
	defer cancel()
	rdb, err := r.c.pubsubNode(ctx)
	if err != nil {
		r.wanted.Store(nil)
		return
	}
	pipe := rdb.Pipeline()
	all := pipe.PubSubChannels(ctx, globEscape(r.channel)+"*")
	var counts *redis.MapStringIntCmd
	if len(mine) > 0 {
		chans := make([]string, 0, len(mine))
		for app := range mine {
			chans = append(chans, r.channel+app)
		}
		counts = pipe.PubSubNumSub(ctx, chans...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// Redis is away: nobody would get the events.
		r.wanted.Store(nil)
		return
	}
	wanted := make(map[string]bool)
	for _, ch := range all.Val() {
		if app, ok := strings.CutPrefix(ch, r.channel); ok && !mine[app] {
			wanted[app] = true
		}
	}
	if counts != nil {
		for ch, n := range counts.Val() {
			if n > 1 {
				wanted[strings.TrimPrefix(ch, r.channel)] = true
			}
		}
	}
	if len(wanted) == 0 {
		r.wanted.Store(nil)
		return
	}
	r.wanted.Store(&wanted)
}

// flush publishes what the queue holds, one message per app, in one
// pipeline. What Redis refuses is lost: the console is a view, not a log.
func (r *ConsoleRelay) flush() {
	batches := r.queue.take()
	if len(batches) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.c.ctx, relayRefresh)
	defer cancel()
	pipe := r.c.rdb.Pipeline()
	events := 0
	for app, b := range batches {
		msg, err := json.Marshal(relayMessage{Node: r.c.id, Dropped: b.dropped, Events: b.events})
		if err != nil {
			continue
		}
		pipe.Publish(ctx, r.channel+app, msg)
		events += len(b.events)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		r.c.log.Debug("console events not relayed", zap.Error(err))
		return
	}
	r.published.Add(int64(len(batches)))
	r.sent.Add(int64(events))
}

// pubsubNode is where the node asks PUBSUB which console channels have
// subscribers: Redis itself; in a Redis Cluster, the node that serves the
// slot of the console's channels, which is where every node's relay
// subscribes (go-redis subscribes on the node of the first channel's
// slot), as PUBSUB counts a node's own subscribers only.
func (c *member) pubsubNode(ctx context.Context) (redis.Cmdable, error) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return c.rdb, nil
	}
	return cc.MasterForKey(ctx, c.key("console:"))
}

// receive hands the events of a message from another node to deliver. A
// panic while doing so is recovered and counted with the cluster's, so
// that it costs that message only, not the subscription's goroutine.
func (r *ConsoleRelay) receive(m *redis.Message) {
	defer r.c.stats.panics.Recover(r.c.log, "console relay message")
	app, ok := strings.CutPrefix(m.Channel, r.channel)
	if !ok || len(m.Payload) > relayMaxMessage {
		return
	}
	var msg relayMessage
	if err := json.Unmarshal([]byte(m.Payload), &msg); err != nil || msg.Node == r.c.id {
		return // not ours to read, or this node's own events
	}
	r.received.Add(int64(len(msg.Events)))
	r.deliver(app, msg.Events, msg.Dropped)
}

// relaySubscription is the relay loop's pub/sub connection: open while
// this node watches an app, subscribed to the channels of those apps.
type relaySubscription struct {
	ps   *redis.PubSub
	apps map[string]bool
	done chan struct{} // closed when the receiving goroutine ends
}

// match subscribes to the channels of want and no others, opening the
// connection for the first and closing it after the last. go-redis
// subscribes again to the channels it was given when its connection is
// replaced.
func (s *relaySubscription) match(r *ConsoleRelay, want map[string]bool) {
	if len(want) == 0 {
		s.close()
		return
	}
	ctx, cancel := context.WithTimeout(r.c.ctx, relayRefresh)
	defer cancel()
	var add, drop []string
	for app := range want {
		if !s.apps[app] {
			add = append(add, r.channel+app)
		}
	}
	for app := range s.apps {
		if !want[app] {
			drop = append(drop, r.channel+app)
		}
	}
	if s.ps == nil {
		s.ps = r.c.rdb.Subscribe(ctx, add...)
		s.done = make(chan struct{})
		ch, done := s.ps.Channel(), s.done
		go func() {
			defer close(done)
			for m := range ch {
				r.receive(m)
			}
		}()
	} else if len(add) > 0 {
		if err := s.ps.Subscribe(ctx, add...); err != nil {
			r.c.log.Debug("console relay: subscribing", zap.Error(err))
		}
	}
	if len(drop) > 0 { // never empty: that would unsubscribe from all
		if err := s.ps.Unsubscribe(ctx, drop...); err != nil {
			r.c.log.Debug("console relay: unsubscribing", zap.Error(err))
		}
	}
	s.apps = want
}

func (s *relaySubscription) close() {
	if s.ps == nil {
		return
	}
	s.ps.Close()
	<-s.done
	s.ps, s.apps, s.done = nil, nil, nil
}

// globEscape escapes the characters that Redis's glob patterns treat
// specially, so a prefix matches only itself.
func globEscape(s string) string {
	var b strings.Builder
	for _, ch := range s {
		if strings.ContainsRune(`*?[]\`, ch) {
			b.WriteByte('\\')
		}
		b.WriteRune(ch)
	}
	return b.String()
}

// relayQueue is what waits for the next flush, per app, within the
// bounds of one flush.
type relayQueue struct {
	mu           sync.Mutex
	batches      map[string]*relayBatch
	events       int
	bytes        int
	droppedTotal atomic64
}

type relayBatch struct {
	events  []json.RawMessage
	dropped int
}

func (q *relayQueue) init() { q.batches = make(map[string]*relayBatch) }

// add queues event for appID unless the flush is full, which drops it and
// counts the drop in the app's batch.
func (q *relayQueue) add(appID string, event []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.batches[appID]
	if b == nil {
		b = &relayBatch{}
		q.batches[appID] = b
	}
	if q.events >= relayMaxEvents || q.bytes+len(event) > relayMaxBytes {
		b.dropped++
		q.droppedTotal.Add(1)
		return
	}
	b.events = append(b.events, event)
	q.events++
	q.bytes += len(event)
}

// take empties the queue and returns what it held.
func (q *relayQueue) take() map[string]*relayBatch {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.batches) == 0 {
		return nil
	}
	out := q.batches
	q.batches = make(map[string]*relayBatch)
	q.events, q.bytes = 0, 0
	return out
}
