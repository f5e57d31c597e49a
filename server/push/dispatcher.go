package push

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/gen/publish"
	"github.com/heraldrt/herald/storage"
)

// Options tune the dispatcher. Zero values take the defaults.
type Options struct {
	Workers       int           // concurrent sends per platform; default 128
	ClaimBatch    int           // deliveries claimed per query; default 1000
	MaxInFlight   int           // claimed but not yet recorded; default 8192
	PageSize      int           // devices resolved per transaction; default 2000
	MaxAttempts   int           // attempts before a transient failure counts as failed; default 8
	BaseBackoff   time.Duration // first retry delay, doubled per attempt; default 1 s
	MaxBackoff    time.Duration // retry delay cap; default 5 min
	WebhookMaxAge time.Duration // how long a publish webhook is retried; default 5 min
	SendTimeout   time.Duration // per attempt; default 30 s
	// Senders, when set, replaces the gateway senders built from an
	// instance's configuration (tests count sends with it).
	Senders func(in *storage.Instance) (map[storage.Platform]Sender, error)
	// WebhookClient sends publish webhooks; default a 10 s timeout client.
	WebhookClient *http.Client
}

func (o Options) withDefaults() Options {
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setD := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&o.Workers, 128)
	set(&o.ClaimBatch, 1000)
	set(&o.MaxInFlight, 8192)
	set(&o.PageSize, 2000)
	set(&o.MaxAttempts, 8)
	setD(&o.BaseBackoff, time.Second)
	setD(&o.MaxBackoff, 5*time.Minute)
	setD(&o.WebhookMaxAge, 5*time.Minute)
	setD(&o.SendTimeout, 30*time.Second)
	if o.WebhookClient == nil {
		o.WebhookClient = &http.Client{Timeout: 10 * time.Second}
	}
	return o
}

// InstanceLookup finds Push instances by id.
type InstanceLookup interface {
	ByID(id string) *storage.Instance
}

// Dispatcher resolves stored publishes into deliveries and sends them. Every
// step is recorded in SQLite first, so a dispatcher started on the database
// of a crashed one carries on where it stopped.
//
// Goroutines: one resolver (publish targets -> deliveries rows), one claimer
// (rows -> per-platform queues), Workers senders per platform, one recorder
// (results -> rows and counters, in batches) and one webhook sender. Close
// stops them all.
type Dispatcher struct {
	db        *storage.DB
	instances InstanceLookup
	log       *zap.Logger
	opts      Options

	queues   map[storage.Platform]chan storage.Delivery
	results  chan outcome
	inFlight atomic.Int64
	// platformInFlight counts claimed, unrecorded deliveries per platform.
	platformInFlight map[storage.Platform]*atomic.Int64
	counters         counters // metrics (counters.go)

	wakeResolver chan struct{}
	wakeClaimer  chan struct{}
	wakeHooks    chan struct{}

	mu       sync.Mutex
	prepared map[string]*Prepared         // publishes to interests, by publish id
	users    map[string]*usersPrepared    // publishes to users, by publish id
	nUsers   int                          // Prepared entries held in users
	gateways map[string]*instanceGateways // by instance id

	stop    context.CancelFunc
	loops   sync.WaitGroup // resolver, claimer, webhooks
	workers sync.WaitGroup
	records chan struct{} // closed when the recorder is done
}

// usersPrepared is a publish to users: its parsed payload and its payloads
// encoded per target user (each carries data.pusher.userId).
type usersPrepared struct {
	payload *Payload
	byUser  map[string]*Prepared
}

// maxPrepared bounds the publishes to interests, and separately the
// (publish, user) encodings of publishes to users, the dispatcher keeps
// encoded; past it the cache starts over.
const maxPrepared = 4096

type outcome struct {
	d   storage.Delivery
	res Result
}

type instanceGateways struct {
	updated time.Time
	senders map[storage.Platform]Sender
	errs    map[storage.Platform]error
}

// New returns a dispatcher; Start runs it.
func New(db *storage.DB, instances InstanceLookup, log *zap.Logger, opts Options) *Dispatcher {
	opts = opts.withDefaults()
	d := &Dispatcher{
		db: db, instances: instances, log: log, opts: opts,
		queues:           map[storage.Platform]chan storage.Delivery{},
		platformInFlight: map[storage.Platform]*atomic.Int64{},
		results:          make(chan outcome, opts.MaxInFlight),
		wakeResolver:     make(chan struct{}, 1),
		wakeClaimer:      make(chan struct{}, 1),
		wakeHooks:        make(chan struct{}, 1),
		prepared:         map[string]*Prepared{},
		users:            map[string]*usersPrepared{},
		gateways:         map[string]*instanceGateways{},
	}
	for _, p := range []storage.Platform{storage.PlatformAPNs, storage.PlatformFCM, storage.PlatformWeb} {
		d.queues[p] = make(chan storage.Delivery, opts.MaxInFlight)
		d.platformInFlight[p] = new(atomic.Int64)
	}
	return d
}

