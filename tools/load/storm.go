package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The recovery storm (-storm) measures Herald's recovery (the Recovery
// section of spec/websocket.asyncapi.yaml) when every client comes back at
// once: each subscriber subscribes recoverably, events flow at -rate over
// the channels, then after -cut-after every connection is cut at once from
// the client side (a TCP reset, no close frame), publishing goes on for
// -cut-for, and every subscriber reconnects and resumes with its old socket
// id, its token and its position, while publishing goes on until -tail
// after the last recovery. Each subscriber keeps the recovery plugin's
// state (gen/typescript/src/recovery.ts) and checks its channel's sequence
// numbers: every event the API accepted, exactly once and in order.
//
// A channel's events are published one at a time (a lock per channel held
// over the HTTP request), so their sequence numbers are in the order
// Herald accepted them and an event older than one already received is a
// reordering, not publishers racing.

// stormSub is one subscriber of the storm, over its successive connections.
type stormSub struct {
	id, ch int
	conn   wsConn
	done   chan struct{} // closed when the reader of conn returns

	// The plugin's state and the sequence check: the reader's, read by
	// the reconnect and the report once done is closed.
	socketID, token, position, pending string
	resuming                           bool  // between a resume's subscription_succeeded and its outcome
	replayedSeen                       int   // events received while resuming
	last                               int64 // highest seq received, -1 before any
	seen                               seqSet

	unique    atomic.Int64 // distinct events received
	dups      atomic.Int64 // events received again
	disorder  atomic.Int64 // events older than one received before them
	bad       atomic.Int64
	other     atomic.Int64 // other frames of the channel (subscription_count)
	tokens    atomic.Int64 // pusher_internal:recovery frames
	dialNs    atomic.Int64 // when the resume's dial began
	outcomeNs atomic.Int64 // when the resume's pusher:recovered or recovery_failed arrived; 0 before
	cut       atomic.Bool  // the tool cut the connection: its read error is expected
}

// stormChannel is the publishing side of one channel.
type stormChannel struct {
	mu       sync.Mutex
	next     int64  // next seq
	accepted seqSet // the seqs the API accepted
	ok       atomic.Int64
}

type storm struct {
	*runner
	subs  []stormSub
	chans []stormChannel
	res   *stormResult

	stopPub atomic.Bool
	rssPeak atomic.Int64 // highest VmRSS sampled in the current phase, KiB

	mu        sync.Mutex
	failed    map[string]int // pusher:recovery_failed reason → subscribers
	mismatch  int            // resumes whose pusher:recovered count is not the events replayed
	replayed  int64          // sum of pusher:recovered's replayed
	recovered int
}

