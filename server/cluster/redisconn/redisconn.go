// Package redisconn builds cluster mode's Redis clients from
// HERALD_REDIS_URL, in each of its forms:
//
//   - redis://[user:password@]host:port[/db] or rediss://… (TLS): one Redis;
//   - several of those, comma-separated: a list of shards, one Redis each;
//   - redis-sentinel://[:password@]host:port[,host:port…]/<master>: a
//     primary the Sentinels watch (Sentinel);
//   - redis-cluster://[:password@]host:port[,host:port…]: some nodes of a
//     Redis Cluster (seeds), whose client learns the rest.
//
// Parse reads the URL into shards, each one Redis connection's settings,
// without connecting; Check asks the Sentinels or the Redis Cluster whether
// the settings can work; Client builds the client, with the timeouts every
// client shares (one place: quick), and a watch that notices another
// server behind the address (watch). Log routes the Redis client's own
// lines to zap. No message of the package shows any part of a password
// (Redact, and the errors of Parse).
//
// What the cluster does over these connections (a member on one, a
// router over several) is server/cluster's.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/internal/text"
)

// The schemes of the forms whose commas separate hosts, not shards.
const (
	sentinelScheme = "redis-sentinel://"
	clusterScheme  = "redis-cluster://"
)

// Kind is the kind of Redis a shard's URL names.
type Kind int

const (
	// Single is one Redis: a redis:// or rediss:// URL.
	Single Kind = iota
	// Sentinel is a Sentinel-managed primary: a redis-sentinel:// URL.
	Sentinel
	// Cluster is a Redis Cluster: a redis-cluster:// URL.
	Cluster
)

// Shard is one Redis connection's settings: one URL of HERALD_REDIS_URL.
type Shard struct {
	Kind Kind
	// URL is the shard's URL as given, password and all: Redact shows it.
	URL string

	single   *redis.Options         // Single
	failover *redis.FailoverOptions // Sentinel
	cluster  *redis.ClusterOptions  // Cluster
}

// Parse reads HERALD_REDIS_URL (raw) and HERALD_REDIS_CA_FILE (caFile, a
// PEM file of CAs trusted for rediss:// beside the system's roots; empty
// for none) into the shards they name: one for redis-sentinel:// or
// redis-cluster://, one per URL of a comma-separated list. It does not
// connect. Errors name the setting, and the shard when there are several,
// and never show any part of a password.
func Parse(raw, caFile string) ([]Shard, error) {
	switch {
	case strings.HasPrefix(raw, sentinelScheme):
		// Its commas separate Sentinels, not shards.
		if strings.Contains(raw[len(sentinelScheme):], "://") {
			return nil, errMixedSentinel
		}
		if caFile != "" {
			return nil, errors.New("HERALD_REDIS_CA_FILE needs a rediss:// HERALD_REDIS_URL: Sentinel is reached without TLS")
		}
		fo, err := sentinelOptions(raw)
		if err != nil {
			return nil, err
		}
		return []Shard{{Kind: Sentinel, URL: raw, failover: fo}}, nil
	case strings.HasPrefix(raw, clusterScheme):
		// Its commas separate seed nodes, not shards.
		if strings.Contains(raw[len(clusterScheme):], "://") {
			return nil, errMixedCluster
		}
		co, err := clusterOptions(raw)
		if err != nil {
			return nil, err
		}
		if caFile != "" {
			return nil, errors.New("HERALD_REDIS_CA_FILE needs a rediss:// HERALD_REDIS_URL: a Redis Cluster is reached without TLS")
		}
		return []Shard{{Kind: Cluster, URL: raw, cluster: co}}, nil
	}
	urls, err := shardURLs(raw)
	if err != nil {
		return nil, err
	}
	shards := make([]Shard, len(urls))
	for i, u := range urls {
		o, err := singleOptions(u, caFile, i, len(urls))
		if err != nil {
			return nil, err
		}
		shards[i] = Shard{Kind: Single, URL: u, single: o}
	}
	return shards, nil
}

var (
	errMixedSentinel = errors.New("HERALD_REDIS_URL: a redis-sentinel:// URL cannot be mixed with other URLs (shards over Sentinel are not supported)")
	errMixedCluster  = errors.New("HERALD_REDIS_URL: a redis-cluster:// URL cannot be mixed with other URLs (it is one Redis Cluster, its shards Herald's own)")
)

