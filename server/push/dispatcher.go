package push

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/internal/recovery"
	"github.com/heraldrt/herald/server/netguard"
	"github.com/heraldrt/herald/storage"
)

// Options tune the dispatcher. Zero values take the defaults.
type Options struct {
	Workers     int // concurrent sends per platform; default 128
	ClaimBatch  int // stored deliveries claimed per query; default 1000
	MaxInFlight int // handed to senders and not yet recorded; default 3072
	// PageSize is how many targets are claimed, read and recorded at a
	// time: the unit of work nodes sharing the database split a publish
	// into. A crash sends the pages in flight again. Default 512.
	PageSize int
	// Owner names this dispatcher in the leases of the pages it claims
	// (see storage.ClaimPage), and in a publish's split between nodes: the
	// node's id where several nodes share the database. Default: "local"
	// alone on SQLite, a random id on a shared database.
	Owner string
	// Lease is how long a page stays this dispatcher's without being
	// renewed (it is, about every Lease/4): how soon another node takes
	// over the pages of one that died. Default DefaultLease.
	Lease         time.Duration
	MaxAttempts   int           // attempts before a transient failure counts as failed; default 8
	BaseBackoff   time.Duration // first retry delay, doubled per attempt; default 1 s
	MaxBackoff    time.Duration // retry delay cap; default 5 min
	WebhookMaxAge time.Duration // how long a publish webhook is retried; default 5 min
	SendTimeout   time.Duration // per attempt; default 30 s
	// Senders, when set, replaces the gateway senders built from an
	// instance's configuration (tests count sends with it).
	Senders func(in *storage.Instance) (map[storage.Platform]Sender, error)
	// RootCAs, when set, are the certificate authorities the FCM and Web
	// Push senders trust instead of the system's (tests with fake gateways;
	// APNs has its per-instance CA).
	RootCAs *x509.CertPool
	// WebhookClient sends publish webhooks; default a client with a 10 s
	// timeout that follows no redirects and dials through
	// WebhookDialContext.
	WebhookClient *http.Client
	// WebhookDialContext, when set, makes the connections of the default
	// WebhookClient: the node plugs in its address guard when private
	// webhook addresses are refused (HERALD_WEBHOOK_ALLOW_PRIVATE=false).
	WebhookDialContext func(ctx context.Context, network, address string) (net.Conn, error)
	// WebPushAllowedHosts are the hosts (names or IP addresses, each
	// optionally with ":port") whose Web Push endpoints may be private or
	// plain http (HERALD_WEBPUSH_ALLOWED_HOSTS); every other endpoint must
	// be https to a public address. Default none.
	WebPushAllowedHosts []string
	// OnOutcome, when set, is told the recorded outcome of every delivery
	// attempt (storage.DeliverySent, DeliveryFailed, DeliveryRetry or
	// DeliveryDeadToken) with its instance id: the debug console's history
	// counts them per instance. It must return at once; a panic of it is
	// recovered and counted in the dispatcher's panics.
	OnOutcome func(instanceID string, outcome storage.DeliveryOutcome)

	// idlePoll, set by tests, is the longest the resolver, the claimer and
	// the webhook sender wait when nothing wakes them (1 s, 5 s and 5 s
	// unset): an hour makes anything that waited for a poll instead of its
	// wake-up or due time never come.
	idlePoll time.Duration
	// now, ticker and timer, set by tests, are the dispatcher's clock (the
	// pages' leases, the claims of retries and of publish webhooks, retry
	// times, the webhooks' age), the renewer's ticker and the resolver's
	// idle timer: time.Now, time.NewTicker and time.NewTimer unset.
	now    func() time.Time
	ticker func(every time.Duration) (ticks <-chan time.Time, stop func())
	timer  func(after time.Duration) (fire <-chan time.Time, stop func())
}

// DefaultLease is Options.Lease's default, and HERALD_PUSH_LEASE's (a node
// test checks that they agree): short enough that a dead node's pages are
// sent by the others within half a minute, long enough that a live node
// renewing every quarter of it on a loaded machine keeps them.
const DefaultLease = 30 * time.Second

