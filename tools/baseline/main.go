// Command herald-baseline is the limit baseline of Herald's benchmarks: the
// smallest broadcast server on the same WebSocket library as Herald
// (github.com/coder/websocket, the version of the root go.mod), so that
// `make bench` can print Herald ÷ baseline for each scenario with the same
// load tool (tools/load) driving both.
//
// It speaks just enough of the Pusher protocol for the load tool:
//
//   - GET /app/<anything> upgrades to a WebSocket and sends
//     pusher:connection_established with a socket_id;
//   - pusher:subscribe {"channel": name} is answered with
//     pusher_internal:subscription_succeeded for that name (any name, no
//     authorization), pusher:unsubscribe leaves it, pusher:ping is answered
//     with pusher:pong; everything else is ignored;
//   - POST /apps/<id>/events with {"name", "channel" or "channels", "data"}
//     writes the event, encoded once per channel, to every subscriber of the
//     channel and answers {} — no signature check, no validation beyond
//     decoding the JSON, no limits, no webhooks, no metrics;
//   - any other POST is the bare HTTP handler: it answers {} and does nothing
//     else (the ceiling of an HTTP handler on net/http, for the wrk figures).
//
// Design, as a minimal well-written server would do it:
//
//   - Subscribers: one map from channel name to a slice of connections
//     (swap-remove with an index map), under one RWMutex. A trigger walks the
//     slice under the read lock, so concurrent publishers do not serialize.
//   - Per connection: the reader runs in the HTTP handler's goroutine (it
//     reads client frames until the socket fails), and one writer goroutine
//     drains the connection's queue: a mutex-guarded slice of pre-encoded
//     frames plus a one-slot wake-up channel. Publishing appends the frame's
//     shared bytes to each queue and never touches a socket, so a trigger
//     costs a lock and an append per subscriber and the socket writes run in
//     parallel on every core. The writer takes the whole queue at once and
//     writes the frames with no context (no timer per write).
//   - No silent loss: a queue above -max-queue bytes (1 MiB, Herald's
//     default) closes its connection with 4100, which the load tool counts.
//   - Compression off, read limit 1 MiB, as in Herald.
//
// It prints {"msg":"listening","addr":"host:port"} on stderr once it listens
// (the same line Herald logs), and stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	maxQueue := flag.Int("max-queue", 1<<20, "bytes queued for one connection before it is closed with 4100")
	flag.Parse()

	raiseNoFile()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "herald-baseline:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "{\"msg\":\"listening\",\"addr\":%q}\n", ln.Addr().String())

	b := newBroker(*maxQueue)
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // hijacked WebSockets die with the process
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "herald-baseline:", err)
		os.Exit(1)
	}
}

// raiseNoFile lifts the soft open-file limit to the hard one: one descriptor
// per connection.
func raiseNoFile() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// broker holds the subscribers of every channel.
type broker struct {
	maxQueue int
	nextID   atomic.Uint64
	slow     atomic.Int64

	mu       sync.RWMutex
	channels map[string]*channel
}

type channel struct {
	subs []*conn
	idx  map[*conn]int
}

func newBroker(maxQueue int) *broker {
	return &broker{maxQueue: maxQueue, channels: map[string]*channel{}}
}

func (b *broker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/app/"):
		b.serveWS(w, r)
	case r.Method == http.MethodPost && isTriggerPath(r.URL.Path):
		b.trigger(w, r)
	case r.Method == http.MethodPost:
		_, _ = io.Copy(io.Discard, r.Body)
		answerEmpty(w)
	default:
		http.NotFound(w, r)
	}
}

// isTriggerPath matches /apps/<id>/events.
func isTriggerPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/apps/")
	if !ok {
		return false
	}
	id, ok := strings.CutSuffix(rest, "/events")
	return ok && id != "" && !strings.Contains(id, "/")
}

var emptyObject = []byte("{}")

func answerEmpty(w http.ResponseWriter) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{"2"}
	_, _ = w.Write(emptyObject)
}

// trigger publishes one event to its channels.
func (b *broker) trigger(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ev struct {
		Name     string          `json:"name"`
		Channel  string          `json:"channel"`
		Channels []string        `json:"channels"`
		Data     json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ev.Channel != "" {
		ev.Channels = append(ev.Channels, ev.Channel)
	}
	// Pusher frames carry data as a JSON string: a string is copied as sent,
	// anything else is sent as its JSON text.
	data := []byte(ev.Data)
	if len(data) == 0 || data[0] != '"' {
		data, _ = json.Marshal(string(ev.Data))
	}
	for _, name := range ev.Channels {
		b.publish(name, eventFrame(ev.Name, name, data))
	}
	answerEmpty(w)
}

// eventFrame is {"event":name,"channel":ch,"data":data}, data being JSON.
func eventFrame(name, ch string, data []byte) []byte {
	en, _ := json.Marshal(name)
	cn, _ := json.Marshal(ch)
	f := make([]byte, 0, len(en)+len(cn)+len(data)+32)
	f = append(f, `{"event":`...)
	f = append(f, en...)
	if ch != "" {
		f = append(f, `,"channel":`...)
		f = append(f, cn...)
	}
	f = append(f, `,"data":`...)
	f = append(f, data...)
	return append(f, '}')
}

// publish queues one pre-encoded frame on every subscriber of the channel.
func (b *broker) publish(name string, frame []byte) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if ch := b.channels[name]; ch != nil {
		for _, c := range ch.subs {
			c.send(frame)
		}
	}
}