// shardURLs splits a list of redis:// and rediss:// URLs.
func shardURLs(raw string) ([]string, error) {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if strings.HasPrefix(p, sentinelScheme) {
			return nil, errMixedSentinel
		}
		if strings.HasPrefix(p, clusterScheme) {
			return nil, errMixedCluster
		}
		what := "the URL"
		if len(parts) > 1 {
			what = fmt.Sprintf("shard %d of %d", i+1, len(parts))
		}
		if !strings.HasPrefix(p, "redis://") && !strings.HasPrefix(p, "rediss://") {
			if p == "" {
				return nil, fmt.Errorf("HERALD_REDIS_URL: %s is empty", what)
			}
			if !strings.Contains(p, "://") {
				// Not a URL: most likely the rest of a password cut at its
				// comma, which nothing of may be shown.
				return nil, fmt.Errorf("HERALD_REDIS_URL: %s must be a redis:// or rediss:// URL (a comma in a password is written %%2C)", what)
			}
			return nil, fmt.Errorf("HERALD_REDIS_URL: %s (%s) must be a redis:// or rediss:// URL", what, text.RedactURL(p))
		}
		if text.UserInfoMisread(p) {
			// The parser would take a part of the password for the host,
			// the port, the database or an option, and show it in its
			// errors, Herald in its logs and the client in its own.
			return nil, fmt.Errorf("HERALD_REDIS_URL: %s cannot be read whole (an @ after its host, or a port without a host): a password holding / ? # or , is written percent-encoded (%%2F %%3F %%23 %%2C) and followed by @host:port", what)
		}
		parts[i] = p
	}
	return parts, nil
}

// singleOptions are the client's options of a redis:// or rediss:// URL,
// the shard index of count.
func singleOptions(raw, caFile string, index, count int) (*redis.Options, error) {
	o, err := redis.ParseURL(raw)
	if err != nil {
		where := "HERALD_REDIS_URL"
		if count > 1 {
			where = fmt.Sprintf("HERALD_REDIS_URL, shard %d of %d", index+1, count)
		}
		return nil, fmt.Errorf("%s: %w", where, text.URLError(raw, err))
	}
	if o.TLSConfig != nil {
		// rediss://: go-redis verifies the certificate against the host of
		// the URL (ServerName); never below TLS 1.2.
		o.TLSConfig.MinVersion = max(o.TLSConfig.MinVersion, tls.VersionTLS12)
	}
	if caFile != "" {
		if o.TLSConfig == nil {
			return nil, errors.New("HERALD_REDIS_CA_FILE needs a rediss:// HERALD_REDIS_URL: it is the CA of Redis's TLS certificate")
		}
		roots, err := roots(caFile)
		if err != nil {
			return nil, fmt.Errorf("HERALD_REDIS_CA_FILE: %w", err)
		}
		o.TLSConfig.RootCAs = roots
	}
	quick(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.DialerRetries)
	return o, nil
}

// quick sets a client's timeouts, the same for every client: a trigger
// waits on Redis, and an unreachable Redis must turn into a 503 quickly
// rather than a hung request. One dial a try: the library dials up to five
// times a try by default, so a try at a Redis whose packets are dropped
// took 10 s, not 2.
func quick(dial, read, write *time.Duration, retries, dialsATry *int) {
	*dial, *read, *write = 2*time.Second, 2*time.Second, 2*time.Second
	*retries, *dialsATry = 1, 1
}

// roots returns the system's roots (Mozilla's when the system has none)
// with the certificates of the PEM file caFile added: the roots of the
// connection to Redis alone, so that other outbound TLS keeps trusting the
// system's roots only.
func roots(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	return roots, nil
}

// sentinelOptions parses a redis-sentinel:// URL into the failover
// client's options. The password is the primary's; the Sentinels are
// asked without one.
func sentinelOptions(raw string) (*redis.FailoverOptions, error) {
	bad := func(why string) error { return fmt.Errorf("HERALD_REDIS_URL: %s", why) }
	rest := strings.TrimPrefix(raw, sentinelScheme)
	hosts, master, ok := strings.Cut(rest, "/")
	// A master name with an @ is the rest of a password holding a /, cut
	// there: it is refused without being shown.
	if !ok || master == "" || strings.ContainsAny(master, "/@") {
		return nil, bad("a redis-sentinel:// URL ends with /<master name>: redis-sentinel://[:password@]host:port[,host:port…]/<master>")
	}
	if strings.ContainsAny(master, "?#") {
		return nil, bad("a redis-sentinel:// URL takes no query or fragment")
	}
	password, addrs, err := seedHosts(hosts, sentinelScheme, "a Sentinel's")
	if err != nil {
		return nil, err
	}
	fo := &redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs, Password: password}
	quick(&fo.DialTimeout, &fo.ReadTimeout, &fo.WriteTimeout, &fo.MaxRetries, &fo.DialerRetries)
	return fo, nil
}