// WithDefaults returns o with the defaults in place of its zero fields.
func (o Options) WithDefaults() Options {
	o.Workers = cmp.Or(o.Workers, 128)
	o.ClaimBatch = cmp.Or(o.ClaimBatch, 1000)
	o.MaxInFlight = cmp.Or(o.MaxInFlight, 3072)
	o.PageSize = cmp.Or(o.PageSize, 512)
	o.Lease = cmp.Or(o.Lease, DefaultLease)
	o.MaxAttempts = cmp.Or(o.MaxAttempts, 8)
	o.BaseBackoff = cmp.Or(o.BaseBackoff, time.Second)
	o.MaxBackoff = cmp.Or(o.MaxBackoff, 5*time.Minute)
	o.WebhookMaxAge = cmp.Or(o.WebhookMaxAge, 5*time.Minute)
	o.SendTimeout = cmp.Or(o.SendTimeout, 30*time.Second)
	if o.now == nil {
		o.now = time.Now
	}
	if o.ticker == nil {
		o.ticker = func(every time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(every)
			return t.C, t.Stop
		}
	}
	if o.timer == nil {
		o.timer = func(after time.Duration) (<-chan time.Time, func()) {
			t := time.NewTimer(after)
			return t.C, func() { t.Stop() }
		}
	}
	if o.WebhookClient == nil {
		o.WebhookClient = netguard.WebhookClient(webhookTimeout, o.WebhookDialContext, 0)
	}
	return o
}

// InstanceLookup finds Push instances by id.
type InstanceLookup interface {
	ByID(id string) *storage.Instance
}

// Dispatcher resolves stored publishes into deliveries and sends them. What
// a crash may not lose is in the database: the publish with its targets, per
// publish a cursor up to which pages of its targets were claimed, and each
// claimed page until it is recorded. Targets are claimed a page at a time
// (see storage.ClaimPage), by any of the nodes sharing the database, and
// handed to the senders straight from memory; a page is recorded (counts,
// dead devices, retries) once all its deliveries are done. The pages of a
// dispatcher that died are taken over once their leases ran out (by the
// next start, alone on SQLite): every device gets its notification, the
// ones in flight at the crash possibly twice.
//
// Deliveries that must wait are rows of the deliveries table: retries after
// a transient failure, and a page's deliveries for a gateway that already
// has its share of MaxInFlight (so a slow gateway does not hold up the
// others). A claimer feeds them to the same senders when due.
//
// Goroutines: one resolver (targets -> pages -> platform queues), one
// renewer of the pages' leases, one claimer (due rows -> platform queues), Workers senders per platform, one
// recorder (results -> pages and rows, recorded in batches) and one webhook
// sender. Close stops them all.
type Dispatcher struct {
	db        *storage.DB
	instances InstanceLookup
	log       *zap.Logger
	opts      Options
	webGuard  *netguard.Policy // where Web Push endpoints may lead
	// guardedHooks sends the webhooks of publishes whose webhook URL is not
	// the instance's own (storage.Publish.WebhookGuarded): where Web Push
	// endpoints may lead, and nowhere else.
	guardedHooks *http.Client

	queues  map[storage.Platform]chan job
	results chan outcome
	// platformInFlight counts per platform the deliveries handed to senders
	// and not yet recorded; pageInFlight those of them that belong to pages.
	platformInFlight map[storage.Platform]*atomic.Int64
	pageInFlight     atomic.Int64
	counters         counters         // metrics (counters.go)
	panics           recovery.Counter // recovered in sends, the resolver, the recorder, publish webhooks

	wakeResolver chan struct{}
	wakeClaimer  chan struct{}
	// claimerFull is set while the claimer waits for room in flight on a
	// gateway: only then does every recorded batch wake it.
	claimerFull  atomic.Bool
	wakeRecorder chan struct{}
	wakeHooks    chan struct{}

	mu       sync.Mutex
	accepted map[string]*Payload          // payloads parsed by the Publish API, until their publish is started
	prepared map[string]*Prepared         // publishes to interests, by publish id
	users    map[string]*usersPrepared    // publishes to users, by publish id
	nUsers   int                          // Prepared entries held in users
	gateways map[string]*instanceGateways // by instance id
	reading  map[string]*reading          // publishes being resolved, by id
	ready    []*page                      // pages whose deliveries are all done, to record
	claimed  map[int64]bool               // the ids of the pages in flight, whose leases the resolver renews

	stop    context.CancelFunc
	loops   sync.WaitGroup // resolver, claimer, webhooks
	workers sync.WaitGroup
	records chan struct{} // closed when the recorder is done
}

// reading is what the resolver knows of one publish it sends pages of: its
// parsed payload, its target streams (see storage.PublishTargets) and which
// of them have no page left to claim, and its pages in flight here.
type reading struct {
	publish storage.Publish
	payload *Payload                  // parsed; nil when the stored one did not parse
	wanted  map[storage.Platform]bool // the platforms the publish has a payload for
	streams map[storage.Platform]*stream
	names   []storage.Platform // the streams' names, for storage.PageResult
	open    int                // pages claimed here and not recorded yet
	expired bool               // the last listing saw a page of it whose lease ran out
}

