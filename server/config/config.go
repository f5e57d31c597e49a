// Package config reads Herald's settings from flags, HERALD_* environment
// variables and an optional TOML file (a flag wins over its variable, a
// variable over the file), lists them for --help (Vars), and builds the
// logger.
package config

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/heraldrt/herald/server/internal/text"
)

// Config is everything `herald serve` needs. Every field names its variable;
// the defaults and help are in Vars.
type Config struct {
	Addr      string // HERALD_ADDR, --addr: listen address (port 0 picks a free port)
	DB        string // HERALD_DB, --db: SQLite file, or a postgres:// URL
	LogFormat string // HERALD_LOG_FORMAT: json or console
	LogLevel  string // HERALD_LOG_LEVEL: debug, info, warn, error

	// Built-in TLS: both or neither. With them, HERALD_ADDR serves https and
	// wss, and the pair is reloaded on SIGHUP and when the files change.
	TLSCertFile string // HERALD_TLS_CERT_FILE: PEM certificate chain
	TLSKeyFile  string // HERALD_TLS_KEY_FILE: PEM private key

	// The default Channels app, created or updated at start when AppID is set.
	AppID         string // HERALD_APP_ID
	AppKey        string // HERALD_APP_KEY
	AppSecret     string // HERALD_APP_SECRET
	AppWebhookURL string // HERALD_APP_WEBHOOK_URL: webhook endpoint for every event kind
	// AppHistoryEvents (HERALD_APP_HISTORY_EVENTS) is the app's channel
	// history length when set (0 turns history off); nil leaves the stored
	// setting alone.
	AppHistoryEvents *int
	AppHistoryTTL    time.Duration // HERALD_APP_HISTORY_TTL: the app's history age limit; 0 leaves it alone
	// AppRecoveryWindow (HERALD_APP_RECOVERY_WINDOW) is how long a client
	// of the app may be away and still recover what it missed, when set (0
	// turns recovery off); nil leaves the stored setting alone.
	AppRecoveryWindow *time.Duration
	// AppPushInstance (HERALD_APP_PUSH_INSTANCE) is the Push instance the
	// app is linked to, for push_if_offline; "none" unlinks it, empty
	// leaves the stored link alone.
	AppPushInstance string

	// The default Push instance, created or updated at start when InstanceID is set.
	InstanceID        string // HERALD_INSTANCE_ID (a UUID)
	InstanceSecretKey string // HERALD_INSTANCE_SECRET_KEY

	// Gateway credentials of the default instance.
	APNsKeyFile           string // HERALD_APNS_KEY_FILE: .p8 key
	APNsKeyID             string // HERALD_APNS_KEY_ID
	APNsTeamID            string // HERALD_APNS_TEAM_ID
	APNsTopic             string // HERALD_APNS_TOPIC
	APNsURL               string // HERALD_APNS_URL: empty means https://api.push.apple.com
	APNsCAFile            string // HERALD_APNS_CA_FILE: extra CA to trust
	FCMServiceAccountFile string // HERALD_FCM_SERVICE_ACCOUNT_FILE
	FCMURL                string // HERALD_FCM_URL: empty means https://fcm.googleapis.com
	VAPIDSubject          string // HERALD_VAPID_SUBJECT: mailto: or https: URI

	// WebSocket tuning.
	ActivityTimeout time.Duration // HERALD_ACTIVITY_TIMEOUT: idle time before the server pings a client; 0 means 120s
	PongTimeout     time.Duration // HERALD_PONG_TIMEOUT: time a pinged client has to answer; 0 means 30s

	// Operations.
	MetricsAddr string // HERALD_METRICS_ADDR: when set, GET /metrics is served on this address only, not on Addr; default empty (served on Addr)
	AdminToken  string // HERALD_ADMIN_TOKEN: bearer token of the admin API (/admin/v1) and the console (/console); default empty, which disables both (404)

	// Hardening: what strangers may send and reach (README, Security).
	WebPushAllowedHosts []string      // HERALD_WEBPUSH_ALLOWED_HOSTS: host names or IPs, each optionally with :port, whose Web Push endpoints may be private or plain http; default none
	WebhookBlockPrivate bool          // HERALD_WEBHOOK_ALLOW_PRIVATE=false sets it: webhook URLs may not reach loopback, private or link-local addresses; default false (allowed)
	WebhookMaxQueued    int           // HERALD_WEBHOOK_MAX_QUEUED: webhook requests queued per app before the oldest are dropped; 0 means 10000
	AnonRateLimit       float64       // HERALD_ANON_RATE_LIMIT: requests per second per client IP on the anonymous Device and Reporting APIs; 0 turns the limit off
	ConnectRateLimit    float64       // HERALD_WS_CONNECT_RATE_LIMIT: new WebSocket connections and HTTP fallback sessions per second per client IP; 0 is off (users behind one NAT share an address)
	MaxSubscriptions    int           // HERALD_MAX_SUBSCRIPTIONS_PER_APP: channel subscriptions an app may hold over all its connections; 0 is no cap
	TrustedProxies      []string      // HERALD_TRUSTED_PROXIES: IPs or CIDRs of proxies whose X-Forwarded-For is believed; default none
	BodyReadTimeout     time.Duration // HERALD_HTTP_READ_TIMEOUT: time to read a request's headers and body (not the WebSocket upgrade); 0 means 30s
	WriteTimeout        time.Duration // HERALD_HTTP_WRITE_TIMEOUT: time to write a response (not WebSockets or the console's stream); 0 means 30s

	// Cluster (README, Running a cluster).
	RedisURL string // HERALD_REDIS_URL: redis:// or rediss:// URL, a comma-separated list of them (shards), a redis-sentinel:// or a redis-cluster:// URL; set, the node joins the cluster of nodes sharing that Redis
	NodeID   string // HERALD_NODE_ID: the node's id in the cluster, unique among its nodes; default random at each start
	// RedisCAFile (HERALD_REDIS_CA_FILE) is a PEM file of CA certificates
	// trusted, besides the system's roots, for the rediss:// connection to
	// Redis only (SSL_CERT_FILE would replace the roots of every outbound
	// TLS connection: APNs, FCM, webhooks). Only with a rediss:// RedisURL.
	RedisCAFile string
	// PushLease (HERALD_PUSH_LEASE) is how long a page of a publish's
	// targets stays the node's sending it without renewal: how soon, on a
	// shared PostgreSQL database, another node takes over a dead one's
	// pages. 0 means 30s.
	PushLease time.Duration

	// Idempotent publishing (README, Idempotent publishing).
	IdempotencyTTL     time.Duration // HERALD_IDEMPOTENCY_TTL: how long an Idempotency-Key is remembered; 0 means 24h
	IdempotencyMaxKeys int           // HERALD_IDEMPOTENCY_MAX_KEYS: keys kept per app and per instance; 0 means 10000
	// IdempotencyMaxBytes (HERALD_IDEMPOTENCY_MAX_BYTES) is what the kept
	// keys of an app or instance may cost (idempotency.KeyCost); 0 means
	// 32 MiB.
	IdempotencyMaxBytes int

	// Channel history (README, Channel history): bounds per app.
	HistoryMaxBytes    int // HERALD_HISTORY_MAX_BYTES: what an app's history may cost (eventlog.Limits); 0 means 16 MiB
	HistoryMaxChannels int // HERALD_HISTORY_MAX_CHANNELS: channels with history kept per app; 0 means 10000

	// Warnings are what the loading noticed and let pass (a configuration
	// file others can read), for the caller to log once it has a logger.
	Warnings []string
}

