// Package webhook delivers Channels webhooks: it receives the hub's channel
// events, holds back channel_vacated and member_removed for a few seconds
// (dropped if the state flips back), writes one request per matching endpoint
// (or one batch) to a durable outbox in SQLite, and sends the outbox with
// retries and exponential backoff. The hub is never blocked: events arrive
// through a bounded buffer.
package webhook

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/gen/channels"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/signing"
	"github.com/heraldrt/herald/storage"
)

// Options tune the dispatcher. Zero values take the defaults.
type Options struct {
	Hold        time.Duration // how long vacated / member_removed wait; default 3 s
	Flush       time.Duration // how often accepted events are written to the outbox; default 100 ms
	MaxAge      time.Duration // how long a request is retried; default 5 min
	BaseBackoff time.Duration // first retry delay, doubled per attempt; default 1 s
	MaxBackoff  time.Duration // retry delay cap; default 1 min
	Buffer      int           // events buffered between the hub and the dispatcher; default 65536
	Senders     int           // concurrent deliveries; default 8
	Client      *http.Client  // default: 10 s timeout
	// Lease is how long a sender holds the requests it claimed from the
	// outbox; a request is attempted only while its claim has at least the
	// client's timeout left. Default: six client timeouts; at least 1 min
	// and two client timeouts.
	Lease time.Duration
	// OnAttempt, when set, is told the outcome of every delivery attempt
	// (the debug console shows them). It must return at once.
	OnAttempt func(Attempt)
}

// Attempt is the outcome of one webhook request.
type Attempt struct {
	AppID  string
	URL    string
	Status int    // HTTP status; 0 when no response came
	Error  string // why it failed; "" when delivered
	Retry  bool   // a failure that will be retried
}

// Stats are the dispatcher's counters since start.
type Stats struct {
	Delivered int64 // requests answered with 2xx
	Failed    int64 // attempts that failed (non-2xx or no response)
	Abandoned int64 // requests given up: too old, bad URL, or app deleted
	Dropped   int64 // events lost because the buffer was full
}

// withDefaults fills in the zero fields.
func (o Options) withDefaults() Options {
	o.Hold = cmp.Or(o.Hold, 3*time.Second)
	o.Flush = cmp.Or(o.Flush, 100*time.Millisecond)
	o.MaxAge = cmp.Or(o.MaxAge, 5*time.Minute)
	o.BaseBackoff = cmp.Or(o.BaseBackoff, time.Second)
	o.MaxBackoff = cmp.Or(o.MaxBackoff, time.Minute)
	o.Buffer = cmp.Or(o.Buffer, 65536)
	o.Senders = cmp.Or(o.Senders, 8)
	o.Client = cmp.Or(o.Client, &http.Client{Timeout: 10 * time.Second})
	// A claim shorter than two client timeouts would leave room for less
	// than one attempt.
	o.Lease = max(cmp.Or(o.Lease, 6*o.Client.Timeout, time.Minute), time.Minute, 2*o.Client.Timeout)
	return o
}

// AppLookup finds an app, with its webhooks, by id.
type AppLookup interface {
	ByID(id string) *storage.App
}

// Dispatcher turns hub events into delivered webhooks.
type Dispatcher struct {
	db   *storage.DB
	apps AppLookup
	log  *zap.Logger
	opts Options

	in      chan hub.Event
	wake    chan struct{} // the outbox got new requests
	dropped atomic.Int64  // events lost because the buffer was full

	delivered, failed, abandoned atomic.Int64 // see Stats

	stopCollect context.CancelFunc
	collected   chan struct{}
	stopSend    context.CancelFunc
	wg          sync.WaitGroup
}

// New returns a dispatcher; call Start to run it and Close to stop it.
func New(db *storage.DB, apps AppLookup, log *zap.Logger, opts Options) *Dispatcher {
	opts = opts.withDefaults()
	return &Dispatcher{db: db, apps: apps, log: log, opts: opts, in: make(chan hub.Event, opts.Buffer), wake: make(chan struct{}, 1)}
}

// Observe takes an event from the hub without blocking; when the buffer is
// full the event is dropped and counted.
func (d *Dispatcher) Observe(ev hub.Event) {
	select {
	case d.in <- ev:
	default:
		if d.dropped.Add(1)&1023 == 1 {
			d.log.Warn("webhook buffer full; events dropped", zap.Int64("dropped", d.dropped.Load()))
		}
	}
}

