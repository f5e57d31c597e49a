// Package traffic keeps a node's recent traffic, per Channels app and per
// Push instance, for the debug console's charts: one point every Interval
// for the last Points intervals (an hour at 5 s by default), in memory.
//
// Memory stays flat however long the node runs: the points of every series
// sit in rings allocated once, the number of apps and instances tracked is
// capped (MaxKeys), and the series of an app or instance that no longer
// exists are dropped at the next sample. A sample in steady state allocates
// nothing.
//
// Figures reach a Recorder two ways: counts of things as they happen
// (Count: a webhook attempt, a push delivery), which cost one map read and
// one atomic add, and readings taken at each sample (Sources: the
// connections of each app, the running totals of frames delivered and
// events triggered, which the hub keeps anyway).
//
// The figures are the node's own: in a cluster, each node keeps those
// of what it served.
package traffic

import (
	"cmp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/server/hub"
)

// Defaults of Options.
const (
	DefaultInterval = 5 * time.Second
	DefaultPoints   = 720 // an hour at DefaultInterval
	DefaultMaxKeys  = 1000
)

// Kind is what a series belongs to.
type Kind int

// The kinds of key.
const (
	App Kind = iota
	Instance
)

// The series of an app, in Series order: a gauge, then rates per second.
const (
	AppConnections    = iota // open connections at the sample
	AppTriggered             // events triggered through the HTTP API (or the admin API), per channel; read (AppReading)
	AppDelivered             // frames queued to the app's connections; read (AppReading)
	AppWebhooksSent          // webhook requests answered 2xx
	AppWebhooksFailed        // webhook attempts that failed
	appSeries
)

// The series of an instance: push delivery attempts per second by outcome.
const (
	InstanceDelivered = iota // accepted by the gateway
	InstanceFailed           // refused, or given up
	InstanceRetried          // a transient failure, tried again later
	InstanceDeadToken        // the token is dead; the device was deleted
	instanceSeries
)

// AppSeriesNames and InstanceSeriesNames name the series, in order, as the
// admin API does.
var (
	AppSeriesNames      = [appSeries]string{"connections", "triggered", "delivered", "webhooksSent", "webhooksFailed"}
	InstanceSeriesNames = [instanceSeries]string{"delivered", "failed", "retried", "deadToken"}
)

// Names returns the names of k's series, in order.
func Names(k Kind) []string {
	if k == App {
		return AppSeriesNames[:]
	}
	return InstanceSeriesNames[:]
}

// Gauge reports whether series s of k is a gauge (a reading at the sample:
// AppConnections) rather than a rate per second.
func Gauge(k Kind, s int) bool { return k == App && s == AppConnections }

func seriesOf(k Kind) int {
	if k == App {
		return appSeries
	}
	return instanceSeries
}

// AppReading is what a sample reads of one app.
//
// Delivered and Triggered are running totals that start at zero when the
// source first has the app (as the hub's do) and never go back: a rate is
// the difference between two readings, and an app's first reading counts
// from zero.
type AppReading struct {
	AppID       string
	Connections int
	Delivered   int64 // frames delivered since the app was first used (a running total)
	Triggered   int64 // events triggered since the app was first used (a running total)
}

// totals are the app series read as running totals, whose rates come from
// the difference between two readings.
var totals = [...]int{AppDelivered, AppTriggered}

// total is the running total of series s (one of totals) in a.
func (a *AppReading) total(s int) int64 {
	if s == AppDelivered {
		return a.Delivered
	}
	return a.Triggered
}

// HubApps reads a node's hub as Sources.Apps does: its registry's read
// lock and a few atomics per app (hub.AppCounters), whatever the traffic.
func HubApps(h *hub.Hub) func() []AppReading {
	return func() []AppReading {
		counters := h.AppCounters()
		out := make([]AppReading, len(counters))
		for i, c := range counters {
			out[i] = AppReading{AppID: c.AppID, Connections: c.Connections, Delivered: c.Delivered, Triggered: c.Triggered}
		}
		return out
	}
}

// Sources are read at each sample. Nil fields are skipped.
type Sources struct {
	// Apps returns the readings of the apps in use on the node. The
	// recorder does not keep the slice.
	Apps func() []AppReading
	// Exists reports whether the app or instance still exists; the series
	// of those that do not are dropped. Nil: every key exists.
	Exists func(k Kind, id string) bool
}

