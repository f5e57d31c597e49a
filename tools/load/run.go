package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/server/clientauth"
)

// maxMessage is the largest server message a subscriber accepts.
const maxMessage = 1 << 20

// subscriber is one connection subscribed to one channel. Its counters are
// written by its reader goroutine and read by the reporter.
type subscriber struct {
	id   int
	ch   int
	conn wsConn

	unique atomic.Int64 // distinct events of its channel received
	dups   atomic.Int64 // events received again
	bad    atomic.Int64 // event frames whose data could not be parsed
	other  atomic.Int64 // other frames after subscribing (subscription_count, …)
	lastNs atomic.Int64 // when the last event arrived
	seen   seqSet       // the seqs received; reader only
}

// runner holds the state of one run.
type runner struct {
	cfg     *config
	log     io.Writer
	wsPath  string
	dials   []*net.Dialer
	next    atomic.Uint64
	coder   *http.Client
	subs    []subscriber
	hist    histogram
	connH   histogram // dial to subscription_succeeded, µs
	shakeH  histogram // dial to the end of the HTTP upgrade, µs
	pubH    histogram // one HTTP publish, µs
	stopped atomic.Bool
	readers sync.WaitGroup

	mu           sync.Mutex
	closedBy     map[string]int // close code → subscribers the server closed
	pusherErrors map[string]int // pusher:error code → count
	connErrs     map[string]int
	pubErrs      map[string]int

	okPerChannel []atomic.Int64
	pubErrCount  atomic.Int64
}