type stream struct {
	exhausted bool // every page claimed, by this node or others
}

// page is one claimed page in flight. The resolver fills it and hands its
// deliveries out; the recorder alone counts them back.
type page struct {
	result  storage.PageResult
	reading *reading
	pending int // deliveries not completed yet
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

// job is a delivery for a sender: of a page in flight, or a stored row
// (page nil).
type job struct {
	d    storage.Delivery
	page *page
}

type outcome struct {
	job
	res Result
}

type instanceGateways struct {
	updated time.Time
	senders map[storage.Platform]Sender
	errs    map[storage.Platform]error
}

var platforms = []storage.Platform{storage.PlatformAPNs, storage.PlatformFCM, storage.PlatformWeb}

// New returns a dispatcher; Start runs it.
func New(db *storage.DB, instances InstanceLookup, log *zap.Logger, opts Options) *Dispatcher {
	opts = opts.WithDefaults()
	if opts.Owner == "" {
		opts.Owner = "local"
		if db.Shared() {
			opts.Owner = "node-" + rand.Text()[:12]
		}
	}
	d := &Dispatcher{
		db: db, instances: instances, log: log, opts: opts, webGuard: netguard.NewPolicy(opts.WebPushAllowedHosts),
		queues:           map[storage.Platform]chan job{},
		platformInFlight: map[storage.Platform]*atomic.Int64{},
		results:          make(chan outcome, opts.MaxInFlight),
		wakeResolver:     make(chan struct{}, 1),
		wakeClaimer:      make(chan struct{}, 1),
		wakeRecorder:     make(chan struct{}, 1),
		wakeHooks:        make(chan struct{}, 1),
		accepted:         map[string]*Payload{},
		prepared:         map[string]*Prepared{},
		users:            map[string]*usersPrepared{},
		gateways:         map[string]*instanceGateways{},
		reading:          map[string]*reading{},
		claimed:          map[int64]bool{},
	}
	d.guardedHooks = d.webGuard.Client(webhookTimeout)
	for _, p := range platforms {
		// A platform holds at most about platformLimit() in flight.
		d.queues[p] = make(chan job, 2*opts.MaxInFlight+opts.PageSize)
		d.platformInFlight[p] = new(atomic.Int64)
	}
	return d
}

// platformLimit is the share of MaxInFlight one gateway may hold: a third,
// so that a slow gateway leaves the others room, and at least a page.
func (d *Dispatcher) platformLimit() int64 {
	return int64(max(d.opts.MaxInFlight/len(platforms), d.opts.PageSize))
}

// retryLease is how long a claimed delivery stays this node's: long enough
// to wait in a queue and be sent (it is not renewed), and how long after a
// node died its claimed retries are taken over.
func (d *Dispatcher) retryLease() time.Duration { return max(5*time.Minute, 4*d.opts.SendTimeout) }

// Start releases the claims a previous process left behind, when alone on
// its database (on a shared one they may be another node's, and run out
// instead), and the pages an earlier run under the same Owner left open,
// and starts the loops.
func (d *Dispatcher) Start(ctx context.Context) error {
	if !d.db.Shared() {
		if n, err := d.db.ReleaseDeliveryClaims(ctx); err != nil {
			return err
		} else if n > 0 {
			d.log.Info("resuming deliveries claimed by an earlier run", zap.Int("deliveries", n))
		}
	}
	if n, err := d.db.ReleasePages(ctx, d.opts.Owner); err != nil {
		return err
	} else if n > 0 {
		d.log.Info("resuming pages claimed by an earlier run", zap.Int("pages", n))
	}
	bg, stop := context.WithCancel(context.Background())
	d.stop = stop
	d.records = make(chan struct{})
	go func() { defer close(d.records); d.record() }()
	for _, p := range platforms {
		q := d.queues[p]
		for range d.opts.Workers {
			d.workers.Add(1)
			go func() { defer d.workers.Done(); d.work(bg, q) }()
		}
	}
	d.loops.Add(4)
	go func() { defer d.loops.Done(); d.resolve(bg) }()
	go func() { defer d.loops.Done(); d.renew(bg) }()
	go func() { defer d.loops.Done(); d.claim(bg) }()
	go func() { defer d.loops.Done(); d.sendWebhooks(bg) }()
	return nil
}

// Close stops the dispatcher. Sends in flight are abandoned; their pages and
// rows stay unrecorded and the next start sends them again (at least once).
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

// InFlight is how many deliveries are handed to senders and not yet recorded.
func (d *Dispatcher) InFlight() int {
	n := int64(0)
	for _, c := range d.platformInFlight {
		n += c.Load()
	}
	return int(n)
}

// Notify tells the dispatcher that a publish was stored.
func (d *Dispatcher) Notify() { d.counters.published(); wake(d.wakeResolver) }

// Published tells the dispatcher that the publish was stored, with its
// payload as the Publish API parsed it: the resolver takes that instead of
// parsing the stored copy again. A publish the resolver started before this
// call, or one after a restart, is parsed from storage.
func (d *Dispatcher) Published(publishID string, payload *Payload) {
	d.mu.Lock()
	if len(d.accepted) >= maxPrepared {
		clear(d.accepted) // publishes deleted with their instance are never started
	}
	d.accepted[publishID] = payload
	d.mu.Unlock()
	d.Notify()
}

// takeAccepted returns the payload handed over with Published for the
// publish, once, or nil.
func (d *Dispatcher) takeAccepted(publishID string) *Payload {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.accepted[publishID]
	delete(d.accepted, publishID)
	return p
}

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

// claim moves due rows of the deliveries table to the platform queues while
// their gateway has less than its share in flight.
func (d *Dispatcher) claim(ctx context.Context) {
	for ctx.Err() == nil {
		claimed, full := d.claimDue(ctx)
		if claimed > 0 {
			continue
		}
		wait := cmp.Or(d.opts.idlePoll, 5*time.Second)
		d.claimerFull.Store(full > 0)
		if full == 0 {
			if next, ok, err := d.db.NextDeliveryDue(ctx); err == nil && ok {
				wait = max(min(next.Sub(d.opts.now()), wait), 10*time.Millisecond)
			}
		} else {
			wait = time.Second // the recorder wakes us when room frees up
		}
		sleep(ctx, d.wakeClaimer, wait)
	}
}

// claimDue is one round of the claimer: it claims for retryLease the rows
// due now of every platform with room in flight, hands them to the
// platform's queue, and returns how many it claimed and how many
// platforms had no room.
func (d *Dispatcher) claimDue(ctx context.Context) (claimed, full int) {
	share := d.platformLimit()
	batch := int64(d.opts.ClaimBatch)
	for _, p := range platforms {
		room := share - d.platformInFlight[p].Load()
		if room < max(batch/4, 1) {
			full++
			continue
		}
		got, err := d.db.ClaimDeliveries(ctx, p, d.opts.now(), d.retryLease(), int(min(room, batch)))
		if err != nil {
			if ctx.Err() == nil {
				d.log.Error("claiming deliveries", zap.Error(err))
				sleep(ctx, nil, time.Second)
			}
			break
		}
		claimed += len(got)
		d.platformInFlight[p].Add(int64(len(got)))
		for _, del := range got {
			d.queues[p] <- job{d: del} // at most share in the queue: never blocks
		}
	}
	return claimed, full
}

// work sends the deliveries of one platform's queue.
func (d *Dispatcher) work(ctx context.Context, q chan job) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-q:
			d.results <- outcome{job: j, res: d.sendRecovered(ctx, j.d)}
		}
	}
}

