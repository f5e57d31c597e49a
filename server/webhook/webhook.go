// Package webhook delivers Channels webhooks: it receives the hub's channel
// events, holds back channel_vacated and member_removed for a few seconds
// (dropped if the state flips back; Hold, kept in memory on one node and in
// Redis in a cluster), writes one request per matching endpoint
// (or one batch) to a durable outbox in SQLite, and sends the outbox with
// retries and exponential backoff. The hub is never blocked: events arrive
// through a bounded buffer.
package webhook

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/gen/channels"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/recovery"
	"github.com/heraldrt/herald/server/internal/text"
	"github.com/heraldrt/herald/server/netguard"
	"github.com/heraldrt/herald/server/signing"
	"github.com/heraldrt/herald/storage"
)

// DefaultMaxQueued is Options.MaxQueued's default, and HERALD_WEBHOOK_MAX_QUEUED's
// (a node test checks that they agree).
const DefaultMaxQueued = 10000

// Options tune the dispatcher. Zero values take the defaults.
type Options struct {
	Hold        time.Duration // how long channel_vacated and member_removed wait in the MemoryHold that Holder defaults to; default 3 s
	Flush       time.Duration // how often accepted events are written to the outbox; default 100 ms
	MaxAge      time.Duration // how long a request is retried; older ones are dropped unsent; default 5 min
	BaseBackoff time.Duration // first retry delay, doubled per attempt; default 1 s
	MaxBackoff  time.Duration // retry delay cap; default 1 min
	Buffer      int           // events buffered between the hub and the dispatcher; default 65536
	Senders     int           // requests in flight in all; default 64
	// PerEndpoint is how many requests to one URL are in flight at once;
	// default 8. The requests about one channel go one at a time, in the
	// order they were written (a batching endpoint's, which mix channels, go
	// one at a time); 1 sends all of an endpoint's requests one at a time,
	// in order.
	PerEndpoint int
	// MaxQueued is how many requests of one app the outbox keeps; writing
	// more drops that app's oldest requests not being sent. Default 10,000.
	MaxQueued int
	// Timeout bounds one request, from dialing to the answer; default 5 s
	// (Pusher asks endpoints to answer within 4 s).
	Timeout time.Duration
	// DialContext, when set, makes every connection of the webhook client
	// (a guard that refuses private addresses, say). Proxies named in the
	// environment are then not used, so that it sees the endpoint's own
	// address. Default: a net.Dialer.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)
	// Lease is how long a sender holds the requests it claimed from the
	// outbox; a request is attempted only while its claim has at least
	// Timeout left. Default: six timeouts; at least 1 min and two timeouts.
	Lease time.Duration
	// Holder is where channel_vacated and member_removed wait (see Hold):
	// a cluster node's are held in Redis, over every node, so it gives the
	// cluster's hold. Default: a MemoryHold of Hold, this dispatcher's own
	// (filled by New, not WithDefaults, so that no two dispatchers share
	// one).
	Holder Hold
	// OnAttempt, when set, is told the outcome of every delivery attempt
	// (the debug console shows them). It must return at once.
	OnAttempt func(Attempt)
}

// Attempt is the outcome of one webhook request.
type Attempt struct {
	AppID  string
	URL    string // without user info, query string or fragment (see text.RedactURL)
	Status int    // HTTP status; 0 when no response came
	Error  string // why it failed; "" when delivered
	Retry  bool   // a failure that will be retried
}

// Stats are the dispatcher's counters since start. Every request or event
// that is not delivered is counted in one of Abandoned, Dropped, OverCap,
// Expired and Unwritten.
type Stats struct {
	Delivered int64 // requests answered with 2xx
	Failed    int64 // attempts that failed (non-2xx or no response)
	Abandoned int64 // requests given up after an attempt: out of retry time, bad URL, app deleted, or a panic while sending
	Dropped   int64 // events lost because the buffer was full
	OverCap   int64 // queued requests dropped, oldest first, because their app had MaxQueued
	Expired   int64 // requests dropped without another attempt because they were older than MaxAge
	Unwritten int64 // requests lost because the outbox could not be written (a database error), or events after a panic while building them
	Panics    int64 // panics recovered while sending a request, in the sender's loop and while writing the outbox
}

