// Command herald-load is the load tool of Herald's benchmarks: it opens N
// Pusher-protocol (version 7) subscribers spread over C channels, publishes
// through the signed HTTP API at a fixed rate or as fast as possible, and
// reports connect rate, server RSS per connection, publishes and deliveries
// per second, lost deliveries, end-to-end latency and the CPU share of the
// tool next to the server's, as one line of JSON on stdout and a table on
// stderr.
//
//	herald-load -url ws://127.0.0.1:8080 -key KEY -app-id ID -secret SECRET \
//	    -subs 10000 -channels 1 -rate 20 -duration 10s -server-pid PID
//	herald-load -idle -subs 10000 -url ... -key ... -server-pid PID
//	herald-load -storm -subs 10000 -channels 100 -rate 100 -url ... (recovery storm, storm.go)
//
// Several tools can share one broadcast (more connections than one process
// may open, or subscribers on several cluster nodes): listeners connect with
// -listen N -ready-file F and wait for N events per channel, which one tool
// started after every F exists publishes with -events N.
//
// With -protocol centrifugo the same run measures Centrifugo, the peer of
// the cluster benchmarks (centrifugo.go): subscribers speak its JSON client
// protocol on /connection/websocket and publishes go to its HTTP API with
// -api-key, one publication a request as Herald's triggers.
//
//	herald-load -protocol centrifugo -url ws://127.0.0.1:8000 -api-key KEY \
//	    -subs 1500 -channels 1 -rate 0 -duration 10s -server-pid PID
//
// Each event's data is "hl:<seq>:<send unix nanos>[:padding]", where seq
// counts the events of its channel, so every subscriber computes the latency
// from the moment the publisher sent the HTTP request and which events of its
// channel it missed or saw twice. Expected deliveries are the events the API
// accepted (200) on a channel times the subscribers of that channel; lost is
// what did not arrive after a drain wait.
//
// Subscribers connect from several loopback source addresses (127.0.0.1 to
// 127.0.0.<-sources>) when the server is on loopback, so N can go past the
// ~28,000 ephemeral ports of one address; the tool raises its own
// RLIMIT_NOFILE to the hard limit, and the server needs enough too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type config struct {
	wsURL      *url.URL   // the first of wsURLs: where publishes go unless -http-url says otherwise
	wsURLs     []*url.URL // the nodes subscribers are spread over
	httpURL    string
	protocol   string // pusher or centrifugo
	key        string
	apiKey     string // Centrifugo's HTTP API key
	appID      string
	secret     string
	subs       int
	channels   int
	prefix     string
	event      string
	connConc   int
	connTimout time.Duration
	sources    int
	client     string
	readBuf    int

	idle       bool
	hold       time.Duration
	settle     time.Duration
	rate       float64
	publishers int
	duration   time.Duration
	payload    int
	drain      time.Duration
	drainIdle  time.Duration
	pubTimeout time.Duration
	events     int
	listen     int
	readyFile  string

	storm    bool
	cutAfter time.Duration
	cutFor   time.Duration
	spread   time.Duration
	tail     time.Duration

	serverPIDs []int
	quiet      bool
	cpuProfile string
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("herald-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	wsURL := fs.String("url", "ws://127.0.0.1:8080", "WebSocket base URL of the server (ws://host:port), or several, comma-separated, to spread each channel's subscribers over the nodes of a cluster")
	fs.StringVar(&c.httpURL, "http-url", "", "HTTP API base URL (default: -url with http://)")
	fs.StringVar(&c.protocol, "protocol", protoPusher, "protocol of the server: pusher (Herald, Pusher's protocol 7 and signed HTTP triggers) or centrifugo (Centrifugo's JSON client protocol and server HTTP API)")
	fs.StringVar(&c.key, "key", "", "app key (required with -protocol pusher)")
	fs.StringVar(&c.apiKey, "api-key", "", "-protocol centrifugo: the server HTTP API's key, sent as X-API-Key (required to publish)")
	fs.StringVar(&c.appID, "app-id", "", "app id (required unless -idle)")
	fs.StringVar(&c.secret, "secret", "", "app secret (required unless -idle)")
	fs.IntVar(&c.subs, "subs", 10000, "number of subscribers (one connection each)")
	fs.IntVar(&c.channels, "channels", 1, "channels the subscribers are spread over (round-robin)")
	fs.StringVar(&c.prefix, "channel-prefix", "load-", "channel names are <prefix><index>")
	fs.StringVar(&c.event, "event", "load", "event name of the published events")
	fs.IntVar(&c.connConc, "connect-concurrency", 200, "connections being opened at once")
	fs.DurationVar(&c.connTimout, "connect-timeout", 15*time.Second, "limit for one connection to be subscribed")
	fs.IntVar(&c.sources, "sources", 8, "loopback source addresses 127.0.0.1..127.0.0.N to connect from (loopback servers only; 0 = kernel's choice)")
	fs.StringVar(&c.client, "client", "raw", "WebSocket client: raw (minimal, lean) or coder (github.com/coder/websocket)")
	fs.IntVar(&c.readBuf, "read-buffer", 4096, "read buffer per connection (raw client)")
	fs.BoolVar(&c.idle, "idle", false, "only connect and subscribe, measure RSS per connection, hold, no publishing")
	fs.DurationVar(&c.hold, "hold", 5*time.Second, "how long -idle holds the connections")
	fs.DurationVar(&c.settle, "settle", time.Second, "wait after the last connection before measuring RSS")
	fs.Float64Var(&c.rate, "rate", 20, "events per second over all channels (0 = as fast as possible)")
	fs.IntVar(&c.publishers, "publishers", 4, "concurrent HTTP publishers")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to publish")
	fs.IntVar(&c.payload, "payload", 0, "pad each event's data to this many bytes")
	fs.DurationVar(&c.drain, "drain", 15*time.Second, "longest wait for outstanding deliveries after publishing")
	fs.DurationVar(&c.drainIdle, "drain-idle", 2*time.Second, "stop draining after this long without a delivery")
	fs.DurationVar(&c.pubTimeout, "publish-timeout", 10*time.Second, "limit of one HTTP publish")
	fs.IntVar(&c.events, "events", 0, "publish at most this many events in all (0 = as many as -rate and -duration give)")
	fs.IntVar(&c.listen, "listen", 0, "publish nothing: wait for this many events per channel from another herald-load (same -event and channels; the wait is bounded by -drain, and -drain-idle after the first)")
	fs.StringVar(&c.readyFile, "ready-file", "", "create this file once every subscriber is connected, before publishing, holding or listening")
	fs.BoolVar(&c.storm, "storm", false, "recovery storm: subscribe recoverably, publish at -rate, reset every connection at once after -cut-after, reconnect and resume after -cut-for, publish for -tail more; checks every event arrives once and in order (raw client)")
	fs.DurationVar(&c.cutAfter, "cut-after", 5*time.Second, "-storm: publishing before the cut")
	fs.DurationVar(&c.cutFor, "cut-for", 3*time.Second, "-storm: from the cut to the first reconnect, publishing on")
	fs.DurationVar(&c.spread, "reconnect-spread", 0, "-storm: spread the reconnects' starts over this long (0: all at once, -connect-concurrency at a time)")
	fs.DurationVar(&c.tail, "tail", 5*time.Second, "-storm: publishing after every resume's outcome")
	serverPIDs := fs.String("server-pid", "", "server process for RSS and CPU, or several, comma-separated, whose figures are summed (a cluster's nodes and its Redis) (default: the process listening on the first -url's port, if it can be found)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write the tool's own CPU profile to this file")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress lines and no table, only the JSON line")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	for _, raw := range strings.Split(*wsURL, ",") {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "ws" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("-url must be ws://host:port, or several comma-separated, got %q", raw)
		}
		u.Scheme = "ws"
		c.wsURLs = append(c.wsURLs, u)
	}
	c.wsURL = c.wsURLs[0]
	if c.httpURL == "" {
		c.httpURL = "http://" + c.wsURL.Host
	}
	if *serverPIDs != "" {
		for _, f := range strings.Split(*serverPIDs, ",") {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 0 {
				return nil, fmt.Errorf("-server-pid must be process ids, comma-separated, got %q", *serverPIDs)
			}
			c.serverPIDs = append(c.serverPIDs, pid)
		}
	}
	c.httpURL = strings.TrimRight(c.httpURL, "/")
	publishes := !c.idle && c.listen == 0
	switch {
	case c.protocol != protoPusher && c.protocol != protoCentrifugo:
		return nil, errors.New("-protocol must be pusher or centrifugo")
	case c.protocol == protoCentrifugo && c.storm:
		return nil, errors.New("-storm speaks only -protocol pusher")
	case c.protocol == protoCentrifugo && publishes && c.apiKey == "":
		return nil, errors.New("-api-key is required to publish to Centrifugo (or use -idle or -listen)")
	case c.protocol == protoPusher && c.key == "":
		return nil, errors.New("-key is required")
	case c.protocol == protoPusher && publishes && (c.appID == "" || c.secret == ""):
		return nil, errors.New("-app-id and -secret are required to publish (or use -idle or -listen)")
	case c.subs < 0 || c.channels < 1 || c.connConc < 1 || c.publishers < 1 || c.rate < 0 || c.events < 0 || c.listen < 0:
		return nil, errors.New("-subs, -events and -listen must be ≥ 0, -channels, -connect-concurrency and -publishers ≥ 1, -rate ≥ 0")
	case c.listen > 0 && c.idle:
		return nil, errors.New("-listen and -idle exclude each other")
	case c.storm && (c.idle || c.listen > 0 || c.client != "raw"):
		return nil, errors.New("-storm excludes -idle and -listen and needs -client raw")
	case c.client != "raw" && c.client != "coder":
		return nil, errors.New("-client must be raw or coder")
	case c.readBuf < 256:
		return nil, errors.New("-read-buffer must be at least 256")
	}
	return &c, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "herald-load:", err)
		os.Exit(2)
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "herald-load:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	// An interrupted run still reports what it measured, then fails.
	var rep report
	if cfg.storm {
		var res *stormResult
		if res, err = runStorm(ctx, cfg, os.Stderr); res != nil {
			rep = res
		}
	} else {
		var res *result
		if res, err = run(ctx, cfg, os.Stderr); res != nil {
			rep = res
		}
	}
	if rep != nil {
		if !cfg.quiet {
			rep.writeTable(os.Stderr)
		}
		err = errors.Join(err, rep.writeJSON(os.Stdout))
	}
	pprof.StopCPUProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "herald-load:", err)
		os.Exit(1)
	}
}