// stormResult is what a storm measured, printed as one JSON line. Times
// are seconds from the cut (the moment the tool began to reset every
// connection) unless named otherwise.
type stormResult struct {
	Mode        string  `json:"mode"` // storm
	Client      string  `json:"client"`
	Subs        int     `json:"subs"`
	Channels    int     `json:"channels"`
	CPUs        int     `json:"cpus"`
	LoadAvg     string  `json:"loadavg_before"` // /proc/loadavg: 1, 5 and 15 minutes
	LoadAvgEnd  string  `json:"loadavg_after"`
	Rate        float64 `json:"rate"`
	CutAfterS   float64 `json:"cut_after_s"`
	CutForS     float64 `json:"cut_for_s"`
	SpreadS     float64 `json:"reconnect_spread_s"`
	ServerPID   int     `json:"server_pid"`
	NoFileLimit uint64  `json:"nofile_limit"`

	Connected           int      `json:"connected"`
	ConnectSeconds      float64  `json:"connect_s"`
	ConnectErrorSamples []string `json:"connect_error_samples,omitempty"`
	Tokens              int      `json:"tokens"` // subscribers that got pusher_internal:recovery before publishing

	Publishes           int64    `json:"publishes"`
	PublishErrors       int64    `json:"publish_errors"`
	PublishErrorSamples []string `json:"publish_error_samples,omitempty"`
	PublishesBeforeCut  int64    `json:"publishes_before_cut"`
	PublishesWhileAway  int64    `json:"publishes_while_away"` // accepted from the cut to the last resubscribe

	CutSeconds       float64  `json:"cut_s"`       // resetting every connection
	Reconnected      int      `json:"reconnected"` // resubscribed
	ReconnectErrors  []string `json:"reconnect_error_samples,omitempty"`
	ReconnectStartS  float64  `json:"reconnect_start_s"`
	ResubscribedAllS float64  `json:"resubscribed_all_s"` // the last subscription_succeeded
	RecoveredAllS    float64  `json:"recovered_all_s"`    // the last pusher:recovered or recovery_failed
	// Milliseconds from a subscriber's reconnect (its dial) to its outcome.
	RecoverP50Ms float64 `json:"recover_p50_ms"`
	RecoverP99Ms float64 `json:"recover_p99_ms"`
	RecoverMaxMs float64 `json:"recover_max_ms"`
	DrainedS     float64 `json:"drained_s"` // after the tail, every subscriber had every accepted event (or -drain passed)

	Recovered        int            `json:"recovered"`
	RecoveryFailed   map[string]int `json:"recovery_failed"`
	Replayed         int64          `json:"replayed"`
	ReplayedMismatch int            `json:"replayed_mismatch"` // pusher:recovered's count is not the events that came before it

	Expected     int64 `json:"expected"` // accepted events × their channel's subscribers
	Received     int64 `json:"received"`
	Gaps         int64 `json:"gaps"` // accepted events a subscriber never got
	SubsWithGaps int   `json:"subs_with_gaps"`
	Duplicates   int64 `json:"duplicates"`
	OutOfOrder   int64 `json:"out_of_order"`
	Unexpected   int64 `json:"unexpected"` // events received that the API did not accept (a publish that timed out)
	BadFrames    int64 `json:"bad_frames"`
	OtherFrames  int64 `json:"other_frames"` // pusher_internal:subscription_count and the like, over the run

	// Server VmRSS, KiB: before connecting, the peak while connecting, the
	// peak while publishing before the cut, the peak from the cut to every
	// outcome, the peak in the tail, at the end; VmHWM at the end.
	RSSStartKiB   int64 `json:"rss_start_kib"`
	RSSConnectKiB int64 `json:"rss_peak_connect_kib"`
	RSSSteadyKiB  int64 `json:"rss_peak_steady_kib"`
	RSSStormKiB   int64 `json:"rss_peak_storm_kib"`
	RSSTailKiB    int64 `json:"rss_peak_tail_kib"`
	RSSEndKiB     int64 `json:"rss_end_kib"`
	HWMKiB        int64 `json:"vmhwm_kib"`
	ToolRSSKiB    int64 `json:"tool_rss_kib"`

	// Server and tool CPU, percent of one core: publishing before the cut,
	// from the cut to every outcome (the storm).
	SteadyServerCPUPct float64 `json:"steady_server_cpu_pct"`
	StormServerCPUPct  float64 `json:"storm_server_cpu_pct"`
	StormToolCPUPct    float64 `json:"storm_tool_cpu_pct"`
	StormOtherCPUPct   float64 `json:"storm_other_cpu_pct"`

	ClosedByServer map[string]int `json:"closed_by_server"`
	PusherErrors   map[string]int `json:"pusher_errors,omitempty"`
}