// Defaults.
const (
	DefaultAddr          = "127.0.0.1:8080"
	DefaultDB            = "./herald.db"
	DefaultAnonRateLimit = 50 // requests/s per IP: a Beams SDK makes a few per device and minute, so many devices can share a NAT
)

// Load parses the flags of `herald serve` in args over the environment given
// by getenv, over the configuration file (--config, else HERALD_CONFIG),
// over the defaults of Vars. --help writes the flags and every setting to
// stderr and returns flag.ErrHelp.
func Load(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	return LoadCommand("serve", args, getenv, stderr)
}

// LoadCommand is Load for another command that takes serve's flags and
// settings (herald healthcheck); cmd names it in the usage.
func LoadCommand(cmd string, args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	// The flags come first: --help must work whatever the environment holds,
	// and --config names the file the settings are read from.
	fs := flag.NewFlagSet("herald "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	flagAddr := fs.String("addr", "", "listen address (HERALD_ADDR, default "+DefaultAddr+")")
	flagDB := fs.String("db", "", "SQLite database file or postgres:// URL (HERALD_DB, default "+DefaultDB+")")
	flagConfig := fs.String("config", "", "TOML configuration file (HERALD_CONFIG)")
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "usage: herald %s [--addr ADDR] [--db FILE] [--config FILE]\n\nFlags:\n", cmd)
		fs.PrintDefaults()
		fmt.Fprintln(out)
		WriteEnvHelp(out)
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("%s takes no arguments, got %q", cmd, fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	path := getenv("HERALD_CONFIG")
	if set["config"] {
		path = *flagConfig
	}
	getenv, err := WithFile(getenv, path)
	if err != nil {
		return Config{}, err
	}
	var warnings []string
	if path != "" {
		if info, err := os.Stat(path); err == nil && info.Mode().Perm()&0o004 != 0 {
			warnings = append(warnings, fmt.Sprintf("configuration file %s has mode %04o: anyone on the machine can read the secrets it may hold (admin token, app secrets, database password); chmod o-r it", path, info.Mode().Perm()))
		}
	}
	// env is a setting's value: the environment's, the file's, or the
	// default of Vars.
	env := func(name string) string {
		if v := getenv(name); v != "" {
			return v
		}
		v, _ := lookupVar(name)
		return v.Default
	}
	c := Config{
		Addr:                  env("HERALD_ADDR"),
		DB:                    env("HERALD_DB"),
		LogFormat:             env("HERALD_LOG_FORMAT"),
		LogLevel:              env("HERALD_LOG_LEVEL"),
		TLSCertFile:           env("HERALD_TLS_CERT_FILE"),
		TLSKeyFile:            env("HERALD_TLS_KEY_FILE"),
		AppID:                 env("HERALD_APP_ID"),
		AppKey:                env("HERALD_APP_KEY"),
		AppSecret:             env("HERALD_APP_SECRET"),
		AppWebhookURL:         env("HERALD_APP_WEBHOOK_URL"),
		AppPushInstance:       env("HERALD_APP_PUSH_INSTANCE"),
		InstanceID:            env("HERALD_INSTANCE_ID"),
		InstanceSecretKey:     env("HERALD_INSTANCE_SECRET_KEY"),
		APNsKeyFile:           env("HERALD_APNS_KEY_FILE"),
		APNsKeyID:             env("HERALD_APNS_KEY_ID"),
		APNsTeamID:            env("HERALD_APNS_TEAM_ID"),
		APNsTopic:             env("HERALD_APNS_TOPIC"),
		APNsURL:               env("HERALD_APNS_URL"),
		APNsCAFile:            env("HERALD_APNS_CA_FILE"),
		FCMServiceAccountFile: env("HERALD_FCM_SERVICE_ACCOUNT_FILE"),
		FCMURL:                env("HERALD_FCM_URL"),
		VAPIDSubject:          env("HERALD_VAPID_SUBJECT"),
		MetricsAddr:           env("HERALD_METRICS_ADDR"),
		AdminToken:            env("HERALD_ADMIN_TOKEN"),
		RedisURL:              env("HERALD_REDIS_URL"),
		RedisCAFile:           env("HERALD_REDIS_CA_FILE"),
		NodeID:                env("HERALD_NODE_ID"),
	}
	if set["addr"] {
		c.Addr = *flagAddr
	}
	if set["db"] {
		c.DB = *flagDB
	}
	var parseErrs []error
	duration := func(name string, dst *time.Duration) {
		if v := env(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				parseErrs = append(parseErrs, fmt.Errorf("%s must be a positive duration such as 30s, not %q", name, v))
			}
			*dst = d
		}
	}
	duration("HERALD_ACTIVITY_TIMEOUT", &c.ActivityTimeout)
	duration("HERALD_PONG_TIMEOUT", &c.PongTimeout)
	duration("HERALD_HTTP_READ_TIMEOUT", &c.BodyReadTimeout)
	duration("HERALD_HTTP_WRITE_TIMEOUT", &c.WriteTimeout)
	duration("HERALD_PUSH_LEASE", &c.PushLease)
	duration("HERALD_IDEMPOTENCY_TTL", &c.IdempotencyTTL)
	duration("HERALD_APP_HISTORY_TTL", &c.AppHistoryTTL)
	number := func(name string, dst *float64) {
		if v := env(name); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
				parseErrs = append(parseErrs, fmt.Errorf("%s must be a number of requests per second, 0 or more, not %q", name, v))
			}
			*dst = f
		}
	}
	number("HERALD_ANON_RATE_LIMIT", &c.AnonRateLimit)
	number("HERALD_WS_CONNECT_RATE_LIMIT", &c.ConnectRateLimit)
	count := func(name string, dst *int) {
		if v := env(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				parseErrs = append(parseErrs, fmt.Errorf("%s must be a whole number, 0 or more, not %q", name, v))
			}
			*dst = n
		}
	}
	count("HERALD_WEBHOOK_MAX_QUEUED", &c.WebhookMaxQueued)
	count("HERALD_MAX_SUBSCRIPTIONS_PER_APP", &c.MaxSubscriptions)
	count("HERALD_IDEMPOTENCY_MAX_KEYS", &c.IdempotencyMaxKeys)
	count("HERALD_IDEMPOTENCY_MAX_BYTES", &c.IdempotencyMaxBytes)
	count("HERALD_HISTORY_MAX_BYTES", &c.HistoryMaxBytes)
	count("HERALD_HISTORY_MAX_CHANNELS", &c.HistoryMaxChannels)
	if v := env("HERALD_APP_RECOVERY_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			parseErrs = append(parseErrs, fmt.Errorf("HERALD_APP_RECOVERY_WINDOW must be a duration such as 2m, or 0 for off, not %q", v))
		} else {
			c.AppRecoveryWindow = &d
		}
	}
	if env("HERALD_APP_HISTORY_EVENTS") != "" {
		c.AppHistoryEvents = new(int)
		count("HERALD_APP_HISTORY_EVENTS", c.AppHistoryEvents)
	}
	switch v := env("HERALD_WEBHOOK_ALLOW_PRIVATE"); v {
	case "true", "1", "on", "yes":
	case "false", "0", "off", "no":
		c.WebhookBlockPrivate = true
	default:
		parseErrs = append(parseErrs, fmt.Errorf("HERALD_WEBHOOK_ALLOW_PRIVATE must be true or false, not %q", v))
	}
	c.WebPushAllowedHosts = list(env("HERALD_WEBPUSH_ALLOWED_HOSTS"))
	c.TrustedProxies = list(env("HERALD_TRUSTED_PROXIES"))
	c.Warnings = warnings
	if err := errors.Join(parseErrs...); err != nil {
		return Config{}, err
	}
	return c, c.validate()
}