// sendRecovered is send with a panic (a sender's bug, a payload nobody
// foresaw) turned into a failed delivery: it is not retried, since it would
// panic again; the publish counts it failed and the worker goes on.
func (d *Dispatcher) sendRecovered(ctx context.Context, del storage.Delivery) (res Result) {
	if d.panics.Do(d.log, "delivery", func() { res = d.send(ctx, del) },
		zap.String("publish", del.PublishID), zap.String("device", del.DeviceID), zap.String("platform", string(del.Platform))) {
		return failed("the sender panicked")
	}
	return res
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
	payload, err := d.payloadOf(ctx, del)
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
		if payload, err = d.payloadOf(ctx, del); err != nil {
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

// payloadOf returns the parsed payload of the delivery's publish: the
// resolver's while it reads the publish's targets (always, for a delivery of
// a page), else the stored one (a retry from the deliveries table whose
// encodings were evicted or made before a restart).
func (d *Dispatcher) payloadOf(ctx context.Context, del storage.Delivery) (*Payload, error) {
	d.mu.Lock()
	r := d.reading[del.PublishID]
	d.mu.Unlock()
	if r != nil && r.payload != nil {
		return r.payload, nil
	}
	return d.loadPayload(ctx, del)
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
			if s, err := NewFCM(in.FCM, d.opts.RootCAs); err == nil {
				g.senders[storage.PlatformFCM] = s
			} else {
				g.errs[storage.PlatformFCM] = err
			}
			if s, err := NewWebPush(in.VAPID, d.opts.RootCAs, d.webGuard); err == nil {
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