func run(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	res := &result{
		Mode: "publish", Client: cfg.client, Protocol: cfg.protocol, Subs: cfg.subs, Channels: cfg.channels, CPUs: runtime.NumCPU(),
		ClosedByServer: map[string]int{}, RSSBeforeKiB: -1, RSSAfterKiB: -1, RSSEndKiB: -1, RSSPerConnKiB: -1,
	}
	switch {
	case cfg.idle:
		res.Mode = "idle"
	case cfg.listen > 0:
		res.Mode = "listen"
	}
	if cfg.quiet {
		log = io.Discard
	}
	r := newRunner(cfg, log, res)
	r.subs = make([]subscriber, cfg.subs)
	r.okPerChannel = make([]atomic.Int64, cfg.channels)
	r.setupDialers(res)
	if cfg.client == "coder" {
		r.coder = &http.Client{Transport: &http.Transport{
			DialContext:       func(ctx context.Context, _, addr string) (net.Conn, error) { return r.dial(ctx, addr) },
			DisableKeepAlives: true,
		}}
	}

	pid, spid := cfg.serverProc(log)
	res.ServerPID = pid
	if pid > 0 {
		if v, err := rssKiB(spid); err == nil {
			res.RSSBeforeKiB = v
		} else {
			fmt.Fprintln(log, "herald-load: server RSS:", err)
		}
	}

	// Connect.
	t0 := time.Now()
	toolCPU, srvCPU, sysCPU := startCPU("self", t0.UnixNano()), startCPU(spid, t0.UnixNano()), startCPU("system", t0.UnixNano())
	r.connectAll(ctx)
	t1 := time.Now()
	res.ConnectToolCPUPct, res.ConnectServerCPUPct = toolCPU.pct(t1.UnixNano()), srvCPU.pct(t1.UnixNano())
	res.ConnectOtherCPUPct = otherCPU(sysCPU.pct(t1.UnixNano()), res.ConnectToolCPUPct, res.ConnectServerCPUPct)
	for i := range r.subs {
		if r.subs[i].conn != nil {
			res.Connected++
		}
	}
	res.ConnectSeconds = t1.Sub(t0).Seconds()
	if res.ConnectSeconds > 0 {
		res.ConnectRate = float64(res.Connected) / res.ConnectSeconds
	}
	res.ConnectServerUsPerConn = -1
	if res.ConnectServerCPUPct >= 0 && res.Connected > 0 {
		res.ConnectServerUsPerConn = res.ConnectServerCPUPct / 100 * res.ConnectSeconds * 1e6 / float64(res.Connected)
	}
	_, q, maxUS := r.connH.summary(0.5, 0.99)
	res.ConnectP50Ms, res.ConnectP99Ms, res.ConnectMaxMs = q[0]/1000, q[1]/1000, float64(maxUS)/1000
	_, q, _ = r.shakeH.summary(0.5, 0.99)
	res.HandshakeP50Ms, res.HandshakeP99Ms = q[0]/1000, q[1]/1000
	r.mu.Lock()
	res.ConnectErrors, res.ConnectErrorSamples = sampleErrors(r.connErrs)
	r.mu.Unlock()
	fmt.Fprintf(log, "connected %d/%d in %.2fs (%.0f/s), %d errors\n", res.Connected, cfg.subs, res.ConnectSeconds, res.ConnectRate, res.ConnectErrors)

	sleepCtx(ctx, cfg.settle)
	if cfg.readyFile != "" {
		if err := os.WriteFile(cfg.readyFile, nil, 0o644); err != nil {
			return res, fmt.Errorf("-ready-file: %w", err)
		}
	}
	if spid != "" {
		if v, err := rssKiB(spid); err == nil {
			res.RSSAfterKiB = v
			if res.RSSBeforeKiB >= 0 && res.Connected > 0 {
				res.RSSPerConnKiB = float64(v-res.RSSBeforeKiB) / float64(res.Connected)
			}
		}
	}

	t2 := time.Now()
	toolCPU, srvCPU, sysCPU = startCPU("self", t2.UnixNano()), startCPU(spid, t2.UnixNano()), startCPU("system", t2.UnixNano())
	var srvEach []cpuMeter
	if strings.Contains(spid, ",") {
		for _, p := range strings.Split(spid, ",") {
			srvEach = append(srvEach, startCPU(p, t2.UnixNano()))
		}
	}
	switch {
	case cfg.idle:
		sleepCtx(ctx, cfg.hold)
	case cfg.listen > 0:
		for i := range r.okPerChannel {
			r.okPerChannel[i].Store(int64(cfg.listen))
		}
		r.waitFirst(ctx)
		r.drain(ctx)
	default:
		r.publish(ctx, res)
		r.drain(ctx)
	}
	t3 := time.Now()
	res.ToolCPUPct, res.ServerCPUPct = toolCPU.pct(t3.UnixNano()), srvCPU.pct(t3.UnixNano())
	for _, m := range srvEach {
		res.ServerCPUPctEach = append(res.ServerCPUPctEach, m.pct(t3.UnixNano()))
	}
	res.OtherCPUPct = otherCPU(sysCPU.pct(t3.UnixNano()), res.ToolCPUPct, res.ServerCPUPct)
	res.PhaseSeconds = t3.Sub(t2).Seconds()
	if spid != "" {
		if v, err := rssKiB(spid); err == nil {
			res.RSSEndKiB = v
		}
	}
	if v, err := rssKiB("self"); err == nil {
		res.ToolRSSKiB = v
	}

	r.collect(res, t2)
	res.ServerUsPerDelivery = -1
	if res.ServerCPUPct >= 0 && res.Received > 0 {
		res.ServerUsPerDelivery = res.ServerCPUPct / 100 * res.PhaseSeconds * 1e6 / float64(res.Received)
	}
	r.closeAll()
	return res, ctx.Err()
}