// Start releases the claims a previous process left behind and starts the
// loops.
func (d *Dispatcher) Start(ctx context.Context) error {
	if n, err := d.db.ReleaseDeliveryClaims(ctx); err != nil {
		return err
	} else if n > 0 {
		d.log.Info("resuming deliveries claimed by an earlier run", zap.Int("deliveries", n))
	}
	bg, stop := context.WithCancel(context.Background())
	d.stop = stop
	d.records = make(chan struct{})
	go func() { defer close(d.records); d.record() }()
	for p, q := range d.queues {
		for range d.opts.Workers {
			d.workers.Add(1)
			go func() { defer d.workers.Done(); d.work(bg, p, q) }()
		}
	}
	d.loops.Add(3)
	go func() { defer d.loops.Done(); d.resolve(bg) }()
	go func() { defer d.loops.Done(); d.claim(bg) }()
	go func() { defer d.loops.Done(); d.sendWebhooks(bg) }()
	return nil
}

// Close stops the dispatcher. Sends in flight are abandoned and their
// deliveries left for the next start (they may be sent twice: at least once).
func (d *Dispatcher) Close() {
	if d.stop == nil {
		return
	}
	d.stop()
	d.loops.Wait()
	d.workers.Wait()
	close(d.results)
	<-d.records
}

// InFlight is how many deliveries are claimed and not yet recorded.
func (d *Dispatcher) InFlight() int { return int(d.inFlight.Load()) }

// Notify tells the dispatcher that a publish was stored.
func (d *Dispatcher) Notify() { d.counters.published(); wake(d.wakeResolver) }

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// sleep waits for a wake-up, the timer or the end of ctx; it reports false
// when ctx ended.
func sleep(ctx context.Context, c chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-c:
	case <-t.C:
	}
	return true
}

// encodeWebhook builds a publish webhook body.
func encodeWebhook(p storage.Publish, ev storage.PublishEvent, at time.Time) []byte {
	b, _ := json.Marshal(publish.PublishWebhook{
		Event: publish.PublishWebhookEvent(ev), InstanceId: p.InstanceID, PublishId: p.ID,
		State: publish.PublishState(p.State), Targeted: p.Targeted, Sent: p.Sent, Failed: p.Failed, TimeMs: at.UnixMilli(),
	})
	return b
}

// resolve turns unresolved publishes into deliveries, page by page.
func (d *Dispatcher) resolve(ctx context.Context) {
	for {
		pubs, err := d.db.UnresolvedPublishes(ctx, 16)
		if err != nil && ctx.Err() == nil {
			d.log.Error("listing publishes to resolve", zap.Error(err))
		}
		for _, p := range pubs {
			d.resolveOne(ctx, p)
		}
		if len(pubs) > 0 {
			continue
		}
		if !sleep(ctx, d.wakeResolver, 5*time.Second) {
			return
		}
	}
}

func (d *Dispatcher) resolveOne(ctx context.Context, p storage.Publish) {
	payload, err := ParseStoredPayload(p.Payload)
	if err != nil {
		// Checked when accepted; a stored payload that no longer parses
		// resolves to no device rather than blocking the queue.
		d.log.Error("stored publish payload is invalid", zap.String("publish", p.ID), zap.Error(err))
		payload = &Payload{}
	}
	platforms := payload.Platforms()
	for !p.Resolved && ctx.Err() == nil {
		wasAccepted := p.State == storage.PublishAccepted
		next, n, err := d.db.ResolvePublishPage(ctx, p, platforms, d.opts.PageSize, encodeWebhook)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Error("resolving publish targets", zap.String("publish", p.ID), zap.Error(err))
				sleep(ctx, nil, time.Second)
			}
			return
		}
		p = next
		if n > 0 {
			wake(d.wakeClaimer)
		}
		if p.WebhookURL != "" && (wasAccepted || p.State == storage.PublishDone) {
			wake(d.wakeHooks)
		}
	}
}