// clusterOptions parses a redis-cluster:// URL into the cluster client's
// options.
func clusterOptions(raw string) (*redis.ClusterOptions, error) {
	rest := strings.TrimSuffix(strings.TrimPrefix(raw, clusterScheme), "/")
	if strings.ContainsAny(rest, "/?#") {
		return nil, errors.New("HERALD_REDIS_URL: a redis-cluster:// URL is redis-cluster://[:password@]host:port[,host:port…], without a path, query or fragment")
	}
	password, addrs, err := seedHosts(rest, clusterScheme, "a Redis Cluster node's")
	if err != nil {
		return nil, err
	}
	co := &redis.ClusterOptions{Addrs: addrs, Password: password}
	quick(&co.DialTimeout, &co.ReadTimeout, &co.WriteTimeout, &co.MaxRetries, &co.DialerRetries)
	return co, nil
}

// seedHosts splits the "[:password@]host:port[,host:port…]" of a
// redis-sentinel:// or redis-cluster:// URL. Errors name the setting and
// never print any part of the password; what names the hosts in them.
func seedHosts(s, scheme, what string) (password string, addrs []string, err error) {
	userInfo := false
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		user, pw, _ := strings.Cut(s[:at], ":")
		if user != "" {
			return "", nil, fmt.Errorf("HERALD_REDIS_URL: a %s URL takes a password only (%s:password@…), not a user name", scheme, scheme)
		}
		password, s, userInfo = pw, s[at+1:], true
	}
	hosts := strings.Split(s, ",")
	for i, h := range hosts {
		host, port, err := net.SplitHostPort(strings.TrimSpace(h))
		if err == nil && host != "" && port != "" {
			addrs = append(addrs, net.JoinHostPort(host, port))
			continue
		}
		if userInfo {
			// After the last @: a host, never a part of the password.
			return "", nil, fmt.Errorf("HERALD_REDIS_URL: %q is not %s host:port", h, what)
		}
		// With no @, ":secret" may be a password whose host was
		// forgotten: it is named by its place only.
		return "", nil, fmt.Errorf("HERALD_REDIS_URL: host %d of %d is not %s host:port (a password comes first: %s:password@host:port)", i+1, len(hosts), what, scheme)
	}
	return password, addrs, nil
}

// Check asks a Sentinel group whether it knows the primary, or a Redis
// Cluster whether it serves every slot: the start stops when the first
// that answers says no. None answering is an outage, not a bad setting
// (the node starts outside the cluster and joins when they answer, as
// with one Redis), and one Redis has nothing to check.
func (s Shard) Check() error {
	switch s.Kind {
	case Sentinel:
		return checkSentinels(s.failover)
	case Cluster:
		return checkClusterSlots(s.cluster)
	}
	return nil
}

// checkSentinels asks the Sentinels, in turn, for the primary's address.
func checkSentinels(fo *redis.FailoverOptions) error {
	for _, addr := range fo.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := sc.GetMasterAddrByName(ctx, fo.MasterName).Result()
		cancel()
		sc.Close()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, redis.Nil) || redis.HasErrorPrefix(err, "IDONTKNOW"):
			return fmt.Errorf("HERALD_REDIS_URL: the Sentinel at %s does not know a master named %q", addr, fo.MasterName)
		}
		if !unreachable(err) {
			return fmt.Errorf("HERALD_REDIS_URL: the Sentinel at %s: %v", addr, err)
		}
	}
	return nil
}

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// checkClusterSlots asks the seeds, in turn, whether the Redis Cluster
// serves every slot (or is a Redis Cluster at all).
func checkClusterSlots(co *redis.ClusterOptions) error {
	for _, addr := range co.Addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Password: co.Password, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := rdb.ClusterInfo(ctx).Result()
		cancel()
		rdb.Close()
		switch {
		case unreachable(err):
			continue
		case err != nil:
			return fmt.Errorf("HERALD_REDIS_URL: the Redis Cluster node at %s: %v", addr, err)
		}
		fields := make(map[string]string)
		for _, line := range strings.Split(info, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				fields[k] = v
			}
		}
		assigned, _ := strconv.Atoi(fields["cluster_slots_assigned"])
		if fields["cluster_state"] != "ok" || assigned < ClusterSlots {
			return fmt.Errorf("HERALD_REDIS_URL: the Redis Cluster of the node at %s serves %d of the %d slots (cluster_state:%s): every slot must be served before Herald starts on it",
				addr, assigned, ClusterSlots, fields["cluster_state"])
		}
		return nil
	}
	return nil
}

// unreachable reports an error of a server that did not answer.
func unreachable(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded)
}

