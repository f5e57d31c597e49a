package httpapi

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/cluster"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/internal/testkit"
	"github.com/heraldrt/herald/server/internal/testredis"
)

// BenchmarkSignedTrigger measures the signed trigger path in process: body
// read, signature check, JSON decoding, validation, hand-off to the registry
// and the response, through the gin engine — everything but the network.
// The channel has one subscriber whose queue the benchmark drains.
func BenchmarkSignedTrigger(b *testing.B) { benchSignedTrigger(b, triggerBench{}) }

// BenchmarkSignedTriggerIdempotencyKey is BenchmarkSignedTrigger with an
// Idempotency-Key of its own on every request (the node's memory store, as
// on one node): each request claims a key and keeps its answer, and once
// the app holds its 10,000 keys each one also forgets the oldest. Making up
// the key (strconv) is counted too: one allocation of the client's.
func BenchmarkSignedTriggerIdempotencyKey(b *testing.B) {
	benchSignedTrigger(b, triggerBench{keyed: true})
}

// BenchmarkSignedTriggerHistory is BenchmarkSignedTrigger for an app that
// keeps the last 100 events of each channel for an hour (the node's memory
// store, as on one node): each trigger also appends its event, and from the
// 101st on drops the channel's oldest.
func BenchmarkSignedTriggerHistory(b *testing.B) { benchSignedTrigger(b, triggerBench{history: true}) }

// triggerBench is a variant of BenchmarkSignedTrigger: keyed, with an
// Idempotency-Key; history, for an app that keeps 100 events a channel for
// an hour; unpositioned, in a store that gives no IDs (the publish goes
// out, then is appended); recoverable, with a recoverable subscriber
// (channels_recovery_bench_test.go).
type triggerBench struct {
	keyed, history, unpositioned, recoverable bool
}