// newRunner raises the open-file limit (into res.NoFileLimit) and returns
// a runner of cfg with no subscribers yet.
func newRunner(cfg *config, log io.Writer, res *result) *runner {
	lim, err := raiseNoFile()
	if err != nil {
		fmt.Fprintln(log, "herald-load: cannot raise RLIMIT_NOFILE:", err)
	}
	res.NoFileLimit = lim
	if lim > 0 && uint64(cfg.subs)+64 > lim {
		fmt.Fprintf(log, "herald-load: warning: RLIMIT_NOFILE %d is below -subs %d; raise the hard limit (ulimit -Hn)\n", lim, cfg.subs)
	}
	wsPath := strings.TrimRight(cfg.wsURL.EscapedPath(), "/") + "/app/" + cfg.key + "?protocol=7&client=herald-load&version=1.0"
	if cfg.protocol == protoCentrifugo {
		wsPath = strings.TrimRight(cfg.wsURL.EscapedPath(), "/") + centrifugoWSPath
	}
	return &runner{
		cfg: cfg, log: log,
		wsPath:       wsPath,
		closedBy:     map[string]int{},
		pusherErrors: map[string]int{},
		connErrs:     map[string]int{},
		pubErrs:      map[string]int{},
	}
}

// plainErr drops the addresses and URLs from network errors, so the same
// failure on many connections is counted under one message (a URL carries a
// fresh signature, an address a fresh port).
func plainErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, plainErr(ue.Err))
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return fmt.Errorf("%s: %w", oe.Op, oe.Err)
	}
	return err
}

// otherCPU is the machine's busy CPU not spent in the tool or the server:
// other processes, and interrupt work (loopback networking) not charged to
// either. High values mean the figures are disturbed.
func otherCPU(system, tool, server float64) float64 {
	if system < 0 || tool < 0 || server < 0 {
		return -1
	}
	return max(system-tool-server, 0)
}

func (r *runner) setupDialers(res *result) {
	n := r.cfg.sources
	host, _, _ := net.SplitHostPort(r.cfg.wsURL.Host)
	ip := net.ParseIP(host)
	if host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	if n < 1 || ip == nil || ip.To4() == nil || !ip.IsLoopback() {
		r.dials = []*net.Dialer{{}}
		return
	}
	for i := 1; i <= n && i < 255; i++ {
		r.dials = append(r.dials, &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(i))}})
	}
	res.Sources = len(r.dials)
}

// dial opens a TCP connection to host from the next source address.
func (r *runner) dial(ctx context.Context, host string) (net.Conn, error) {
	d := r.dials[r.next.Add(1)%uint64(len(r.dials))]
	return d.DialContext(ctx, "tcp", host)
}

// hostOf is the node subscriber i connects to: each channel's subscribers
// go round the nodes (the k-th subscriber of a channel to node k mod n),
// as a load balancer spreads a channel's users over a cluster.
func (r *runner) hostOf(i int) string {
	urls := r.cfg.wsURLs
	return urls[(i/r.cfg.channels)%len(urls)].Host
}

func (r *runner) channelName(ch int) string { return r.cfg.prefix + strconv.Itoa(ch) }

// connectAll opens every subscriber with at most -connect-concurrency
// handshakes in flight and starts a reader for each one that subscribed.
func (r *runner) connectAll(ctx context.Context) {
	var next atomic.Int64
	var done atomic.Int64
	stopProgress := make(chan struct{})
	// The progress line shares r.log with the caller, which writes to it
	// once this returns: wait for the printer to stop first.
	var progress sync.WaitGroup
	progress.Go(func() {
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-tk.C:
				fmt.Fprintf(r.log, "connecting: %d/%d\n", done.Load(), r.cfg.subs)
			}
		}
	})
	var wg sync.WaitGroup
	for range min(r.cfg.connConc, max(r.cfg.subs, 1)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= r.cfg.subs {
					return
				}
				s := &r.subs[i]
				s.id, s.ch = i, i%r.cfg.channels
				if err := r.connect(ctx, s); err != nil {
					r.mu.Lock()
					r.connErrs[err.Error()]++
					r.mu.Unlock()
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(stopProgress)
	progress.Wait()
}

type frame struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
}