// WithDefaults returns o with the defaults in place of its zero fields.
func (o Options) WithDefaults() Options {
	o.Hold = cmp.Or(o.Hold, hub.WebhookHold)
	o.Flush = cmp.Or(o.Flush, 100*time.Millisecond)
	o.MaxAge = cmp.Or(o.MaxAge, 5*time.Minute)
	o.BaseBackoff = cmp.Or(o.BaseBackoff, time.Second)
	o.MaxBackoff = cmp.Or(o.MaxBackoff, time.Minute)
	o.Buffer = cmp.Or(o.Buffer, 65536)
	o.Senders = cmp.Or(o.Senders, 64)
	o.PerEndpoint = cmp.Or(o.PerEndpoint, 8)
	o.MaxQueued = cmp.Or(o.MaxQueued, DefaultMaxQueued)
	o.Timeout = cmp.Or(o.Timeout, 5*time.Second)
	// A claim shorter than two timeouts would leave room for less than one
	// attempt.
	o.Lease = max(cmp.Or(o.Lease, 6*o.Timeout, time.Minute), time.Minute, 2*o.Timeout)
	return o
}

// client is the HTTP client of the webhook requests. It keeps a connection
// for each request an endpoint may have in flight, instead of the default
// two, so that busy endpoints reuse them.
func (o Options) client() *http.Client {
	return netguard.WebhookClient(o.Timeout, o.DialContext, o.PerEndpoint)
}

// AppLookup finds an app, with its webhooks, by id.
type AppLookup interface {
	ByID(id string) *storage.App
}

// Dispatcher turns hub events into delivered webhooks.
type Dispatcher struct {
	db     *storage.DB
	apps   AppLookup
	log    *zap.Logger
	opts   Options
	client *http.Client
	hold   Hold // the collector's own

	in      chan hub.Event
	wake    chan struct{} // the outbox got new requests, or a sender is free
	dropped atomic.Int64  // events lost because the buffer was full

	delivered, failed, abandoned atomic.Int64 // see Stats
	overCap, expired, unwritten  atomic.Int64 // see Stats
	panics                       recovery.Counter
	drops                        *dropLog
	purgeEvery                   time.Duration               // how often requests older than MaxAge are looked for
	idlePoll                     time.Duration               // the longest a sender waits unwoken: requests other nodes wrote to a shared outbox are found this way
	beforeAttempt                func(storage.OutboxWebhook) // tests: runs before each request is sent
	beforeRound                  func()                      // tests: runs at the start of each sender round

	stopCollect context.CancelFunc
	collected   chan struct{}
	stopSend    context.CancelFunc
	wg          sync.WaitGroup
}

// New returns a dispatcher; call Start to run it and Close to stop it.
func New(db *storage.DB, apps AppLookup, log *zap.Logger, opts Options) *Dispatcher {
	opts = opts.WithDefaults()
	hold := opts.Holder
	if hold == nil {
		hold = NewMemoryHold(opts.Hold)
	}
	return &Dispatcher{
		db: db, apps: apps, log: log, opts: opts, client: opts.client(), hold: hold,
		in: make(chan hub.Event, opts.Buffer), wake: make(chan struct{}, 1),
		drops: &dropLog{log: log, every: time.Minute, apps: map[string]*dropCount{}},
		// Expired requests are never sent (each is checked before its
		// attempt); the sweep only frees their room, so a thirtieth of
		// MaxAge (10 s by default) is often enough.
		purgeEvery: min(max(opts.MaxAge/30, 10*time.Millisecond), 10*time.Second),
		idlePoll:   time.Second,
	}
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
	return Stats{
		Delivered: d.delivered.Load(), Failed: d.failed.Load(), Abandoned: d.abandoned.Load(), Dropped: d.dropped.Load(),
		OverCap: d.overCap.Load(), Expired: d.expired.Load(), Unwritten: d.unwritten.Load(), Panics: d.panics.Count(),
	}
}

// report tells OnAttempt about an attempt. A panic of OnAttempt is its own:
// it does not change what becomes of the request.
func (d *Dispatcher) report(a Attempt) {
	if d.opts.OnAttempt != nil {
		d.panics.Do(d.log, "webhook attempt report", func() { d.opts.OnAttempt(a) }, zap.String("url", a.URL))
	}
}