// list splits a comma-separated setting, dropping blanks; nil when empty.
func list(v string) []string {
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func (c Config) validate() error {
	var errs []error
	if c.LogFormat != "json" && c.LogFormat != "console" {
		errs = append(errs, fmt.Errorf("HERALD_LOG_FORMAT must be json or console, not %q", c.LogFormat))
	}
	if _, err := zapcore.ParseLevel(c.LogLevel); err != nil {
		errs = append(errs, fmt.Errorf("HERALD_LOG_LEVEL: %w", err))
	}
	if c.AppID == "" && (c.AppKey != "" || c.AppSecret != "" || c.AppWebhookURL != "") {
		errs = append(errs, errors.New("HERALD_APP_KEY, HERALD_APP_SECRET and HERALD_APP_WEBHOOK_URL need HERALD_APP_ID"))
	}
	if c.AppID == "" && (c.AppHistoryEvents != nil || c.AppHistoryTTL != 0 || c.AppRecoveryWindow != nil) {
		errs = append(errs, errors.New("HERALD_APP_HISTORY_EVENTS, HERALD_APP_HISTORY_TTL and HERALD_APP_RECOVERY_WINDOW need HERALD_APP_ID"))
	}
	if c.AppID == "" && c.AppPushInstance != "" {
		errs = append(errs, errors.New("HERALD_APP_PUSH_INSTANCE needs HERALD_APP_ID"))
	}
	if c.AppWebhookURL != "" && !strings.HasPrefix(c.AppWebhookURL, "http://") && !strings.HasPrefix(c.AppWebhookURL, "https://") {
		// Shown without user info and query, where credentials go.
		errs = append(errs, fmt.Errorf("HERALD_APP_WEBHOOK_URL must be an http:// or https:// URL, not %q", text.RedactURL(c.AppWebhookURL)))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("HERALD_TLS_CERT_FILE and HERALD_TLS_KEY_FILE go together: set both or neither"))
	}
	if c.InstanceID == "" && c.InstanceSecretKey != "" {
		errs = append(errs, errors.New("HERALD_INSTANCE_SECRET_KEY needs HERALD_INSTANCE_ID"))
	}
	if c.VAPIDSubject != "" && !strings.HasPrefix(c.VAPIDSubject, "mailto:") && !strings.HasPrefix(c.VAPIDSubject, "https:") {
		errs = append(errs, fmt.Errorf("HERALD_VAPID_SUBJECT must be a mailto: or https: URI, not %q", c.VAPIDSubject))
	}
	for _, h := range c.WebPushAllowedHosts {
		if err := validHostPort(h); err != nil {
			errs = append(errs, fmt.Errorf("HERALD_WEBPUSH_ALLOWED_HOSTS: %w", err))
		}
	}
	for _, p := range c.TrustedProxies {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, err := netip.ParseAddr(p); err != nil {
				errs = append(errs, fmt.Errorf("HERALD_TRUSTED_PROXIES: %q is neither an IP address nor a CIDR range", p))
			}
		}
	}
	if c.RedisURL != "" && !strings.HasPrefix(c.RedisURL, "redis://") && !strings.HasPrefix(c.RedisURL, "rediss://") &&
		!strings.HasPrefix(c.RedisURL, "redis-sentinel://") && !strings.HasPrefix(c.RedisURL, "redis-cluster://") {
		errs = append(errs, errors.New("HERALD_REDIS_URL must be a redis://, rediss://, redis-sentinel:// or redis-cluster:// URL"))
	}
	if c.RedisCAFile != "" {
		if !strings.HasPrefix(c.RedisURL, "rediss://") {
			errs = append(errs, errors.New("HERALD_REDIS_CA_FILE needs a rediss:// HERALD_REDIS_URL: it is the CA of Redis's TLS certificate"))
		} else if err := checkCAFile(c.RedisCAFile); err != nil {
			errs = append(errs, fmt.Errorf("HERALD_REDIS_CA_FILE: %w", err))
		}
	}
	if c.NodeID != "" && !validNodeID(c.NodeID) {
		errs = append(errs, fmt.Errorf("HERALD_NODE_ID must be 1 to 64 letters, digits, '-', '_' or '.', not %q", c.NodeID))
	}
	if c.AdminToken != "" && len(c.AdminToken) < MinAdminTokenLength {
		errs = append(errs, fmt.Errorf("HERALD_ADMIN_TOKEN must be at least %d characters long", MinAdminTokenLength))
	}
	return errors.Join(errs...)
}