// dataString is the frame's data as a string: the JSON string decoded, or
// the raw JSON when it is not a string.
func (f *frame) dataString() string {
	var s string
	if json.Unmarshal(f.Data, &s) == nil {
		return s
	}
	return string(f.Data)
}

var pongFrame = []byte(`{"event":"pusher:pong","data":{}}`)

func (r *runner) connect(ctx context.Context, s *subscriber) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.connTimout)
	defer cancel()
	began := time.Now()
	var conn wsConn
	var err error
	if r.coder != nil {
		conn, err = dialCoder(ctx, r.coder, "ws://"+r.hostOf(s.id)+r.wsPath, maxMessage)
	} else {
		host := r.hostOf(s.id)
		dial := func(ctx context.Context) (net.Conn, error) { return r.dial(ctx, host) }
		conn, err = dialRaw(ctx, dial, host, r.wsPath, r.cfg.readBuf, maxMessage)
	}
	if err != nil {
		return plainErr(err)
	}
	r.shakeH.record(s.id, uint64(time.Since(began)/time.Microsecond))
	// The handshake is done; the rest of the subscribe phase is bounded by
	// closing the connection when the context ends.
	stop := context.AfterFunc(ctx, conn.Close)
	defer stop()
	fail := func(err error) error {
		conn.Close()
		if ctx.Err() != nil {
			return fmt.Errorf("not subscribed within %v", r.cfg.connTimout)
		}
		return err
	}
	subscribe := subscribePusher
	if r.cfg.protocol == protoCentrifugo {
		subscribe = subscribeCentrifugo
	}
	if err := subscribe(conn, r.channelName(s.ch)); err != nil {
		return fail(err)
	}
	if !stop() {
		conn.Close()
		return fmt.Errorf("not subscribed within %v", r.cfg.connTimout)
	}
	r.connH.record(s.id, uint64(time.Since(began)/time.Microsecond))
	s.conn = conn
	r.readers.Add(1)
	go r.readLoop(s)
	return nil
}

// subscribePusher subscribes conn to channel once the connection is
// established, answering pings on the way.
func subscribePusher(conn wsConn, name string) error {
	established := false
	for {
		msg, err := conn.ReadMessage()
		if err != nil {
			return fmt.Errorf("before subscribed: %s: %w", closeCode(err), plainErr(err))
		}
		var f frame
		if err := json.Unmarshal(msg, &f); err != nil {
			return fmt.Errorf("bad frame: %v", err)
		}
		switch f.Event {
		case "pusher:connection_established":
			established = true
			sub, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{"channel": name}})
			if err := conn.WriteText(sub); err != nil {
				return err
			}
		case "pusher_internal:subscription_succeeded":
			if f.Channel == name && established {
				return nil
			}
		case "pusher:subscription_error", "pusher:error":
			return fmt.Errorf("%s %s", f.Event, f.dataString())
		case "pusher:ping":
			if err := conn.WriteText(pongFrame); err != nil {
				return err
			}
		}
	}
}

var (
	marker      = []byte(`"hl:`)
	eventPrefix = []byte(`{"event":"`)
)

// eventName returns the event name of a frame that starts with {"event":"
// and whose name has no escapes, the way Herald writes frames; otherwise ok
// is false and the frame must be decoded.
func eventName(msg []byte) (name []byte, ok bool) {
	if !bytes.HasPrefix(msg, eventPrefix) {
		return nil, false
	}
	rest := msg[len(eventPrefix):]
	i := bytes.IndexByte(rest, '"')
	if i < 0 || bytes.IndexByte(rest[:i], '\\') >= 0 {
		return nil, false
	}
	return rest[:i], true
}