// runStorm runs the recovery storm.
func runStorm(ctx context.Context, cfg *config, log io.Writer) (*stormResult, error) {
	if cfg.quiet {
		log = io.Discard
	}
	res := &stormResult{
		Mode: "storm", Client: cfg.client, Subs: cfg.subs, Channels: cfg.channels, CPUs: runtime.NumCPU(),
		Rate: cfg.rate, CutAfterS: cfg.cutAfter.Seconds(), CutForS: cfg.cutFor.Seconds(), SpreadS: cfg.spread.Seconds(),
		LoadAvg: loadAvg(), RecoveryFailed: map[string]int{}, ClosedByServer: map[string]int{},
		RSSStartKiB: -1, RSSConnectKiB: -1, RSSSteadyKiB: -1, RSSStormKiB: -1, RSSTailKiB: -1, RSSEndKiB: -1, HWMKiB: -1,
		SteadyServerCPUPct: -1, StormServerCPUPct: -1, StormToolCPUPct: -1, StormOtherCPUPct: -1,
	}
	var plain result
	r := newRunner(cfg, log, &plain)
	r.setupDialers(&plain)
	res.NoFileLimit = plain.NoFileLimit
	st := &storm{runner: r, subs: make([]stormSub, cfg.subs), chans: make([]stormChannel, cfg.channels), res: res, failed: map[string]int{}}

	pid, spid := cfg.serverProc(log)
	res.ServerPID = pid
	if pid > 0 {
		if v, err := rssKiB(spid); err == nil {
			res.RSSStartKiB = v
		}
		sampleCtx, stopSampling := context.WithCancel(ctx)
		defer stopSampling()
		go st.sampleRSS(sampleCtx, spid)
	}
	phasePeak := func() int64 {
		if spid == "" {
			return -1
		}
		v, err := rssKiB(spid)
		if err != nil {
			return st.rssPeak.Load() // unread: the peak so far
		}
		return max(st.rssPeak.Swap(v), v)
	}

	// Connect, subscribe recoverably, wait for every token.
	t0 := time.Now()
	st.connectAll(ctx, false, t0)
	res.Connected = st.connected()
	res.ConnectSeconds = time.Since(t0).Seconds()
	r.mu.Lock()
	_, res.ConnectErrorSamples = sampleErrors(r.connErrs)
	clear(r.connErrs)
	r.mu.Unlock()
	st.waitFor(ctx, cfg.connTimout, func(s *stormSub) bool { return s.tokens.Load() > 0 })
	for i := range st.subs {
		if st.subs[i].conn != nil && st.subs[i].tokens.Load() > 0 {
			res.Tokens++
		}
	}
	res.RSSConnectKiB = phasePeak()
	fmt.Fprintf(log, "connected %d/%d in %.2fs, %d with a recovery token\n", res.Connected, cfg.subs, res.ConnectSeconds, res.Tokens)
	if res.Connected == 0 {
		return res, errors.New("no subscriber connected")
	}

	// Publish; cut after -cut-after.
	var pubWG sync.WaitGroup
	pubWG.Go(func() { st.publish(ctx) })
	tSteady := time.Now()
	srvCPU := startCPU(spid, tSteady.UnixNano())
	sleepCtx(ctx, cfg.cutAfter)

	tCut := time.Now()
	res.SteadyServerCPUPct = srvCPU.pct(tCut.UnixNano())
	res.RSSSteadyKiB = phasePeak()
	res.PublishesBeforeCut = st.publishes()
	toolCPU, sysCPU := startCPU("self", tCut.UnixNano()), startCPU("system", tCut.UnixNano())
	srvCPU = startCPU(spid, tCut.UnixNano())
	st.cutAll()
	res.CutSeconds = time.Since(tCut).Seconds()
	fmt.Fprintf(log, "cut %d connections in %.2fs after %d publishes; away for %v\n", res.Connected, res.CutSeconds, res.PublishesBeforeCut, cfg.cutFor)
	sleepCtx(ctx, cfg.cutFor-time.Since(tCut))

	// Reconnect and resume.
	tRec := time.Now()
	res.ReconnectStartS = tRec.Sub(tCut).Seconds()
	st.connectAll(ctx, true, tRec)
	tResub := time.Now()
	res.PublishesWhileAway = st.publishes() - res.PublishesBeforeCut
	res.Reconnected = st.connected()
	res.ResubscribedAllS = tResub.Sub(tCut).Seconds()
	r.mu.Lock()
	_, res.ReconnectErrors = sampleErrors(r.connErrs)
	r.mu.Unlock()
	fmt.Fprintf(log, "resubscribed %d/%d in %.2fs\n", res.Reconnected, res.Connected, tResub.Sub(tRec).Seconds())
	st.waitFor(ctx, cfg.drain, func(s *stormSub) bool { return s.outcomeNs.Load() != 0 })
	tOutcome := time.Now()
	var lastOutcome int64
	var recH histogram
	for i := range st.subs {
		s := &st.subs[i]
		if ns := s.outcomeNs.Load(); ns != 0 && s.conn != nil {
			lastOutcome = max(lastOutcome, ns)
			recH.record(i, uint64(max(ns-s.dialNs.Load(), 0)/1000))
		}
	}
	if lastOutcome > 0 {
		res.RecoveredAllS = float64(lastOutcome-tCut.UnixNano()) / 1e9
	}
	_, q, maxUS := recH.summary(0.5, 0.99)
	res.RecoverP50Ms, res.RecoverP99Ms, res.RecoverMaxMs = q[0]/1000, q[1]/1000, float64(maxUS)/1000
	res.StormServerCPUPct, res.StormToolCPUPct = srvCPU.pct(tOutcome.UnixNano()), toolCPU.pct(tOutcome.UnixNano())
	res.StormOtherCPUPct = otherCPU(sysCPU.pct(tOutcome.UnixNano()), res.StormToolCPUPct, res.StormServerCPUPct)
	res.RSSStormKiB = phasePeak()
	fmt.Fprintf(log, "every outcome %.2fs after the cut; publishing %v more\n", res.RecoveredAllS, cfg.tail)

	// The tail: live events after the recoveries, then drain.
	sleepCtx(ctx, cfg.tail)
	st.stopPub.Store(true)
	pubWG.Wait()
	st.waitFor(ctx, cfg.drain, func(s *stormSub) bool { return s.unique.Load() >= st.chans[s.ch].ok.Load() })
	res.DrainedS = time.Since(tCut).Seconds()
	res.RSSTailKiB = phasePeak()
	// A figure that cannot be read stays -1 (not measured), not 0.
	if spid != "" {
		if v, err := rssKiB(spid); err == nil {
			res.RSSEndKiB = v
		}
		if v, err := statusKiB(spid, "VmHWM:"); err == nil {
			res.HWMKiB = v
		}
	}
	if v, err := rssKiB("self"); err == nil {
		res.ToolRSSKiB = v
	}
	res.LoadAvgEnd = loadAvg()
	st.closeAll()
	st.collect()
	return res, ctx.Err()
}