func benchSignedTrigger(b *testing.B, o triggerBench) {
	keyed, history := o.keyed, o.history
	log := zap.NewNop()
	h := hub.New(log)
	engine := NewEngine(log)
	app := *testApps["key1"]
	if history {
		app.HistoryEvents, app.HistoryTTL = 100, time.Hour
	}
	var apiOpts ChannelsOptions
	mem := eventlog.NewMemory(eventlog.Limits{})
	switch {
	case history && o.unpositioned:
		apiOpts.History = unpositioned{mem}
	case history:
		apiOpts.History = mem
	}
	if keyed {
		apiOpts.Idempotency = idempotency.NewGuard(idempotency.NewMemory(idempotency.Options{}), idempotency.Options{})
	}
	api := NewChannelsAPI(h, staticApps{"key1": &app}, log, apiOpts)
	at := time.Unix(1_700_000_000, 0)
	api.now = func() time.Time { return at }
	Mount(engine, Routes{Channels: api})

	sub, _ := h.Connect("1", hub.ConnectOptions{})
	var opts hub.SubscribeOptions
	if o.recoverable {
		opts.Recovery = benchRecovery(mem, historyPolicy(&app))
	}
	if err := h.Subscribe(sub, "news", opts); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"name":"price","channels":["news"],"data":"{\"symbol\":\"HRLD\",\"price\":42.5}"}`)
	target := "/apps/1/events?" + clientauth.SignQuery("POST", "/apps/1/events", url.Values{}, body, "key1", "secret1", at)
	reader := bytes.NewReader(body)
	req := httptest.NewRequest("POST", target, nil)
	rawQuery := req.URL.RawQuery
	req.Header.Set("Content-Type", "application/json")
	rec := &discardWriter{header: http.Header{}}
	var frames [][]byte

	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := testkit.CPU()
	for i := 0; i < b.N; i++ {
		reader.Reset(body)
		req.URL.RawQuery = rawQuery // authentication strips the signing parameters
		req.Body = io.NopCloser(reader)
		if keyed {
			req.Header[IdempotencyKeyHeader] = []string{strconv.Itoa(i)}
		}
		rec.status = 0
		engine.ServeHTTP(rec, req)
		if rec.status != http.StatusOK {
			b.Fatalf("status %d", rec.status)
		}
		frames, _ = sub.Take(frames[:0])
	}
	// The fan-out worker delivers on another goroutine: the process's CPU
	// counts it, where ns/op may not.
	b.ReportMetric(float64((testkit.CPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }

// BenchmarkBareHandler is the baseline for BenchmarkSignedTrigger: the same
// engine and middleware answering {} to a POST with the same body, without
// signature, decoding or registry work.
func BenchmarkBareHandler(b *testing.B) {
	engine := NewEngine(zap.NewNop())
	engine.POST("/bare", func(c *gin.Context) {
		io.Copy(io.Discard, c.Request.Body)
		c.Data(http.StatusOK, "application/json", []byte("{}"))
	})
	body := []byte(`{"name":"price","channels":["news"],"data":"{\"symbol\":\"HRLD\",\"price\":42.5}"}`)
	reader := bytes.NewReader(body)
	req := httptest.NewRequest("POST", "/bare", nil)
	rec := &discardWriter{header: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		reader.Reset(body)
		req.Body = io.NopCloser(reader)
		engine.ServeHTTP(rec, req)
	}
}

// BenchmarkSignedTriggerCluster is BenchmarkSignedTrigger on a node in
// cluster mode (a real redis-server), with triggers in flight at once as
// HTTP clients send them (8 per CPU), for an app without history and one
// that keeps the last 100 events of each channel for an hour in the
// cluster's Redis store: what keeping history costs a trigger in req/s.
// Each trigger goes to one of 100 channels with a subscriber.
//
//	go test -run '^$' -bench SignedTriggerCluster ./server/httpapi/
func BenchmarkSignedTriggerCluster(b *testing.B) {
	rs := testredis.Start(b)
	for _, history := range []bool{false, true} {
		name := "history_off"
		if history {
			name = "history_on"
		}
		b.Run(name, func(b *testing.B) { benchSignedTriggerCluster(b, rs, history) })
	}
}

func benchSignedTriggerCluster(b *testing.B, rs *testredis.Server, history bool) {
	const channels = 100
	log := zap.NewNop()
	h := hub.New(log)
	defer h.Close()
	c, err := cluster.New(log, h, cluster.Options{URL: rs.URL(), NodeID: "bench", Prefix: fmt.Sprintf("t%d:", time.Now().UnixNano())})
	if err != nil {
		b.Fatal(err)
	}
	c.Start()
	defer c.Close()
	app := *testApps["key1"]
	if history {
		app.HistoryEvents, app.HistoryTTL = 100, time.Hour
	}
	engine := NewEngine(log)
	api := NewChannelsAPI(h, staticApps{"key1": &app}, log, ChannelsOptions{History: c.EventLog(eventlog.Limits{})})
	at := time.Now()
	api.now = func() time.Time { return at }
	Mount(engine, Routes{Channels: api})

	// Subscribers whose queues nobody drains: a generous bound keeps them
	// open, and the trigger path, not delivery, is measured.
	for i := range channels {
		sub, err := h.Connect("1", hub.ConnectOptions{MaxQueueBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Subscribe(sub, "news"+strconv.Itoa(i), hub.SubscribeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	type request struct {
		target string
		body   []byte
	}
	reqs := make([]request, channels)
	for i := range reqs {
		body := []byte(`{"name":"price","channels":["news` + strconv.Itoa(i) + `"],"data":"{\"symbol\":\"HRLD\",\"price\":42.5}"}`)
		reqs[i] = request{"/apps/1/events?" + clientauth.SignQuery("POST", "/apps/1/events", url.Values{}, body, "key1", "secret1", at), body}
	}
	var next atomic.Int64
	b.SetParallelism(8)
	redis0 := testkit.ProcessCPU(rs.PID())
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		rec := &discardWriter{header: http.Header{}}
		for pb.Next() {
			r := reqs[next.Add(1)%channels]
			req := httptest.NewRequest("POST", r.target, bytes.NewReader(r.body))
			req.Header.Set("Content-Type", "application/json")
			rec.status = 0
			engine.ServeHTTP(rec, req)
			if rec.status != http.StatusOK {
				b.Errorf("status %d", rec.status)
				return
			}
		}
	})
	b.StopTimer() // the closes deferred are not triggers
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	// Redis's CPU per trigger: what history adds in Redis, less noisy than
	// the rate on a busy machine.
	b.ReportMetric(float64(testkit.ProcessCPU(rs.PID())-redis0)/float64(b.N), "redis-cpu-ns/req")
}