func (b *broker) subscribe(c *conn, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := b.channels[name]
	if ch == nil {
		ch = &channel{idx: map[*conn]int{}}
		b.channels[name] = ch
	}
	if _, ok := ch.idx[c]; ok {
		return
	}
	ch.idx[c] = len(ch.subs)
	ch.subs = append(ch.subs, c)
}

func (b *broker) unsubscribe(c *conn, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := b.channels[name]
	if ch == nil {
		return
	}
	i, ok := ch.idx[c]
	if !ok {
		return
	}
	last := len(ch.subs) - 1
	ch.subs[i] = ch.subs[last]
	ch.idx[ch.subs[i]] = i
	ch.subs[last] = nil
	ch.subs = ch.subs[:last]
	delete(ch.idx, c)
	if len(ch.subs) == 0 {
		delete(b.channels, name)
	}
}

// conn is one WebSocket connection: its queue and the channels it is on.
type conn struct {
	b  *broker
	ws *websocket.Conn

	mu       sync.Mutex
	queue    [][]byte
	queued   int // bytes in queue
	closed   bool
	overflow bool
	wake     chan struct{} // one slot: the writer has something to do

	channels []string // reader goroutine only
}

// send queues a frame for the writer; a queue over the limit closes the
// connection with 4100 instead of dropping frames.
func (c *conn) send(frame []byte) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.queued+len(frame) > c.b.maxQueue {
		c.closed, c.overflow = true, true
		c.queue, c.queued = nil, 0
	} else {
		c.queue = append(c.queue, frame)
		c.queued += len(frame)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// shut stops the writer once it has nothing left to do.
func (c *conn) shut() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writeLoop is the connection's only writer.
func (c *conn) writeLoop(done chan<- struct{}) {
	defer close(done)
	var batch [][]byte
	for range c.wake {
		c.mu.Lock()
		batch, c.queue = c.queue, batch[:0]
		c.queued = 0
		closed, overflow := c.closed, c.overflow
		c.mu.Unlock()
		for i, f := range batch {
			if err := c.ws.Write(context.Background(), websocket.MessageText, f); err != nil {
				_ = c.ws.CloseNow()
				return
			}
			batch[i] = nil
		}
		if overflow {
			c.b.slow.Add(1)
			_ = c.ws.Close(4100, "slow consumer")
			return
		}
		if closed {
			return
		}
	}
}

var pongFrame = []byte(`{"event":"pusher:pong","data":"{}"}`)

func (b *broker) serveWS(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		return
	}
	ws.SetReadLimit(1 << 20)
	c := &conn{b: b, ws: ws, wake: make(chan struct{}, 1)}
	writerDone := make(chan struct{})
	go c.writeLoop(writerDone)
	defer func() {
		for _, name := range c.channels {
			b.unsubscribe(c, name)
		}
		c.shut()
		_ = ws.CloseNow() // the reader failed: the socket is gone, unblock the writer
		<-writerDone
	}()

	id := b.nextID.Add(1)
	socketID := strconv.FormatUint(id/1000000+1, 10) + "." + strconv.FormatUint(id%1000000, 10)
	est, _ := json.Marshal(map[string]any{"socket_id": socketID, "activity_timeout": 120})
	c.send(eventFrame("pusher:connection_established", "", mustJSONString(est)))

	for {
		typ, msg, err := ws.Read(context.Background())
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		var f struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		}
		if json.Unmarshal(msg, &f) != nil {
			continue
		}
		switch f.Event {
		case "pusher:ping":
			c.send(pongFrame)
		case "pusher:subscribe", "pusher:unsubscribe":
			name := channelOf(f.Data)
			if name == "" {
				continue
			}
			if f.Event == "pusher:unsubscribe" {
				b.unsubscribe(c, name)
				c.forget(name)
				continue
			}
			b.subscribe(c, name)
			c.remember(name)
			c.send(eventFrame("pusher_internal:subscription_succeeded", name, []byte(`"{}"`)))
		}
	}
}

func (c *conn) remember(name string) {
	for _, n := range c.channels {
		if n == name {
			return
		}
	}
	c.channels = append(c.channels, name)
}

func (c *conn) forget(name string) {
	for i, n := range c.channels {
		if n == name {
			c.channels = append(c.channels[:i], c.channels[i+1:]...)
			return
		}
	}
}

// channelOf reads the channel name of a subscribe's data, an object or (as
// some clients send it) a JSON string holding one.
func channelOf(data json.RawMessage) string {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if json.Unmarshal(data, &s) != nil {
			return ""
		}
		data = json.RawMessage(s)
	}
	var d struct {
		Channel string `json:"channel"`
	}
	_ = json.Unmarshal(data, &d)
	return d.Channel
}

func mustJSONString(b []byte) []byte {
	s, _ := json.Marshal(string(b))
	return s
}