// sampleRSS keeps the highest VmRSS of pid in rssPeak until ctx ends.
func (st *storm) sampleRSS(ctx context.Context, pid string) {
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		if v, err := rssKiB(pid); err == nil {
			for {
				p := st.rssPeak.Load()
				if v <= p || st.rssPeak.CompareAndSwap(p, v) {
					break
				}
			}
		}
	}
}

// waitFor waits up to limit until done holds for every connected subscriber,
// printing progress each second.
func (st *storm) waitFor(ctx context.Context, limit time.Duration, done func(*stormSub) bool) {
	deadline := time.Now().Add(limit)
	lastLog := time.Now()
	for ctx.Err() == nil && time.Now().Before(deadline) {
		n, all := 0, 0
		for i := range st.subs {
			if s := &st.subs[i]; s.conn != nil {
				all++
				if done(s) {
					n++
				}
			}
		}
		if n == all {
			return
		}
		if time.Since(lastLog) >= time.Second {
			fmt.Fprintf(st.log, "waiting: %d/%d\n", n, all)
			lastLog = time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// connectAll (re)connects every subscriber, -connect-concurrency at a time;
// a reconnect starts no earlier than its share of -reconnect-spread and
// only for a subscriber that had a connection.
func (st *storm) connectAll(ctx context.Context, resume bool, start time.Time) {
	var next atomic.Int64
	var wg sync.WaitGroup
	n := len(st.subs)
	for range min(st.cfg.connConc, max(n, 1)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				s := &st.subs[i]
				if !resume {
					s.id, s.ch, s.last = i, i%st.cfg.channels, -1
				} else if s.conn == nil {
					continue
				}
				if resume && st.cfg.spread > 0 {
					sleepCtx(ctx, time.Until(start.Add(st.cfg.spread*time.Duration(i)/time.Duration(n))))
				}
				if err := st.connect(ctx, s, resume); err != nil {
					s.conn = nil
					st.mu.Lock()
					st.connErrs[err.Error()]++
					st.mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}

// connect opens s's connection and subscribes (a resume: with its old
// socket id, token and position); the reader answers the rest.
func (st *storm) connect(ctx context.Context, s *stormSub, resume bool) error {
	ctx, cancel := context.WithTimeout(ctx, st.cfg.connTimout)
	defer cancel()
	sub := map[string]any{"channel": st.channelName(s.ch), "recovery": map[string]string{}}
	if resume {
		sub["recovery"] = map[string]string{"socket_id": s.socketID, "token": s.token, "position": s.position}
		s.pending = "" // announced on the old connection, whose event never came
		s.cut.Store(false)
		s.dialNs.Store(time.Now().UnixNano())
	}
	subscribe, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": sub})
	host := st.hostOf(s.id)
	dial := func(ctx context.Context) (net.Conn, error) { return st.dial(ctx, host) }
	conn, err := dialRaw(ctx, dial, host, st.wsPath, st.cfg.readBuf, maxMessage)
	if err != nil {
		return plainErr(err)
	}
	s.conn, s.done = conn, make(chan struct{})
	subscribed := make(chan error, 1)
	go st.readLoop(s, conn, subscribe, resume, subscribed)
	select {
	case err = <-subscribed:
	case <-ctx.Done():
		err = fmt.Errorf("not subscribed within %v", st.cfg.connTimout)
	}
	if err != nil {
		s.cut.Store(true)
		conn.Close()
		<-s.done
	}
	return err
}

// readLoop is the client of one connection: it subscribes once the
// connection is established, keeps the plugin's state and checks the
// events until the connection ends.
func (st *storm) readLoop(s *stormSub, conn wsConn, subscribe []byte, resume bool, subscribed chan<- error) {
	defer close(s.done)
	told := false
	tell := func(err error) {
		if !told {
			told = true
			subscribed <- err
		}
	}
	// Any message of the channel after pusher_internal:position makes its
	// id the position, as the plugin does.
	commit := func() {
		if s.pending != "" {
			s.position, s.pending = s.pending, ""
		}
	}
	for {
		msg, err := conn.ReadMessage()
		if err != nil {
			if !s.cut.Load() && !st.stopped.Load() {
				st.mu.Lock()
				st.closedBy[closeCode(err)]++
				st.mu.Unlock()
			}
			tell(fmt.Errorf("before subscribed: %s: %w", closeCode(err), plainErr(err)))
			return
		}
		if name, ok := eventName(msg); ok && string(name) == st.cfg.event {
			if i := indexMarker(msg); i >= 0 {
				commit()
				st.deliver(s, msg[i:])
				continue
			}
		}
		var f frame
		if json.Unmarshal(msg, &f) != nil {
			s.bad.Add(1)
			continue
		}
		var d struct {
			SocketID string `json:"socket_id"`
			Token    string `json:"token"`
			Position string `json:"position"`
			ID       string `json:"id"`
			Excluded bool   `json:"excluded"`
			Replayed int    `json:"replayed"`
			Reason   string `json:"reason"`
			Code     *int   `json:"code"`
		}
		_ = json.Unmarshal([]byte(f.dataString()), &d)
		switch f.Event {
		case "pusher:connection_established":
			s.socketID = d.SocketID
			if err := conn.WriteText(subscribe); err != nil {
				tell(err)
				return
			}
		case "pusher_internal:subscription_succeeded":
			s.resuming = resume
			s.replayedSeen = 0
			tell(nil)
		case "pusher_internal:recovery":
			s.token, s.position, s.pending = d.Token, d.Position, ""
			s.tokens.Add(1)
		case "pusher_internal:position":
			if d.Excluded {
				s.position = d.ID
			} else {
				s.pending = d.ID
			}
		case "pusher:recovered", "pusher:recovery_failed":
			commit()
			st.mu.Lock()
			if f.Event == "pusher:recovered" {
				st.recovered++
				st.replayed += int64(d.Replayed)
				if d.Replayed != s.replayedSeen {
					st.mismatch++
				}
			} else {
				st.failed[d.Reason]++
			}
			st.mu.Unlock()
			s.resuming = false
			s.outcomeNs.Store(time.Now().UnixNano())
		case "pusher:ping":
			_ = conn.WriteText(pongFrame)
		case "pusher:error", "pusher:subscription_error":
			code := "none"
			if d.Code != nil {
				code = strconv.Itoa(*d.Code)
			}
			st.mu.Lock()
			st.pusherErrors[f.Event+" "+code]++
			st.mu.Unlock()
			tell(fmt.Errorf("%s %s", f.Event, f.dataString()))
		case st.cfg.event:
			commit()
			if data, ok := strings.CutPrefix(f.dataString(), "hl:"); ok {
				st.deliver(s, []byte(data))
			} else {
				s.bad.Add(1)
			}
		default:
			if f.Channel != "" {
				commit()
				s.other.Add(1)
			}
		}
	}
}

// indexMarker returns where the seq of an event frame's data begins, after
// "hl:, or -1.
func indexMarker(msg []byte) int {
	if i := bytes.Index(msg, marker); i >= 0 {
		return i + len(marker)
	}
	return -1
}

// deliver checks one event whose data, after "hl:", is p.
func (st *storm) deliver(s *stormSub, p []byte) {
	seq, _, ok := parseUint(p, ':')
	if !ok || seq >= 1<<32 {
		s.bad.Add(1)
		return
	}
	if !s.seen.add(seq) {
		s.dups.Add(1)
		return
	}
	if int64(seq) < s.last {
		s.disorder.Add(1)
	}
	s.last = max(s.last, int64(seq))
	if s.resuming {
		s.replayedSeen++
	}
	s.unique.Add(1)
}

// cutAll resets every connection at once (32 goroutines) and waits for the
// readers.
func (st *storm) cutAll() {
	var wg sync.WaitGroup
	const cutters = 32
	for w := range cutters {
		wg.Go(func() {
			for i := w; i < len(st.subs); i += cutters {
				if s := &st.subs[i]; s.conn != nil {
					s.cut.Store(true)
					s.conn.Abort()
				}
			}
		})
	}
	wg.Wait()
	for i := range st.subs {
		if s := &st.subs[i]; s.conn != nil {
			<-s.done
		}
	}
}

// closeAll ends the run's connections.
func (st *storm) closeAll() {
	st.stopped.Store(true)
	st.cutAll()
}

// connected is the subscribers with a connection.
func (st *storm) connected() int {
	n := 0
	for i := range st.subs {
		if st.subs[i].conn != nil {
			n++
		}
	}
	return n
}

// publishes is the events the API accepted so far.
func (st *storm) publishes() int64 {
	var n int64
	for i := range st.chans {
		n += st.chans[i].ok.Load()
	}
	return n
}

// publish sends -rate events per second round-robin over the channels from
// -publishers goroutines until stopPub, each channel's one at a time.
func (st *storm) publish(ctx context.Context) {
	cfg := st.cfg
	client := &http.Client{
		Timeout: cfg.pubTimeout,
		Transport: &http.Transport{
			MaxIdleConns: 2 * cfg.publishers, MaxIdleConnsPerHost: 2 * cfg.publishers,
			DisableCompression: true, IdleConnTimeout: time.Minute,
		},
	}
	defer client.CloseIdleConnections()
	path := "/apps/" + cfg.appID + "/events"
	var interval time.Duration
	if cfg.rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.rate)
	}
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.publishers {
		wg.Go(func() {
			for ctx.Err() == nil && !st.stopPub.Load() {
				i := next.Add(1) - 1
				if interval > 0 {
					sleepCtx(ctx, time.Until(start.Add(time.Duration(i)*interval)))
				}
				if st.stopPub.Load() {
					return
				}
				ch := &st.chans[i%int64(cfg.channels)]
				ch.mu.Lock()
				seq := ch.next
				ch.next++
				body, _ := json.Marshal(map[string]string{
					"name": cfg.event, "channel": st.channelName(int(i % int64(cfg.channels))),
					"data": "hl:" + strconv.FormatInt(seq, 10) + ":" + strconv.FormatInt(time.Now().UnixNano(), 10),
				})
				err := st.send(ctx, client, path, body)
				if err == nil {
					ch.accepted.add(uint64(seq))
					ch.ok.Add(1)
				}
				ch.mu.Unlock()
				if err != nil {
					st.pubErrCount.Add(1)
					st.mu.Lock()
					st.pubErrs[err.Error()]++
					st.mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}

// collect compares what each subscriber got with what its channel's API
// calls were accepted.
func (st *storm) collect() {
	res := st.res
	for i := range st.subs {
		s := &st.subs[i]
		if s.tokens.Load() == 0 {
			continue // never subscribed
		}
		acc := st.chans[s.ch].accepted
		var gaps, extra int64
		for w := range max(len(acc), len(s.seen)) {
			var a, g uint64
			if w < len(acc) {
				a = acc[w]
			}
			if w < len(s.seen) {
				g = s.seen[w]
			}
			gaps += int64(bits.OnesCount64(a &^ g))
			extra += int64(bits.OnesCount64(g &^ a))
		}
		res.Expected += st.chans[s.ch].ok.Load()
		res.Received += s.unique.Load()
		res.Gaps += gaps
		res.Unexpected += extra
		if gaps > 0 {
			res.SubsWithGaps++
		}
		res.Duplicates += s.dups.Load()
		res.OutOfOrder += s.disorder.Load()
		res.BadFrames += s.bad.Load()
		res.OtherFrames += s.other.Load()
	}
	res.Publishes = st.publishes()
	res.PublishErrors = st.pubErrCount.Load()
	st.mu.Lock()
	defer st.mu.Unlock()
	_, res.PublishErrorSamples = sampleErrors(st.pubErrs)
	res.Recovered, res.Replayed, res.ReplayedMismatch = st.recovered, st.replayed, st.mismatch
	for k, v := range st.failed {
		res.RecoveryFailed[k] = v
	}
	for k, v := range st.closedBy {
		res.ClosedByServer[k] = v
	}
	if len(st.pusherErrors) > 0 {
		res.PusherErrors = st.pusherErrors
	}
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func (r *stormResult) writeJSON(w io.Writer) error {
	c := *r
	for _, f := range []*float64{&c.ConnectSeconds, &c.CutSeconds, &c.ReconnectStartS, &c.ResubscribedAllS, &c.RecoveredAllS, &c.DrainedS,
		&c.SteadyServerCPUPct, &c.StormServerCPUPct, &c.StormToolCPUPct, &c.StormOtherCPUPct} {
		*f = round(*f, 3)
	}
	for _, f := range []*float64{&c.RecoverP50Ms, &c.RecoverP99Ms, &c.RecoverMaxMs} {
		*f = round(*f, 1)
	}
	b, err := json.Marshal(&c)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func mib(kib int64) string {
	if kib < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", float64(kib)/1024)
}

// writeTable prints the figures for people.
func (r *stormResult) writeTable(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, "  "+format+"\n", args...) }
	fmt.Fprintf(w, "herald-load (recovery storm, %d CPUs, load average %s before, %s after)\n", r.CPUs, r.LoadAvg, r.LoadAvgEnd)
	p("subscribers     %d / %d over %d channels in %.2f s, %d with a recovery token", r.Connected, r.Subs, r.Channels, r.ConnectSeconds, r.Tokens)
	for _, e := range r.ConnectErrorSamples {
		p("                %s", e)
	}
	p("publishes       %d ok, %d errors at %g/s: %d before the cut, %d while away", r.Publishes, r.PublishErrors, r.Rate, r.PublishesBeforeCut, r.PublishesWhileAway)
	for _, e := range r.PublishErrorSamples {
		p("                %s", e)
	}
	p("cut             every connection reset in %.2f s; reconnecting from %.2f s after the cut (spread %g s)", r.CutSeconds, r.ReconnectStartS, r.SpreadS)
	p("resubscribed    %d, the last %.2f s after the cut", r.Reconnected, r.ResubscribedAllS)
	for _, e := range r.ReconnectErrors {
		p("                %s", e)
	}
	p("recovered       %d (replayed %d events), failed %s, replayed count wrong %d", r.Recovered, r.Replayed, counts(r.RecoveryFailed), r.ReplayedMismatch)
	p("outcome         the last %.2f s after the cut; a reconnect to its outcome p50 %.0f ms  p99 %.0f ms  max %.0f ms", r.RecoveredAllS, r.RecoverP50Ms, r.RecoverP99Ms, r.RecoverMaxMs)
	p("events          %d of %d expected: %d gaps (%d subscribers), %d duplicates, %d out of order, %d unexpected, %d bad",
		r.Received, r.Expected, r.Gaps, r.SubsWithGaps, r.Duplicates, r.OutOfOrder, r.Unexpected, r.BadFrames)
	p("other frames    %d (subscription_count and the like)", r.OtherFrames)
	p("server RSS      start %s, connect peak %s, steady peak %s, storm peak %s, tail peak %s, end %s; VmHWM %s",
		mib(r.RSSStartKiB), mib(r.RSSConnectKiB), mib(r.RSSSteadyKiB), mib(r.RSSStormKiB), mib(r.RSSTailKiB), mib(r.RSSEndKiB), mib(r.HWMKiB))
	p("CPU             server %s steady, %s in the storm (tool %s, rest of machine %s), of one core", pct(r.SteadyServerCPUPct), pct(r.StormServerCPUPct), pct(r.StormToolCPUPct), pct(r.StormOtherCPUPct))
	p("closed by server %s", counts(r.ClosedByServer))
	if len(r.PusherErrors) > 0 {
		p("pusher errors   %s", counts(r.PusherErrors))
	}
}