// Dropped is how many events were lost to a full buffer.
func (d *Dispatcher) Dropped() int64 { return d.dropped.Load() }

// Stats returns the dispatcher's counters.
func (d *Dispatcher) Stats() Stats {
	return Stats{Delivered: d.delivered.Load(), Failed: d.failed.Load(), Abandoned: d.abandoned.Load(), Dropped: d.dropped.Load()}
}

func (d *Dispatcher) report(a Attempt) {
	if d.opts.OnAttempt != nil {
		d.opts.OnAttempt(a)
	}
}

// Start runs the collector and the sender. Requests left in the outbox by an
// earlier run are sent too, those it had claimed when it crashed included:
// the node is alone on its database, so no other sender holds them.
func (d *Dispatcher) Start() {
	if err := d.db.ReleaseAllWebhookClaims(context.Background()); err != nil {
		d.log.Error("taking back the webhook claims of the previous run", zap.Error(err))
	}
	cctx, ccancel := context.WithCancel(context.Background())
	sctx, scancel := context.WithCancel(context.Background())
	d.stopCollect, d.stopSend = ccancel, scancel
	d.collected = make(chan struct{})
	go func() { defer close(d.collected); d.collect(cctx) }()
	d.wg.Add(1)
	go func() { defer d.wg.Done(); d.send(sctx) }()
}

// Close writes every accepted event, held ones included, to the outbox and
// stops. Requests not yet delivered stay in the outbox for the next start.
func (d *Dispatcher) Close() {
	d.stopCollect()
	<-d.collected
	d.stopSend()
	d.wg.Wait()
}

// pending is a held channel_vacated or member_removed.
type pending struct {
	ev  hub.Event
	due time.Time
	seq int // arrival order, kept when held events are released together
}

// holdKey identifies what a held event is about: the channel, and for
// members the user.
func holdKey(ev hub.Event) string {
	return ev.AppID + "\x00" + ev.Channel + "\x00" + ev.UserID
}

// collect reads events, applies the hold, and writes outbox batches.
func (d *Dispatcher) collect(ctx context.Context) {
	held := map[string]pending{}
	seq := 0
	var ready []hub.Event
	tick := time.NewTicker(d.opts.Flush)
	defer tick.Stop()
	accept := func(ev hub.Event) {
		switch ev.Kind {
		case hub.ChannelVacated, hub.MemberRemoved:
			seq++
			held[holdKey(ev)] = pending{ev, time.Now().Add(d.opts.Hold), seq}
		case hub.ChannelOccupied, hub.MemberAdded:
			// Back within the hold: neither the leaving nor the coming back
			// is reported.
			if p, ok := held[holdKey(ev)]; ok && opposite(p.ev.Kind, ev.Kind) {
				delete(held, holdKey(ev))
				return
			}
			ready = append(ready, ev)
		default:
			ready = append(ready, ev)
		}
	}
	flush := func(all bool) {
		now := time.Now()
		var released []pending
		for k, p := range held {
			if all || !now.Before(p.due) {
				released = append(released, p)
				delete(held, k)
			}
		}
		sort.Slice(released, func(i, j int) bool { return released[i].seq < released[j].seq })
		for _, p := range released {
			ready = append(ready, p.ev)
		}
		if len(ready) == 0 {
			return
		}
		if err := d.enqueue(ready); err != nil {
			d.log.Error("writing webhooks to the outbox", zap.Int("events", len(ready)), zap.Error(err))
		}
		ready = ready[:0]
	}
	for {
		select {
		case ev := <-d.in:
			accept(ev)
		case <-tick.C:
			flush(false)
		case <-ctx.Done():
			for {
				select {
				case ev := <-d.in:
					accept(ev)
				default:
					flush(true)
					return
				}
			}
		}
	}
}

func opposite(held, arrived hub.EventKind) bool {
	return held == hub.ChannelVacated && arrived == hub.ChannelOccupied ||
		held == hub.MemberRemoved && arrived == hub.MemberAdded
}

