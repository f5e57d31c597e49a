// Package config reads Herald's settings from flags, HERALD_* environment
// variables and an optional TOML file (a flag wins over its variable, a
// variable over the file), and builds the logger. Each setting is declared
// once, in Vars: its variable, flag, default, meaning and Config field.
// Vars fills Config, prints --help, and is the settings tables of README.md
// and server/config/README.md, which TestSettingsTables checks (make
// check-docs) and rewrites with -update.
package config

import (
	"cmp"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
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

// Config is everything `herald serve` needs. Each field is filled by one
// Var, which names its variable and says its default and meaning; the
// comments here say only how a field holds it.
type Config struct {
	Addr      string // HERALD_ADDR
	DB        string // HERALD_DB
	LogFormat string // HERALD_LOG_FORMAT
	LogLevel  string // HERALD_LOG_LEVEL

	TLSCertFile string // HERALD_TLS_CERT_FILE
	TLSKeyFile  string // HERALD_TLS_KEY_FILE

	// The default Channels app, created or updated at start when AppID is set.
	AppID         string // HERALD_APP_ID
	AppKey        string // HERALD_APP_KEY
	AppSecret     string // HERALD_APP_SECRET
	AppWebhookURL string // HERALD_APP_WEBHOOK_URL
	// AppHistoryEvents (HERALD_APP_HISTORY_EVENTS) is nil when unset: the
	// stored setting stays.
	AppHistoryEvents *int
	AppHistoryTTL    time.Duration // HERALD_APP_HISTORY_TTL; 0 when unset: the stored setting stays
	// AppRecoveryWindow (HERALD_APP_RECOVERY_WINDOW) is nil when unset: the
	// stored setting stays.
	AppRecoveryWindow *time.Duration
	AppPushInstance   string // HERALD_APP_PUSH_INSTANCE; "none" unlinks, empty leaves the stored link

	// The default Push instance, created or updated at start when InstanceID is set.
	InstanceID            string // HERALD_INSTANCE_ID
	InstanceSecretKey     string // HERALD_INSTANCE_SECRET_KEY
	APNsKeyFile           string // HERALD_APNS_KEY_FILE
	APNsKeyID             string // HERALD_APNS_KEY_ID
	APNsTeamID            string // HERALD_APNS_TEAM_ID
	APNsTopic             string // HERALD_APNS_TOPIC
	APNsURL               string // HERALD_APNS_URL; empty leaves the instance's
	APNsCAFile            string // HERALD_APNS_CA_FILE
	FCMServiceAccountFile string // HERALD_FCM_SERVICE_ACCOUNT_FILE
	FCMURL                string // HERALD_FCM_URL; empty leaves the instance's
	VAPIDSubject          string // HERALD_VAPID_SUBJECT

	ActivityTimeout time.Duration // HERALD_ACTIVITY_TIMEOUT
	PongTimeout     time.Duration // HERALD_PONG_TIMEOUT

	MetricsAddr string // HERALD_METRICS_ADDR; empty: /metrics is served on Addr
	AdminToken  string // HERALD_ADMIN_TOKEN; empty: no admin API or console

	// Hardening: what strangers may send and reach (README, Security).
	WebPushAllowedHosts []string      // HERALD_WEBPUSH_ALLOWED_HOSTS
	WebhookBlockPrivate bool          // HERALD_WEBHOOK_ALLOW_PRIVATE=false sets it
	WebhookMaxQueued    int           // HERALD_WEBHOOK_MAX_QUEUED
	AnonRateLimit       float64       // HERALD_ANON_RATE_LIMIT; 0 is off
	ConnectRateLimit    float64       // HERALD_WS_CONNECT_RATE_LIMIT; 0 is off
	MaxSubscriptions    int           // HERALD_MAX_SUBSCRIPTIONS_PER_APP; 0 is no cap
	TrustedProxies      []string      // HERALD_TRUSTED_PROXIES
	BodyReadTimeout     time.Duration // HERALD_HTTP_READ_TIMEOUT
	WriteTimeout        time.Duration // HERALD_HTTP_WRITE_TIMEOUT

	// Cluster (README, Running a cluster).
	RedisURL    string        // HERALD_REDIS_URL; empty: a single node
	NodeID      string        // HERALD_NODE_ID; empty: random at each start
	RedisCAFile string        // HERALD_REDIS_CA_FILE
	PushLease   time.Duration // HERALD_PUSH_LEASE

	// Idempotent publishing (README, Idempotent publishing).
	IdempotencyTTL      time.Duration // HERALD_IDEMPOTENCY_TTL
	IdempotencyMaxKeys  int           // HERALD_IDEMPOTENCY_MAX_KEYS
	IdempotencyMaxBytes int           // HERALD_IDEMPOTENCY_MAX_BYTES

	// Channel history (README, Channel history): bounds per app.
	HistoryMaxBytes    int // HERALD_HISTORY_MAX_BYTES
	HistoryMaxChannels int // HERALD_HISTORY_MAX_CHANNELS

	// Warnings are what the loading noticed and let pass (a configuration
	// file others can read), for the caller to log once it has a logger.
	Warnings []string
}

// Defaults that others read too; Vars states them.
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
	given, err := parseFlags(cmd, args, stderr)
	if err != nil {
		return Config{}, err
	}
	path, ok := given["HERALD_CONFIG"]
	if !ok {
		path = getenv("HERALD_CONFIG")
	}
	getenv, err = WithFile(getenv, path)
	if err != nil {
		return Config{}, err
	}
	var c Config
	if path != "" {
		if info, err := os.Stat(path); err == nil && info.Mode().Perm()&0o004 != 0 {
			c.Warnings = append(c.Warnings, fmt.Sprintf("configuration file %s has mode %04o: anyone on the machine can read the secrets it may hold (admin token, app secrets, database password); chmod o-r it", path, info.Mode().Perm()))
		}
	}
	// Each setting is its flag's, else the environment's or the file's,
	// else its default.
	var errs []error
	for _, v := range Vars {
		if v.to == nil {
			continue // HERALD_CONFIG, read above
		}
		value, ok := given[v.Name]
		if !ok {
			value = cmp.Or(getenv(v.Name), v.Default)
		}
		if value == "" {
			continue
		}
		if err := v.to.set(&c, v.Name, value); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, c.validate()
}

// parseFlags parses the flags of cmd, one per Var that has one, and returns
// the value of each flag given by its Var's name. --help writes the usage
// and every setting.
func parseFlags(cmd string, args []string, stderr io.Writer) (map[string]string, error) {
	fs := flag.NewFlagSet("herald "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	names := map[string]string{} // flag → variable
	for _, v := range Vars {
		if v.Flag != "" {
			usage := v.Name
			if v.Default != "" {
				usage += ", default " + v.Default
			}
			fs.String(v.Flag, "", v.plainDoc()+" ("+usage+")")
			names[v.Flag] = v.Name
		}
	}
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "usage: herald %s [--addr ADDR] [--db FILE] [--config FILE]\n\nFlags:\n", cmd)
		fs.PrintDefaults()
		fmt.Fprintln(out)
		WriteEnvHelp(out)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%s takes no arguments, got %q", cmd, fs.Args())
	}
	given := map[string]string{}
	fs.Visit(func(f *flag.Flag) { given[names[f.Name]] = f.Value.String() })
	return given, nil
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

// Logger builds the zap logger the settings ask for, writing to w (the
// process's stderr): JSON for production, console for people. It is built
// from zap's production or development settings, on w instead of a sink
// named by path, which would be resolved through zap's process-wide registry.
func Logger(format, level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	var enc zapcore.Encoder
	opts := []zap.Option{zap.AddCaller()}
	if format == "console" {
		enc = zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
		opts = append(opts, zap.Development())
	} else {
		ec := zap.NewProductionEncoderConfig()
		ec.TimeKey = "time"
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
		opts = append(opts, zap.AddStacktrace(zapcore.ErrorLevel))
	}
	out := zapcore.Lock(zapcore.AddSync(w))
	opts = append(opts, zap.ErrorOutput(out))
	return zap.New(zapcore.NewCore(enc, out, lvl), opts...), nil
}