// readLoop receives until the connection ends. Frames take a fast path that
// neither decodes JSON nor allocates unless they need an answer.
func (r *runner) readLoop(s *subscriber) {
	defer r.readers.Done()
	handle := r.pusherFrame
	if r.cfg.protocol == protoCentrifugo {
		handle = r.centrifugoFrame
	}
	for {
		msg, err := s.conn.ReadMessage()
		if err != nil {
			if !r.stopped.Load() {
				code := closeCode(err)
				r.mu.Lock()
				r.closedBy[code]++
				r.mu.Unlock()
			}
			return
		}
		handle(s, msg, time.Now().UnixNano())
	}
}

// pusherFrame handles one frame of Pusher's protocol that arrived at now.
func (r *runner) pusherFrame(s *subscriber, msg []byte, now int64) {
	if name, ok := eventName(msg); ok {
		switch {
		case string(name) == r.cfg.event:
			if i := bytes.Index(msg, marker); i >= 0 {
				r.deliver(s, msg[i+len(marker):], now)
				return
			}
		case string(name) != "pusher:ping" && string(name) != "pusher:error":
			s.other.Add(1) // subscription_count and the like
			return
		}
	}
	var f frame
	if json.Unmarshal(msg, &f) != nil {
		s.bad.Add(1)
		return
	}
	switch f.Event {
	case r.cfg.event:
		if d, ok := strings.CutPrefix(f.dataString(), "hl:"); ok {
			r.deliver(s, []byte(d), now)
		} else {
			s.bad.Add(1)
		}
	case "pusher:ping":
		_ = s.conn.WriteText(pongFrame)
	case "pusher:error":
		var e struct {
			Code *int `json:"code"`
		}
		_ = json.Unmarshal([]byte(f.dataString()), &e)
		code := "none"
		if e.Code != nil {
			code = strconv.Itoa(*e.Code)
		}
		r.countError(code)
	}
}

// countError counts an error the server sent a subscriber: a pusher:error's
// code, or the code of an error in a Centrifugo reply.
func (r *runner) countError(code string) {
	r.mu.Lock()
	r.pusherErrors[code]++
	r.mu.Unlock()
}

// deliver records one event whose data, after the "hl:" prefix, starts at p:
// "<seq>:<unix nanos>" followed by ':' (padding) or '"'.
func (r *runner) deliver(s *subscriber, p []byte, now int64) {
	seq, p, ok1 := parseUint(p, ':')
	sent, _, ok2 := parseUint(p, 0)
	if !ok1 || !ok2 || seq >= 1<<32 {
		s.bad.Add(1)
		return
	}
	if !s.seen.add(seq) {
		s.dups.Add(1)
		return
	}
	s.unique.Add(1)
	s.lastNs.Store(now)
	lat := max(now-int64(sent), 0)
	r.hist.record(s.id, uint64(lat)/1000)
}

// seqSet is a bitset of sequence numbers.
type seqSet []uint64

// add puts seq in the set and reports whether it was not in it already.
func (b *seqSet) add(seq uint64) bool {
	w, bit := int(seq>>6), uint64(1)<<(seq&63)
	if w >= len(*b) {
		*b = append(*b, make([]uint64, w+1-len(*b))...)
	}
	if (*b)[w]&bit != 0 {
		return false
	}
	(*b)[w] |= bit
	return true
}

// parseUint reads decimal digits from p up to the first non-digit, which must
// be end (or anything, when end is 0). It returns the value and the rest
// after that byte.
func parseUint(p []byte, end byte) (uint64, []byte, bool) {
	var v uint64
	i := 0
	for ; i < len(p) && p[i] >= '0' && p[i] <= '9'; i++ {
		v = v*10 + uint64(p[i]-'0')
	}
	if i == 0 || i > 19 || (end != 0 && (i == len(p) || p[i] != end)) {
		return 0, nil, false
	}
	if end != 0 {
		i++
	}
	return v, p[i:], true
}