// Options tune a Recorder; zero fields take the defaults.
type Options struct {
	Interval time.Duration
	Points   int
	// MaxKeys caps the apps and instances tracked together; figures of
	// others are not kept until tracked ones are dropped.
	MaxKeys int
}

// key names one app or instance.
type key struct {
	kind Kind
	id   string
}

// pending are the counts of one key since the last sample.
type pending [appSeries]atomic.Int64

// track is one key's history: a ring of points aligned with the recorder's
// times, each point seriesOf(kind) values. float32 halves the memory of
// float64 (at most MaxKeys × Points × 5 values: 14 MB with the defaults)
// and is precise enough for a chart.
type track struct {
	vals []float32
}

// Recorder keeps the history. Its methods are safe for concurrent use.
type Recorder struct {
	opts Options
	src  Sources

	// counts are filled by Count between samples; bounded by MaxKeys.
	counts  sync.Map // key → *pending
	nCounts atomic.Int64
	lost    atomic.Int64 // counts lost because MaxKeys keys were counted

	mu     sync.RWMutex
	times  []int64 // sample times, Unix ms; a ring of Points
	head   int     // next slot of the ring
	filled int     // slots written, at most Points
	tracks map[key]*track
	// readings are the last running totals of every app the source has
	// (tracked or not, so that an app tracked later starts with no spike),
	// kept as long as the source keeps the app: the hub keeps every app
	// used since the node started.
	readings map[string][len(totals)]int64
	last     time.Time // the previous sample
}

// WithDefaults returns o with the defaults in place of its zero (or
// negative) fields: DefaultInterval, DefaultPoints, DefaultMaxKeys.
func (o Options) WithDefaults() Options {
	o.Interval = cmp.Or(max(o.Interval, 0), DefaultInterval) // max: a negative field is taken as zero
	o.Points = cmp.Or(max(o.Points, 0), DefaultPoints)
	o.MaxKeys = cmp.Or(max(o.MaxKeys, 0), DefaultMaxKeys)
	return o
}

// New returns a recorder reading src.
func New(src Sources, opts Options) *Recorder {
	opts = opts.WithDefaults()
	return &Recorder{opts: opts, src: src, times: make([]int64, opts.Points), tracks: make(map[key]*track), readings: make(map[string][len(totals)]int64)}
}

// Interval is the time between two points.
func (r *Recorder) Interval() time.Duration { return r.opts.Interval }

// Count adds n to one series of an app or instance (AppWebhooksSent,
// InstanceFailed, …) for the current interval. It never blocks; once
// MaxKeys keys are counted, counts of further ones are lost.
func (r *Recorder) Count(k Kind, id string, series int, n int64) {
	if series < 0 || series >= seriesOf(k) || id == "" {
		return
	}
	kk := key{k, id}
	p, ok := r.counts.Load(kk)
	if !ok {
		if r.nCounts.Load() >= int64(r.opts.MaxKeys) {
			r.lost.Add(n)
			return
		}
		var loaded bool
		if p, loaded = r.counts.LoadOrStore(kk, new(pending)); !loaded {
			r.nCounts.Add(1)
		}
	}
	p.(*pending)[series].Add(n)
}

// Run samples every Interval until stop is closed.
func (r *Recorder) Run(stop <-chan struct{}) {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			r.Sample(now)
		}
	}
}