// claim moves due deliveries from the table to the platform queues, keeping
// at most MaxInFlight/3 claimed per platform, so every gateway is kept busy
// at once and a slow one does not hold up the others.
func (d *Dispatcher) claim(ctx context.Context) {
	limit := max(d.opts.MaxInFlight/len(d.queues), 1)
	batch := min(d.opts.ClaimBatch, limit)
	platforms := []storage.Platform{storage.PlatformAPNs, storage.PlatformFCM, storage.PlatformWeb}
	for ctx.Err() == nil {
		claimed, full := 0, 0
		for _, p := range platforms {
			room := limit - int(d.platformInFlight[p].Load())
			if room < batch/4 {
				full++
				continue
			}
			got, err := d.db.ClaimDeliveries(ctx, p, time.Now(), min(room, batch))
			if err != nil {
				if ctx.Err() == nil {
					d.log.Error("claiming deliveries", zap.Error(err))
					sleep(ctx, nil, time.Second)
				}
				break
			}
			claimed += len(got)
			d.inFlight.Add(int64(len(got)))
			d.platformInFlight[p].Add(int64(len(got)))
			for _, del := range got {
				d.queues[p] <- del // sized MaxInFlight: never blocks
			}
		}
		if claimed > 0 {
			continue
		}
		wait := 5 * time.Second
		if full == 0 {
			if next, ok, err := d.db.NextDeliveryDue(ctx); err == nil && ok {
				wait = max(min(time.Until(next), wait), 10*time.Millisecond)
			}
		} else {
			wait = time.Second // the recorder wakes us when room frees up
		}
		sleep(ctx, d.wakeClaimer, wait)
	}
}

// work sends the deliveries of one platform's queue.
func (d *Dispatcher) work(ctx context.Context, p storage.Platform, q chan storage.Delivery) {
	for {
		select {
		case <-ctx.Done():
			return
		case del := <-q:
			res := d.send(ctx, del)
			d.results <- outcome{d: del, res: res}
		}
	}
}

func (d *Dispatcher) send(ctx context.Context, del storage.Delivery) Result {
	prep, err := d.preparedFor(ctx, del)
	if err != nil {
		if ctx.Err() != nil {
			return retry("stopping", 0)
		}
		return failed(err.Error())
	}
	sender, err := d.senderFor(del.InstanceID, del.Platform)
	if err != nil {
		return failed(err.Error())
	}
	sctx, cancel := context.WithTimeout(ctx, d.opts.SendTimeout)
	defer cancel()
	return sender.Send(sctx, del, prep)
}

// preparedFor returns the encoded payloads of the delivery's publish,
// loading them once per publish. A delivery of a publish to users (it names
// its user) gets payloads encoded for its user, once per (publish, user);
// a publish to interests shares one encoding among all its deliveries.
func (d *Dispatcher) preparedFor(ctx context.Context, del storage.Delivery) (*Prepared, error) {
	if del.UserID != "" {
		return d.preparedForUser(ctx, del)
	}
	d.mu.Lock()
	p := d.prepared[del.PublishID]
	d.mu.Unlock()
	if p != nil {
		return p, nil
	}
	payload, err := d.loadPayload(ctx, del)
	if err != nil {
		return nil, err
	}
	if p, err = Prepare(del.InstanceID, del.PublishID, "", payload); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if len(d.prepared) > maxPrepared {
		clear(d.prepared)
	}
	d.prepared[del.PublishID] = p
	d.mu.Unlock()
	return p, nil
}

// preparedForUser is preparedFor for a delivery of a publish to users.
func (d *Dispatcher) preparedForUser(ctx context.Context, del storage.Delivery) (*Prepared, error) {
	d.mu.Lock()
	var payload *Payload
	if u := d.users[del.PublishID]; u != nil {
		if p := u.byUser[del.UserID]; p != nil {
			d.mu.Unlock()
			return p, nil
		}
		payload = u.payload
	}
	d.mu.Unlock()
	if payload == nil {
		var err error
		if payload, err = d.loadPayload(ctx, del); err != nil {
			return nil, err
		}
	}
	p, err := Prepare(del.InstanceID, del.PublishID, del.UserID, payload)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.nUsers >= maxPrepared || len(d.users) >= maxPrepared {
		clear(d.users)
		d.nUsers = 0
	}
	u := d.users[del.PublishID]
	if u == nil {
		u = &usersPrepared{payload: payload, byUser: map[string]*Prepared{}}
		d.users[del.PublishID] = u
	}
	if _, ok := u.byUser[del.UserID]; !ok {
		d.nUsers++
	}
	u.byUser[del.UserID] = p
	d.mu.Unlock()
	return p, nil
}

// loadPayload reads and parses the stored payload of the delivery's publish.
func (d *Dispatcher) loadPayload(ctx context.Context, del storage.Delivery) (*Payload, error) {
	pub, err := d.db.GetPublish(ctx, del.InstanceID, del.PublishID)
	if err != nil {
		return nil, err
	}
	return ParseStoredPayload(pub.Payload)
}