// enqueue builds the requests for events, per app and matching endpoint, and
// stores them.
func (d *Dispatcher) enqueue(events []hub.Event) error {
	type endpoint struct {
		appID string
		hook  int // index in the app's webhooks
	}
	batches := map[endpoint][]channels.WebhookEvent{}
	var order []endpoint
	for _, ev := range events {
		app := d.apps.ByID(ev.AppID)
		if app == nil {
			continue
		}
		for i, w := range app.Webhooks {
			if !matches(w, ev) {
				continue
			}
			ep := endpoint{ev.AppID, i}
			if _, ok := batches[ep]; !ok {
				order = append(order, ep)
			}
			batches[ep] = append(batches[ep], payload(ev))
		}
	}
	now := time.Now().UnixMilli()
	var items []storage.OutboxWebhook
	for _, ep := range order {
		w := d.apps.ByID(ep.appID).Webhooks[ep.hook]
		evs := batches[ep]
		groups := [][]channels.WebhookEvent{evs}
		if !w.Batch {
			groups = groups[:0]
			for i := range evs {
				groups = append(groups, evs[i:i+1])
			}
		}
		for _, g := range groups {
			body, err := json.Marshal(channels.WebhookRequest{TimeMs: now, Events: g})
			if err != nil {
				return err
			}
			items = append(items, storage.OutboxWebhook{AppID: ep.appID, URL: w.URL, Body: body})
		}
	}
	if len(items) == 0 {
		return nil
	}
	if err := d.db.EnqueueWebhooks(context.Background(), items); err != nil {
		return err
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return nil
}

// matches reports whether endpoint w wants ev.
func matches(w storage.Webhook, ev hub.Event) bool {
	if w.ChannelPrefix != "" && !strings.HasPrefix(ev.Channel, w.ChannelPrefix) {
		return false
	}
	if len(w.EventTypes) == 0 {
		return true
	}
	for _, k := range w.EventTypes {
		if k == string(ev.Kind) {
			return true
		}
	}
	return false
}

// payload is the webhook form of an event, with the fields Pusher sends for
// its kind.
func payload(ev hub.Event) channels.WebhookEvent {
	p := channels.WebhookEvent{Name: channels.WebhookEventName(ev.Kind), Channel: ev.Channel}
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	switch ev.Kind {
	case hub.MemberAdded, hub.MemberRemoved:
		p.UserId = str(ev.UserID)
	case hub.ClientEvent:
		p.Event, p.Data, p.SocketId, p.UserId = str(ev.Name), &ev.Data, str(ev.SocketID), str(ev.UserID)
	case hub.SubscriptionCount:
		n := ev.Count
		p.SubscriptionCount = &n
	}
	return p
}

// send claims due requests and delivers them until ctx ends, waking when new
// ones arrive or the next retry is due. Each endpoint gets its requests one at
// a time, in the order they were written, so a receiver sees events in the
// order they happened: a claimed or failed request holds back the later ones
// of its endpoint in the outbox itself (see storage.ClaimWebhooks), so no
// bookkeeping here can disagree with it. Different endpoints are served in
// parallel.
func (d *Dispatcher) send(ctx context.Context) {
	sem := make(chan struct{}, d.opts.Senders)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for {
		claimed, err := d.db.ClaimWebhooks(ctx, time.Now(), d.opts.Lease, 256)
		if err != nil && ctx.Err() == nil {
			d.log.Error("reading the webhook outbox", zap.Error(err))
		}
		groups := map[string][]storage.OutboxWebhook{}
		var order []string
		for _, w := range claimed {
			if _, ok := groups[w.URL]; !ok {
				order = append(order, w.URL)
			}
			groups[w.URL] = append(groups[w.URL], w)
		}
		for i, url := range order {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				for _, url := range order[i:] {
					d.release(groups[url])
				}
				return
			}
			inflight.Add(1)
			go func(items []storage.OutboxWebhook) {
				defer inflight.Done()
				d.serve(ctx, items)
				<-sem
				select {
				case d.wake <- struct{}{}: // look again: more may be due
				default:
				}
			}(groups[url])
		}
		wait := time.Second
		if next, ok, err := d.db.NextWebhookDue(ctx); err == nil && ok {
			wait = min(max(time.Until(next), 10*time.Millisecond), time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-time.After(wait):
		}
	}
}

// serve delivers one endpoint's claimed requests in order. It stops at the
// first that fails (the rest wait behind its retry), at shutdown, and when the
// claim has less than a client timeout left, since after it runs out another
// sender may take the same requests; what it does not attempt it gives back.
func (d *Dispatcher) serve(ctx context.Context, items []storage.OutboxWebhook) {
	for i, w := range items {
		if ctx.Err() != nil || time.Until(w.ClaimedUntil) < d.opts.Client.Timeout {
			d.release(items[i:])
			return
		}
		switch d.deliver(ctx, w) {
		case retrying:
			d.release(items[i+1:])
			return
		case interrupted:
			d.release(items[i:])
			return
		}
	}
}

// release gives claimed requests back to the outbox.
func (d *Dispatcher) release(items []storage.OutboxWebhook) {
	if len(items) == 0 {
		return
	}
	ids := make([]int64, len(items))
	for i, w := range items {
		ids[i] = w.ID
	}
	if err := d.db.ReleaseWebhooks(context.Background(), ids); err != nil {
		d.log.Error("giving back claimed webhooks", zap.Int("requests", len(ids)), zap.Error(err))
	}
}

// outcome is what became of one attempt at a request.
type outcome int

const (
	done        outcome = iota // delivered, or dropped for good
	retrying                   // failed; rescheduled for a later attempt
	interrupted                // shutting down: not delivered, to be released
)

// deliver makes one attempt at a request and records the outcome.
func (d *Dispatcher) deliver(ctx context.Context, w storage.OutboxWebhook) outcome {
	app := d.apps.ByID(w.AppID)
	if app == nil {
		d.log.Warn("dropping a webhook of a deleted app", zap.String("app_id", w.AppID), zap.String("url", w.URL))
		d.abandoned.Add(1)
		d.remove(w)
		return done
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(w.Body))
	if err != nil {
		d.log.Error("dropping a webhook with a bad URL", zap.String("url", w.URL), zap.Error(err))
		d.abandoned.Add(1)
		d.remove(w)
		return done
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Pusher-Key", app.Key)
	req.Header.Set("X-Pusher-Signature", signing.HMACHex(app.Secret, string(w.Body)))
	res, err := d.opts.Client.Do(req)
	if err == nil {
		res.Body.Close()
		if res.StatusCode >= 200 && res.StatusCode < 300 {
			d.delivered.Add(1)
			d.report(Attempt{AppID: w.AppID, URL: w.URL, Status: res.StatusCode})
			d.remove(w)
			return done
		}
	}
	if ctx.Err() != nil {
		return interrupted // the request stays in the outbox for the next start
	}
	reason := "status " + http.StatusText(statusOf(res))
	if err != nil {
		reason = err.Error()
	}
	d.failed.Add(1)
	giveUp := time.Since(w.CreatedAt) >= d.opts.MaxAge
	d.report(Attempt{AppID: w.AppID, URL: w.URL, Status: statusOf(res), Error: reason, Retry: !giveUp})
	if giveUp {
		d.abandoned.Add(1)
		d.log.Error("giving up on a webhook", zap.String("url", w.URL), zap.Int("attempts", w.Attempts+1), zap.String("last_error", reason))
		d.remove(w)
		return done
	}
	backoff := min(d.opts.BaseBackoff<<min(w.Attempts, 20), d.opts.MaxBackoff)
	next := time.Now().Add(backoff)
	d.log.Info("webhook attempt failed; retrying", zap.String("url", w.URL), zap.Int("attempt", w.Attempts+1), zap.Duration("in", backoff), zap.String("error", reason))
	if err := d.db.RetryWebhookAt(context.Background(), w.ID, next); err != nil {
		d.log.Error("rescheduling a webhook", zap.Error(err))
	}
	return retrying
}

// remove deletes a request that is done with from the outbox.
func (d *Dispatcher) remove(w storage.OutboxWebhook) {
	// Not the sender's context: a request delivered just before shutdown
	// must still leave the outbox.
	if err := d.db.DeleteWebhook(context.Background(), w.ID); err != nil {
		d.log.Error("removing a webhook from the outbox", zap.Error(err))
	}
}

func statusOf(res *http.Response) int {
	if res == nil {
		return 0
	}
	return res.StatusCode
}