// checkCAFile reports whether path can be read and holds at least one PEM
// certificate, so that a wrong CA file stops the start rather than every
// connection to Redis.
func checkCAFile(path string) error {
	pem, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s holds no PEM certificate", path)
	}
	return nil
}

// validNodeID accepts 1 to 64 letters, digits, '-', '_' and '.': a node id
// is part of Redis keys and log lines.
func validNodeID(id string) bool {
	if len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return id != ""
}

// validHostPort accepts a host name or IP address, optionally with :port
// (IPv6 addresses with a port in brackets).
func validHostPort(h string) error {
	host := h
	if hp, port, err := net.SplitHostPort(h); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q has an invalid port", h)
		}
		host = hp
	}
	if host == "" || strings.ContainsAny(host, "/?#@ ") {
		return fmt.Errorf("%q is not a host name or IP address", h)
	}
	return nil
}

// MinAdminTokenLength is the shortest HERALD_ADMIN_TOKEN accepted: the token
// guards every app's secrets, so it must not be guessable.
const MinAdminTokenLength = 16

// Logger builds the zap logger the settings ask for: JSON for production,
// console for people.
func Logger(format, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	var cfg zap.Config
	if format == "console" {
		cfg = zap.NewDevelopmentConfig()
		cfg.DisableStacktrace = true
	} else {
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "time"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
		cfg.Sampling = nil
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.OutputPaths = []string{"stderr"}
	return cfg.Build()
}

// Getenv is os.Getenv, the getenv of the real process.
var Getenv = os.Getenv