// report is what a run measured: a table for people, a JSON line for scripts.
type report interface {
	writeTable(w io.Writer)
	writeJSON(w io.Writer) error
}

// serverProc is findServerPID's pid (the first of -server-pid's), and
// every pid measured, comma-separated, as proc.go's functions take them
// ("" without one); why there is none goes to log.
func (c *config) serverProc(log io.Writer) (int, string) {
	if len(c.serverPIDs) > 0 {
		ids := make([]string, len(c.serverPIDs))
		for i, p := range c.serverPIDs {
			ids[i] = strconv.Itoa(p)
		}
		return c.serverPIDs[0], strings.Join(ids, ",")
	}
	pid, why := c.findServerPID()
	if why != "" {
		fmt.Fprintln(log, "herald-load:", why)
	}
	if pid <= 0 {
		return pid, ""
	}
	return pid, strconv.Itoa(pid)
}

// findServerPID returns the pid listening on the first URL's port when the
// server is local and can be found, or 0.
func (c *config) findServerPID() (int, string) {
	host, portStr, err := net.SplitHostPort(c.wsURL.Host)
	if err != nil {
		return 0, "no port in -url; pass -server-pid for RSS and CPU"
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0, "server is not local; RSS and server CPU are not measured"
	}
	port, _ := strconv.Atoi(portStr)
	pid, err := listenerPID(port)
	if err != nil {
		return 0, err.Error()
	}
	return pid, ""
}