// ClientOptions are what a client adds to its shard's settings.
type ClientOptions struct {
	// OnNewServer, when set, is called when a new connection finds another
	// Redis server behind the shard than the last one did (watch): one
	// Redis or a Sentinel's primary; a Redis Cluster's client has none.
	OnNewServer func(runID, was string)
}

// Client returns the shard's client: a *redis.Client for one Redis or a
// Sentinel's primary (a failover client), a *redis.ClusterClient for a
// Redis Cluster. It connects at its first command.
func (s Shard) Client(o ClientOptions) redis.UniversalClient {
	var onConnect func(context.Context, *redis.Conn) error
	if o.OnNewServer != nil {
		onConnect = (&watch{onNew: o.OnNewServer}).onConnect
	}
	switch s.Kind {
	case Sentinel:
		fo := *s.failover
		fo.OnConnect = onConnect
		return redis.NewFailoverClient(&fo)
	case Cluster:
		co := *s.cluster
		return redis.NewClusterClient(&co)
	}
	ro := *s.single
	ro.OnConnect = onConnect
	return redis.NewClient(&ro)
}

// watch notices that another Redis server than before answers: each new
// connection asks the server's run_id, and a run_id that differs from the
// last one seen means a failover behind one address (a managed Redis, a
// proxy or a DNS name moved to the promoted replica), a Sentinel's switch
// to a new primary, or a restart. That may come with no outage the node
// sees: the client's retry takes a closed connection's command to the new
// server at once. Yet the new server may lack the old one's last writes,
// which the node must know (it publishes its last messages again).
type watch struct {
	mu    sync.Mutex
	runID string // the last one seen; empty before the first connection
	onNew func(runID, was string)
}

// onConnect is the client's OnConnect hook. It never fails the
// connection: a server that refuses INFO (an ACL, a renamed command)
// leaves the node's outages as all there is to go by.
func (w *watch) onConnect(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return nil
	}
	// A FailoverClient's connections to the Sentinels run this hook too:
	// their run_ids are not the primary's.
	if InfoValue(info, "redis_mode") == "sentinel" {
		return nil
	}
	id := InfoValue(info, "run_id")
	w.mu.Lock()
	before := w.runID
	w.runID = id
	w.mu.Unlock()
	if before != "" && before != id {
		w.onNew(id, before)
	}
	return nil
}

// InfoValue is the value of key in the text of an INFO reply ("key:value"
// lines), empty when it is not there.
func InfoValue(info, key string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// KeySlot is the Redis Cluster hash slot of a key without a hash tag (or
// of a tag): CRC16 (XMODEM) modulo ClusterSlots.
func KeySlot(key string) uint16 {
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % ClusterSlots
}

// seeds reports a redis-sentinel:// or redis-cluster:// URL, whose commas
// separate hosts, not shards.
func seeds(raw string) bool {
	return strings.HasPrefix(raw, sentinelScheme) || strings.HasPrefix(raw, clusterScheme)
}

// Redact is one Redis URL as it may be shown: without its password (and,
// for redis:// and rediss://, its query), as text.RedactURL shows a URL;
// the Go URL parser takes no list of hosts.
func Redact(raw string) string {
	if !seeds(raw) {
		return text.RedactURL(raw)
	}
	scheme, rest, _ := strings.Cut(raw, "://")
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = rest[at+1:]
	}
	return scheme + "://" + rest
}

// RedactAll is HERALD_REDIS_URL as the node logs it at start: its URLs,
// each as Redact shows it.
func RedactAll(raw string) []string {
	if seeds(raw) {
		return []string{Redact(raw)}
	}
	var shown []string
	for _, u := range strings.Split(raw, ",") {
		shown = append(shown, Redact(strings.TrimSpace(u)))
	}
	return shown
}

// The Redis client logs with the standard library's logger, to stderr, in
// its own format, once per failed attempt (a dial retried while Redis is
// down, say). Herald logs with zap only: the client's lines go to the
// newest logger Log was given, at debug level — the node reports an
// outage itself, once, at error level.
var logger atomic.Pointer[zap.Logger]

// useLog points the Redis client's logger, one for the whole process, at
// printer, the first time it is called: so a process that builds no
// client keeps the library's default.
var useLog = sync.OnceFunc(func() { redis.SetLogger(printer{}) })

// Log sends the Redis client's lines to l, at debug level, until release
// is called (unless another Log came since: the newest wins). Call it
// before building a client.
func Log(l *zap.Logger) (release func()) {
	useLog()
	logger.Store(l)
	return func() { logger.CompareAndSwap(l, nil) }
}

type printer struct{}

func (printer) Printf(_ context.Context, format string, v ...any) {
	if l := logger.Load(); l != nil && l.Core().Enabled(zap.DebugLevel) {
		l.Debug(fmt.Sprintf(format, v...))
	}
}