// Sample takes one point of every series at now: counts since the previous
// sample become rates per second over the time since it (Interval for the
// first), readings are taken from the sources.
func (r *Recorder) Sample(now time.Time) {
	var readings []AppReading
	if r.src.Apps != nil {
		readings = r.src.Apps()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	secs := r.opts.Interval.Seconds()
	if !r.last.IsZero() && now.After(r.last) {
		secs = now.Sub(r.last).Seconds()
	}
	r.last = now
	slot := r.head
	r.times[slot] = now.UnixMilli()
	r.head = (r.head + 1) % r.opts.Points
	r.filled = min(r.filled+1, r.opts.Points)

	// Every tracked key gets this slot written, zeros unless read or
	// counted below, so the rings stay aligned with times.
	for _, t := range r.tracks {
		n := len(t.vals) / r.opts.Points
		clear(t.vals[slot*n : (slot+1)*n])
	}
	for _, a := range readings {
		prev := r.readings[a.AppID] // zeros for an app not read before
		var cur [len(totals)]int64
		for i, s := range totals {
			cur[i] = a.total(s)
		}
		r.readings[a.AppID] = cur
		t := r.trackOf(key{App, a.AppID})
		if t == nil {
			continue
		}
		v := t.vals[slot*appSeries : (slot+1)*appSeries]
		v[AppConnections] = float32(a.Connections)
		for i, s := range totals {
			if cur[i] >= prev[i] {
				v[s] = float32(float64(cur[i]-prev[i]) / secs)
			}
		}
	}
	r.counts.Range(func(k, p any) bool {
		kk := k.(key)
		n := seriesOf(kk.kind)
		t := r.trackOf(kk)
		if t == nil {
			// No room to keep them: they go anyway, so that a track the
			// key gets later does not start with their sum.
			for i := range n {
				p.(*pending)[i].Store(0)
			}
			return true
		}
		v := t.vals[slot*n : (slot+1)*n]
		for i := range n {
			if c := p.(*pending)[i].Swap(0); c != 0 {
				v[i] += float32(float64(c) / secs)
			}
		}
		return true
	})
	r.drop()
}

// trackOf returns the key's track, made when there is room; nil when
// MaxKeys keys are tracked already.
func (r *Recorder) trackOf(k key) *track {
	if t := r.tracks[k]; t != nil {
		return t
	}
	if len(r.tracks) >= r.opts.MaxKeys {
		return nil
	}
	t := &track{vals: make([]float32, r.opts.Points*seriesOf(k.kind))}
	r.tracks[k] = t
	return t
}

// drop forgets the keys that no longer exist.
func (r *Recorder) drop() {
	for k := range r.tracks {
		if r.src.Exists != nil && !r.src.Exists(k.kind, k.id) {
			delete(r.tracks, k)
			if _, ok := r.counts.LoadAndDelete(k); ok {
				r.nCounts.Add(-1)
			}
		}
	}
	if r.src.Exists == nil {
		return
	}
	// Counted keys never tracked (MaxKeys) go too when they are gone.
	r.counts.Range(func(k, _ any) bool {
		kk := k.(key)
		if !r.src.Exists(kk.kind, kk.id) {
			if _, ok := r.counts.LoadAndDelete(kk); ok {
				r.nCounts.Add(-1)
			}
		}
		return true
	})
}

// History is the recorded history of one key, oldest point first.
type History struct {
	Interval time.Duration
	// Times are the points' sample times, Unix milliseconds.
	Times []int64
	// Series hold one value per point each, named by AppSeriesNames or
	// InstanceSeriesNames.
	Series [][]float32
	// Tracked is false when the key has no history because MaxKeys keys
	// were tracked; its series are zeros.
	Tracked bool
}

// Get returns the history of an app or instance. A key with no figures yet
// has zeros at every point.
func (r *Recorder) Get(k Kind, id string) History {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := seriesOf(k)
	h := History{Interval: r.opts.Interval, Times: make([]int64, r.filled), Series: make([][]float32, n)}
	for i := range h.Series {
		h.Series[i] = make([]float32, r.filled)
	}
	t := r.tracks[key{k, id}]
	h.Tracked = t != nil || len(r.tracks) < r.opts.MaxKeys
	start := (r.head - r.filled + r.opts.Points) % r.opts.Points
	for i := range r.filled {
		slot := (start + i) % r.opts.Points
		h.Times[i] = r.times[slot]
		if t == nil {
			continue
		}
		for s := range n {
			h.Series[s][i] = t.vals[slot*n+s]
		}
	}
	return h
}

// Stats are the recorder's sizes, for tests.
type Stats struct {
	Tracked int   // keys with a history
	Counted int   // keys with counts pending
	Lost    int64 // counts lost because MaxKeys keys were counted
}

// Stats returns the recorder's sizes.
func (r *Recorder) Stats() Stats {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return Stats{Tracked: len(r.tracks), Counted: int(r.nCounts.Load()), Lost: r.lost.Load()}
}