// Start runs the collector and the sender. Requests left in the outbox by an
// earlier run are sent too, those it had claimed when it crashed included:
// at once when the node is alone on its database (SQLite), so that no other
// sender can hold them; once their claim runs out on a database other nodes
// share, where a claim may be another node's, in flight.
func (d *Dispatcher) Start() {
	if !d.db.Shared() {
		if err := d.db.ReleaseAllWebhookClaims(context.Background()); err != nil {
			d.log.Error("taking back the webhook claims of the previous run", zap.Error(err))
		}
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
	d.drops.flush(time.Time{}, true) // what was dropped since the last line
}

// collect reads events, applies the hold, and writes outbox batches.
func (d *Dispatcher) collect(ctx context.Context) {
	var ready []hub.Event
	tick := time.NewTicker(d.opts.Flush)
	defer tick.Stop()
	accept := func(ev hub.Event) {
		if d.hold.Take(ev, time.Now()) {
			ready = append(ready, ev)
		}
	}
	flush := func(all bool) {
		ready = append(ready, d.hold.Due(time.Now(), all)...)
		if len(ready) == 0 {
			return
		}
		var requests int
		var err error
		if d.panics.Do(d.log, "webhook batch", func() { requests, err = d.enqueue(ready) }, zap.Int("events", len(ready))) {
			d.unwritten.Add(int64(len(ready)))
		} else if err != nil {
			d.unwritten.Add(int64(requests))
			d.log.Error("writing webhooks to the outbox; they are lost", zap.Int("events", len(ready)), zap.Int("requests", requests), zap.Error(err))
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

// enqueue builds the requests for events, per app and matching endpoint, and
// stores them, keeping each app within MaxQueued. It returns how many
// requests it built.
func (d *Dispatcher) enqueue(events []hub.Event) (int, error) {
	type endpoint struct {
		appID string
		hook  int // index in the app's webhooks
	}
	type batch struct {
		hook   storage.Webhook // kept: the app may change or go before the loop below
		events []channels.WebhookEvent
	}
	batches := map[endpoint]*batch{}
	var order []endpoint
	for _, ev := range events {
		app := d.apps.ByID(ev.AppID)
		if app == nil {
			continue
		}
		for i, w := range app.Webhooks {
			if !w.Takes(string(ev.Kind), ev.Channel) {
				continue
			}
			ep := endpoint{ev.AppID, i}
			b, ok := batches[ep]
			if !ok {
				b = &batch{hook: w}
				batches[ep] = b
				order = append(order, ep)
			}
			b.events = append(b.events, payload(ev))
		}
	}
	now := time.Now().UnixMilli()
	var items []storage.OutboxWebhook
	for _, ep := range order {
		b := batches[ep]
		groups := [][]channels.WebhookEvent{b.events}
		if !b.hook.Batch {
			groups = groups[:0]
			for i := range b.events {
				groups = append(groups, b.events[i:i+1])
			}
		}
		for _, g := range groups {
			body, err := json.Marshal(channels.WebhookRequest{TimeMs: now, Events: g})
			if err != nil {
				return len(items), err
			}
			// A channel's requests go one at a time, in order; a batch
			// holds several channels, so batches go one at a time.
			key := ""
			if !b.hook.Batch {
				key = g[0].Channel
			}
			items = append(items, storage.OutboxWebhook{AppID: ep.appID, URL: b.hook.URL, Key: key, Body: body})
		}
	}
	if len(items) == 0 {
		return 0, nil
	}
	dropped, err := d.db.EnqueueWebhooks(context.Background(), items, d.opts.MaxQueued)
	if err != nil {
		return len(items), err
	}
	for appID, n := range dropped {
		d.overCap.Add(int64(n))
		d.drops.add(appID, n, 0, time.Now())
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return len(items), nil
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
		p.UserID = str(ev.UserID)
	case hub.ClientEvent:
		p.Event, p.Data, p.SocketID, p.UserID = str(ev.Name), &ev.Data, str(ev.SocketID), str(ev.UserID)
	case hub.SubscriptionCount:
		n := ev.Count
		p.SubscriptionCount = &n
	}
	return p
}

// send claims due requests and delivers them until ctx ends, waking when new
// ones arrive, a sender is free, or the next retry is due. Each request is
// sent by a goroutine of its own, at most Senders in all and PerEndpoint per
// URL. What may go is the outbox's decision (see storage.ClaimWebhooks): the
// requests about one channel one at a time, in order, and none after one
// waiting for its retry, so a failing endpoint is not flooded. No
// bookkeeping here can disagree with it.
func (d *Dispatcher) send(ctx context.Context) {
	slots := make(chan struct{}, d.opts.Senders) // one per request in flight
	var inflight sync.WaitGroup
	defer inflight.Wait()
	var nextPurge time.Time
	for {
		// A round that panics waits a second before the next, rather than
		// repeat the panic at once; what it claimed is due again when the
		// claims run out.
		wait := time.Second
		began := time.Now()
		d.panics.Do(d.log, "webhook sender round", func() { wait = d.round(ctx, slots, &inflight, &nextPurge) })
		// A round takes the database's one writer for a millisecond or so
		// when many endpoints have a backlog; when requests finish faster
		// than that, rounds would follow each other without a pause. Resting
		// as long as the round took leaves the writer at least half the time
		// for everything else, and lets one round claim for all the requests
		// finished meanwhile.
		rest := time.NewTimer(time.Since(began))
		select {
		case <-ctx.Done():
			rest.Stop()
			return
		case <-rest.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-time.After(wait):
		}
	}
}

// round drops the expired requests when it is time, claims as many due
// requests as there are free slots, starts them, and returns how long to
// wait before the next round if nothing wakes the sender.
func (d *Dispatcher) round(ctx context.Context, slots chan struct{}, inflight *sync.WaitGroup, nextPurge *time.Time) time.Duration {
	if d.beforeRound != nil {
		d.beforeRound()
	}
	now := time.Now()
	if !now.Before(*nextPurge) {
		d.purge(ctx, now)
		*nextPurge = now.Add(d.purgeEvery)
	}
	// Only this loop fills slots, so they are at least this free.
	free := cap(slots) - len(slots)
	if free > 0 {
		claimed, err := d.db.ClaimWebhooks(ctx, now, d.opts.Lease, free, d.opts.PerEndpoint)
		if err != nil && ctx.Err() == nil {
			d.log.Error("reading the webhook outbox", zap.Error(err))
		}
		for _, w := range claimed {
			slots <- struct{}{}
			inflight.Add(1)
			go func() {
				defer func() {
					<-slots
					inflight.Done()
					select {
					case d.wake <- struct{}{}: // look again: its endpoint may have more
					default:
					}
				}()
				// A panic is a bug that the same request would likely hit
				// again at every retry: the request is dropped, and counted
				// as abandoned besides the panic.
				if d.panics.Do(d.log, "webhook request", func() { d.attempt(ctx, w) }, zap.String("app_id", w.AppID), zap.String("url", text.RedactURL(w.URL))) {
					d.abandoned.Add(1)
					d.remove(w)
				}
			}()
		}
	}
	wait := time.Until(*nextPurge)
	if len(slots) < cap(slots) { // else a finished request wakes the sender
		if next, ok, err := d.db.NextWebhookDue(ctx, time.Now(), d.opts.PerEndpoint); err == nil && ok {
			wait = min(wait, max(time.Until(next), 10*time.Millisecond))
		}
	}
	return min(wait, d.idlePoll)
}

// purge deletes the requests older than MaxAge that no sender holds, without
// another attempt, and counts them.
func (d *Dispatcher) purge(ctx context.Context, now time.Time) {
	dropped, err := d.db.DropExpiredWebhooks(ctx, now.Add(-d.opts.MaxAge), now)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Error("dropping expired webhooks", zap.Error(err))
		}
		return
	}
	for appID, n := range dropped {
		d.expired.Add(int64(n))
		d.drops.add(appID, 0, n, now)
	}
	d.drops.flush(now, false)
}

// attempt sends one claimed request, unless it is too late for it: at
// shutdown, or with less than a timeout left on its claim (after which
// another sender may take it), it is given back; older than MaxAge, it is
// dropped unsent.
func (d *Dispatcher) attempt(ctx context.Context, w storage.OutboxWebhook) {
	if ctx.Err() != nil || time.Until(w.ClaimedUntil) < d.opts.Timeout {
		d.release([]storage.OutboxWebhook{w})
		return
	}
	if time.Since(w.CreatedAt) >= d.opts.MaxAge {
		d.expired.Add(1)
		d.drops.add(w.AppID, 0, 1, time.Now())
		d.remove(w)
		return
	}
	if d.deliver(ctx, w) == interrupted {
		d.release([]storage.OutboxWebhook{w}) // stays in the outbox for the next start
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
	if d.beforeAttempt != nil {
		d.beforeAttempt(w)
	}
	shown := text.RedactURL(w.URL)
	app := d.apps.ByID(w.AppID)
	if app == nil {
		d.log.Warn("dropping a webhook of a deleted app", zap.String("app_id", w.AppID), zap.String("url", shown))
		d.abandoned.Add(1)
		d.remove(w)
		return done
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(w.Body))
	if err != nil {
		d.log.Error("dropping a webhook with a bad URL", zap.String("app_id", w.AppID), zap.String("url", shown), zap.String("error", errorText(err)))
		d.abandoned.Add(1)
		d.remove(w)
		return done
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Pusher-Key", app.Key)
	req.Header.Set("X-Pusher-Signature", signing.HMACHex(app.Secret, string(w.Body)))
	res, err := d.client.Do(req)
	if err == nil {
		res.Body.Close()
		if res.StatusCode >= 200 && res.StatusCode < 300 {
			d.delivered.Add(1)
			d.report(Attempt{AppID: w.AppID, URL: shown, Status: res.StatusCode})
			d.remove(w)
			return done
		}
	}
	if ctx.Err() != nil {
		return interrupted // the request stays in the outbox for the next start
	}
	reason := "status " + http.StatusText(statusOf(res))
	if err != nil {
		reason = errorText(err)
	}
	d.failed.Add(1)
	backoff := min(d.opts.BaseBackoff<<min(w.Attempts, 20), d.opts.MaxBackoff)
	next := time.Now().Add(backoff)
	// A retry at or past MaxAge would be dropped unsent: give up now.
	giveUp := !next.Before(w.CreatedAt.Add(d.opts.MaxAge))
	d.report(Attempt{AppID: w.AppID, URL: shown, Status: statusOf(res), Error: reason, Retry: !giveUp})
	if giveUp {
		d.abandoned.Add(1)
		d.log.Error("giving up on a webhook", zap.String("app_id", w.AppID), zap.String("url", shown), zap.Int("attempts", w.Attempts+1), zap.String("last_error", reason))
		d.remove(w)
		return done
	}
	d.log.Info("webhook attempt failed; retrying", zap.String("app_id", w.AppID), zap.String("url", shown), zap.Int("attempt", w.Attempts+1), zap.Duration("in", backoff), zap.String("error", reason))
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

// errorText is err for logs and attempts. The HTTP client's errors quote the
// whole URL (`Post "https://…?token=…": …`); they are shown without it.
func errorText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Sprintf("%s: %v", ue.Op, ue.Err)
	}
	return err.Error()
}

// dropLog logs the requests dropped unsent (over the cap, or expired) at most
// once per interval per app, with the numbers dropped since the app's
// previous line: a flood drops thousands a second.
type dropLog struct {
	log   *zap.Logger
	every time.Duration
	mu    sync.Mutex
	apps  map[string]*dropCount
}

// dropCount is what one app dropped since its last line.
type dropCount struct {
	overCap, expired int
	logged           time.Time // when its last line was written
}

// add counts drops of an app and logs them when the app's last line is at
// least an interval old.
func (l *dropLog) add(appID string, overCap, expired int, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.apps[appID]
	if c == nil {
		c = &dropCount{}
		l.apps[appID] = c
	}
	c.overCap += overCap
	c.expired += expired
	if now.Sub(c.logged) >= l.every {
		l.write(appID, c, now)
	}
}

// flush logs the apps whose drops are waiting and whose last line is at least
// an interval old, or all of them when all is set (at shutdown); it forgets
// the apps that have dropped nothing for an interval.
func (l *dropLog) flush(now time.Time, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for appID, c := range l.apps {
		switch {
		case c.overCap+c.expired > 0 && (all || now.Sub(c.logged) >= l.every):
			l.write(appID, c, now)
		case c.overCap+c.expired == 0 && now.Sub(c.logged) >= l.every:
			delete(l.apps, appID)
		}
	}
}

func (l *dropLog) write(appID string, c *dropCount, now time.Time) {
	// The numbers are those since the app's previous line.
	l.log.Warn("webhook requests dropped unsent", zap.String("app_id", appID),
		zap.Int("over_cap", c.overCap), zap.Int("expired", c.expired))
	c.overCap, c.expired, c.logged = 0, 0, now
}