// senderFor returns the instance's sender for the platform, built from its
// current configuration and rebuilt when the instance changes.
func (d *Dispatcher) senderFor(instanceID string, p storage.Platform) (Sender, error) {
	in := d.instances.ByID(instanceID)
	if in == nil {
		return nil, errors.New("the instance no longer exists")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gateways[instanceID]
	if g == nil || !g.updated.Equal(in.UpdatedAt) {
		g = &instanceGateways{updated: in.UpdatedAt, senders: map[storage.Platform]Sender{}, errs: map[storage.Platform]error{}}
		if d.opts.Senders != nil {
			s, err := d.opts.Senders(in)
			g.senders = s
			for _, pl := range []storage.Platform{storage.PlatformAPNs, storage.PlatformFCM, storage.PlatformWeb} {
				g.errs[pl] = err
			}
		} else {
			if s, err := NewAPNs(in.APNs); err == nil {
				g.senders[storage.PlatformAPNs] = s
			} else {
				g.errs[storage.PlatformAPNs] = err
			}
			if s, err := NewFCM(in.FCM); err == nil {
				g.senders[storage.PlatformFCM] = s
			} else {
				g.errs[storage.PlatformFCM] = err
			}
			if s, err := NewWebPush(in.VAPID); err == nil {
				g.senders[storage.PlatformWeb] = s
			} else {
				g.errs[storage.PlatformWeb] = err
			}
		}
		d.gateways[instanceID] = g
	}
	if s := g.senders[p]; s != nil {
		return s, nil
	}
	if err := g.errs[p]; err != nil {
		return nil, errors.New(string(p) + ": " + err.Error())
	}
	return nil, errors.New(string(p) + ": " + errNotConfigured.Error())
}

// backoff is the delay before attempt n+1 (n failed attempts so far).
func (d *Dispatcher) backoff(attempts int, after time.Duration) time.Duration {
	b := d.opts.BaseBackoff << min(attempts, 20)
	b = min(b, d.opts.MaxBackoff)
	return max(b, after)
}

// record writes results to the database in batches: whatever arrived while
// the previous batch was written goes in the next transaction.
func (d *Dispatcher) record() {
	ctx := context.Background()
	batch := make([]storage.DeliveryResult, 0, 1024)
	for first := range d.results {
		batch = batch[:0]
		add := func(o outcome) {
			r := storage.DeliveryResult{Delivery: o.d, Outcome: o.res.Outcome}
			if r.Outcome == storage.DeliveryRetry {
				if o.d.Attempts+1 >= d.opts.MaxAttempts {
					r.Outcome = storage.DeliveryFailed
				} else {
					r.RetryAt = time.Now().Add(d.backoff(o.d.Attempts, o.res.RetryAfter))
				}
			}
			d.counters.delivery(o.d.Platform, r.Outcome)
			if r.Outcome != storage.DeliverySent {
				d.log.Debug("delivery not sent", zap.String("publish", o.d.PublishID), zap.String("device", o.d.DeviceID),
					zap.Int("outcome", int(r.Outcome)), zap.String("reason", o.res.Reason))
			}
			batch = append(batch, r)
		}
		add(first)
	drain:
		for len(batch) < cap(batch) {
			select {
			case o, ok := <-d.results:
				if !ok {
					break drain
				}
				add(o)
			default:
				break drain
			}
		}
		finished, err := d.db.CompleteDeliveries(ctx, batch, encodeWebhook)
		for try := 1; err != nil && try <= 10; try++ {
			// Retrying the write keeps the counts right; after that the rows
			// stay claimed and the next start sends them again.
			d.log.Error("recording delivery results", zap.Int("results", len(batch)), zap.Error(err))
			time.Sleep(time.Second)
			finished, err = d.db.CompleteDeliveries(ctx, batch, encodeWebhook)
		}
		d.inFlight.Add(-int64(len(batch)))
		for _, r := range batch {
			d.platformInFlight[r.Delivery.Platform].Add(-1)
		}
		wake(d.wakeClaimer)
		for _, p := range finished {
			d.mu.Lock()
			delete(d.prepared, p.ID)
			if u := d.users[p.ID]; u != nil {
				d.nUsers -= len(u.byUser)
				delete(d.users, p.ID)
			}
			d.mu.Unlock()
			if p.WebhookURL != "" {
				wake(d.wakeHooks)
			}
		}
		for _, r := range batch {
			if r.Outcome == storage.DeliveryRetry {
				wake(d.wakeClaimer)
				break
			}
		}
	}
}