// publish runs -publishers goroutines that send -rate events per second (or
// as many as they can) for -duration, round-robin over the channels.
func (r *runner) publish(ctx context.Context, res *result) {
	cfg := r.cfg
	res.Rate, res.Publishers, res.DurationS = cfg.rate, cfg.publishers, cfg.duration.Seconds()
	client := &http.Client{
		Timeout: cfg.pubTimeout,
		Transport: &http.Transport{
			MaxIdleConns:        2 * cfg.publishers,
			MaxIdleConnsPerHost: 2 * cfg.publishers,
			DisableCompression:  true,
			IdleConnTimeout:     time.Minute,
		},
	}
	defer client.CloseIdleConnections()
	path := "/apps/" + cfg.appID + "/events"
	evName, _ := json.Marshal(cfg.event)
	head := append(append([]byte(`{"name":`), evName...), `,"channel":`...)
	send := r.send
	if cfg.protocol == protoCentrifugo {
		// One publication a request, as a trigger carries one event.
		path, head, send = centrifugoPublishPath, []byte(`{"channel":`), r.sendCentrifugo
	}
	chNames := make([][]byte, cfg.channels)
	for i := range chNames {
		chNames[i], _ = json.Marshal(r.channelName(i))
	}
	var interval time.Duration
	if cfg.rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.rate)
	}
	var next atomic.Int64
	start := time.Now()
	end := start.Add(cfg.duration)
	var wg sync.WaitGroup
	for range cfg.publishers {
		wg.Go(func() {
			var body []byte
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if cfg.events > 0 && i >= int64(cfg.events) {
					return
				}
				if interval > 0 {
					at := start.Add(time.Duration(i) * interval)
					if !at.Before(end) {
						return
					}
					if d := time.Until(at); d > 0 {
						sleepCtx(ctx, d)
					}
				}
				// Publishers that fell behind the schedule stop at the end
				// too; publishes_per_s then shows the rate achieved.
				if !time.Now().Before(end) {
					return
				}
				ch := int(i % int64(cfg.channels))
				seq := i / int64(cfg.channels)
				body = append(body[:0], head...)
				body = append(body, chNames[ch]...)
				body = append(body, `,"data":"`...)
				data := len(body)
				body = append(body, "hl:"...)
				body = strconv.AppendInt(body, seq, 10)
				body = append(body, ':')
				body = strconv.AppendInt(body, time.Now().UnixNano(), 10)
				if pad := cfg.payload - (len(body) - data); pad > 1 {
					body = append(body, ':')
					for range pad - 1 {
						body = append(body, 'x')
					}
				}
				body = append(body, `"}`...)
				sent := time.Now()
				err := send(ctx, client, path, body)
				r.pubH.record(int(i), uint64(time.Since(sent)/time.Microsecond))
				if err != nil {
					r.pubErrCount.Add(1)
					r.mu.Lock()
					r.pubErrs[err.Error()]++
					r.mu.Unlock()
					continue
				}
				r.okPerChannel[ch].Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := max(time.Since(start), cfg.duration).Seconds() // the schedule spans -duration
	for i := range r.okPerChannel {
		res.Publishes += r.okPerChannel[i].Load()
	}
	res.PublishErrors = r.pubErrCount.Load()
	r.mu.Lock()
	_, res.PublishErrorSamples = sampleErrors(r.pubErrs)
	r.mu.Unlock()
	res.PublishSeconds = elapsed
	_, q, maxUS := r.pubH.summary(0.5, 0.99)
	res.PublishP50Ms, res.PublishP99Ms, res.PublishMaxMs = q[0]/1000, q[1]/1000, float64(maxUS)/1000
	if elapsed > 0 {
		res.PublishesPerS = float64(res.Publishes) / elapsed
	}
}

func (r *runner) send(ctx context.Context, client *http.Client, path string, body []byte) error {
	q := clientauth.SignQuery(http.MethodPost, path, nil, body, r.cfg.key, r.cfg.secret, time.Now())
	_, err := post(ctx, client, r.cfg.httpURL+path+"?"+q, body, nil)
	return err
}

// post sends a JSON body with the header's fields and returns the start
// of the response, or an error unless the status is 200.
func post(ctx context.Context, client *http.Client, url string, body []byte, header map[string]string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, plainErr(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d %s", resp.StatusCode, bytes.TrimSpace(msg[:min(len(msg), 200)]))
	}
	return msg, nil
}

// expected is the deliveries the accepted publishes owe the subscribers.
func (r *runner) expected() (exp, got int64) {
	for i := range r.subs {
		s := &r.subs[i]
		if s.conn == nil {
			continue
		}
		exp += r.okPerChannel[s.ch].Load()
		got += s.unique.Load()
	}
	return exp, got
}

// waitFirst waits, up to -drain, for the first delivery of a publish by
// another tool (-listen).
func (r *runner) waitFirst(ctx context.Context) {
	deadline := time.Now().Add(r.cfg.drain)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if _, got := r.expected(); got > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drain waits until every expected delivery arrived, no delivery arrived for
// -drain-idle, or -drain passed.
func (r *runner) drain(ctx context.Context) {
	start := time.Now()
	last, lastAt := int64(-1), start
	for ctx.Err() == nil {
		exp, got := r.expected()
		if got >= exp {
			return
		}
		now := time.Now()
		if got != last {
			last, lastAt = got, now
		}
		if now.Sub(lastAt) >= r.cfg.drainIdle || now.Sub(start) >= r.cfg.drain {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// collect fills in the delivery figures.
func (r *runner) collect(res *result, publishStart time.Time) {
	var lastNs int64
	for i := range r.subs {
		s := &r.subs[i]
		if s.conn == nil {
			continue
		}
		exp, got := r.okPerChannel[s.ch].Load(), s.unique.Load()
		res.Expected += exp
		res.Received += got
		res.Lost += max(exp-got, 0)
		res.Unexpected += max(got-exp, 0)
		if exp > got {
			res.SubsWithLoss++
		}
		res.Duplicates += s.dups.Load()
		res.BadFrames += s.bad.Load()
		res.OtherFrames += s.other.Load()
		lastNs = max(lastNs, s.lastNs.Load())
	}
	if lastNs > publishStart.UnixNano() {
		res.DeliveriesPerS = float64(res.Received) / (float64(lastNs-publishStart.UnixNano()) / 1e9)
	}
	n, q, maxUS := r.hist.summary(0.5, 0.9, 0.99)
	res.LatencySamples = n
	res.LatencyP50Ms, res.LatencyP90Ms, res.LatencyP99Ms = q[0]/1000, q[1]/1000, q[2]/1000
	res.LatencyMaxMs = float64(maxUS) / 1000
	r.mu.Lock()
	for code, n := range r.closedBy {
		res.ClosedByServer[code] = n
		res.ClosedByServerTotal += n
	}
	if len(r.pusherErrors) > 0 {
		res.PusherErrors = maps.Clone(r.pusherErrors)
	}
	r.mu.Unlock()
}

// closeAll closes every subscriber and waits (briefly) for the readers.
func (r *runner) closeAll() {
	r.stopped.Store(true)
	var wg sync.WaitGroup
	const closers = 32
	for w := range closers {
		wg.Go(func() {
			for i := w; i < len(r.subs); i += closers {
				if c := r.subs[i].conn; c != nil {
					c.Close()
				}
			}
		})
	}
	wg.Wait()
	done := make(chan struct{})
	go func() { r.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// sampleErrors returns the total count and up to five messages with counts.
func sampleErrors(m map[string]int) (int, []string) {
	total := 0
	keys := make([]string, 0, len(m))
	for k, n := range m {
		total += n
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return m[b] - m[a] })
	var out []string
	for _, k := range keys[:min(len(keys), 5)] {
		out = append(out, fmt.Sprintf("%d× %s", m[k], k))
	}
	return total, out
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
