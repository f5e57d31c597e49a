package config

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Var is one setting of `herald serve`, declared once: an environment
// variable, which the configuration file (HERALD_CONFIG) may hold too and a
// flag may override. Its declaration fills Config (Load), prints --help
// (WriteEnvHelp) and is the settings tables of README.md and
// server/config/README.md (TestSettingsTables writes them).
type Var struct {
	Name    string // the environment variable, HERALD_…, and the configuration file's key
	Flag    string // the flag of herald serve that wins over it, without dashes; empty if none
	Default string // what Load uses when neither a flag, the environment nor the file sets it
	// Doc is its meaning, one line of Markdown whose links are relative to
	// the repository's root: the settings tables show it as it is, --help
	// without the markup.
	Doc   string
	Table Table // the settings table that lists it
	// Joined lists it in the row of the Var before it in its table (a key
	// beside its id), the Docs one after the other. A joined Var has no
	// flag and no default: the row shows the first one's.
	Joined bool
	// to is the Config field it fills and how its text is read; nil for
	// HERALD_CONFIG, which names where the others are read from.
	to setting
}

// Table names the settings table of the docs that lists a Var.
type Table int

const (
	// Main is README.md's table: what most deployments set.
	Main Table = iota
	// Tuning is server/config/README.md's: limits and tuning knobs, each
	// with a default that suits most deployments.
	Tuning
)

// Vars is every setting Load reads, in the order --help and the tables list
// them.
var Vars = []Var{
	{Name: "HERALD_CONFIG", Flag: "config", Doc: "A TOML file of these settings keyed by variable name (`HERALD_ADDR = \"0.0.0.0:8080\"`, lists for the comma-separated ones); unknown keys are an error, a file others may write is refused. The environment wins over it, flags over both; an empty variable counts as unset."},
	{Name: "HERALD_ADDR", Flag: "addr", Default: DefaultAddr, Doc: "Listen address; one port serves every API. Port `0` picks a free port (logged as `listening`).",
		to: verbatim(func(c *Config) *string { return &c.Addr })},
	{Name: "HERALD_DB", Flag: "db", Default: DefaultDB, Doc: "The SQLite file that holds all state, or a `postgres://` URL: the PostgreSQL database the nodes of a cluster share (see [PostgreSQL](README.md#postgresql)).",
		to: verbatim(func(c *Config) *string { return &c.DB })},
	{Name: "HERALD_LOG_FORMAT", Default: "json", Doc: "`json` for production, `console` for people.",
		to: verbatim(func(c *Config) *string { return &c.LogFormat })},
	{Name: "HERALD_LOG_LEVEL", Default: "info", Doc: "`debug`, `info`, `warn` or `error`. Successful requests are logged at `debug`.",
		to: verbatim(func(c *Config) *string { return &c.LogLevel })},
	{Name: "HERALD_TLS_CERT_FILE", Doc: "Both or neither: serve https and wss on `HERALD_ADDR` with this PEM certificate chain and its key, reloaded when the files change or on SIGHUP (a pair that fails to load leaves the previous one in service, logged).",
		to: verbatim(func(c *Config) *string { return &c.TLSCertFile })},
	{Name: "HERALD_TLS_KEY_FILE", Joined: true, Doc: "The PEM private key of `HERALD_TLS_CERT_FILE`.",
		to: verbatim(func(c *Config) *string { return &c.TLSKeyFile })},
	{Name: "HERALD_METRICS_ADDR", Doc: "When set (e.g. `127.0.0.1:9100`), `GET /metrics` is served on this address only and not on `HERALD_ADDR`.",
		to: verbatim(func(c *Config) *string { return &c.MetricsAddr })},
	{Name: "HERALD_ADMIN_TOKEN", Doc: "Enables the admin API (`/admin/v1/…`) and the debug console (`/console`); at least 16 characters. Unset: both answer 404.",
		to: verbatim(func(c *Config) *string { return &c.AdminToken })},
	{Name: "HERALD_TRUSTED_PROXIES", Doc: "Comma-separated IPs or CIDR ranges of reverse proxies whose `X-Forwarded-For` (or `X-Real-IP`) names the client, for the access log and the per-address limits. Unset: the client is the connection's peer and those headers are ignored.",
		to: list(func(c *Config) *[]string { return &c.TrustedProxies })},

	{Name: "HERALD_APP_ID", Doc: "Create or update this Channels app at start (client events on, subscription_count on, user-authentication timeout off).",
		to: verbatim(func(c *Config) *string { return &c.AppID })},
	{Name: "HERALD_APP_KEY", Joined: true, Doc: "Its key.",
		to: verbatim(func(c *Config) *string { return &c.AppKey })},
	{Name: "HERALD_APP_SECRET", Joined: true, Doc: "Its secret.",
		to: verbatim(func(c *Config) *string { return &c.AppSecret })},
	{Name: "HERALD_APP_WEBHOOK_URL", Doc: "A webhook endpoint (every event kind) for that app.",
		to: verbatim(func(c *Config) *string { return &c.AppWebhookURL })},
	{Name: "HERALD_APP_HISTORY_EVENTS", Doc: "That app keeps the last N events of each channel for the history API (see [Channel history](README.md#channel-history)); `0` turns it off; unset leaves the stored setting.",
		to: optionalCount(func(c *Config) **int { return &c.AppHistoryEvents })},
	{Name: "HERALD_APP_HISTORY_TTL", Joined: true, Doc: "That app's history forgets events older than this, such as `5m`; unset leaves the stored setting (`1h` for a new history).",
		to: duration(func(c *Config) *time.Duration { return &c.AppHistoryTTL })},
	{Name: "HERALD_APP_RECOVERY_WINDOW", Doc: "That app's [recovery](README.md#recovery) window, such as `30s`, at most 7 days (the longest history TTL; a recovery never reaches past the app's TTL either); `0` turns recovery off; unset leaves the stored setting.",
		to: window(func(c *Config) **time.Duration { return &c.AppRecoveryWindow })},
	{Name: "HERALD_APP_PUSH_INSTANCE", Doc: "Link that app to this Push instance (its id) for triggers with `push_if_offline` (see [Realtime, or a push if offline](README.md#realtime-or-a-push-if-offline)); `none` unlinks it; unset leaves the stored link. The instance must exist or be `HERALD_INSTANCE_ID`, else the start fails.",
		to: verbatim(func(c *Config) *string { return &c.AppPushInstance })},

	{Name: "HERALD_INSTANCE_ID", Doc: "Create or update this Push instance at start (a UUID).",
		to: verbatim(func(c *Config) *string { return &c.InstanceID })},
	{Name: "HERALD_INSTANCE_SECRET_KEY", Joined: true, Doc: "Its secret key.",
		to: verbatim(func(c *Config) *string { return &c.InstanceSecretKey })},
	{Name: "HERALD_APNS_KEY_FILE", Doc: "The default instance's APNs token key (`.p8`).",
		to: verbatim(func(c *Config) *string { return &c.APNsKeyFile })},
	{Name: "HERALD_APNS_KEY_ID", Joined: true, Doc: "Its key id.",
		to: verbatim(func(c *Config) *string { return &c.APNsKeyID })},
	{Name: "HERALD_APNS_TEAM_ID", Joined: true, Doc: "Its team id.",
		to: verbatim(func(c *Config) *string { return &c.APNsTeamID })},
	{Name: "HERALD_APNS_TOPIC", Joined: true, Doc: "Its topic: the app's bundle id.",
		to: verbatim(func(c *Config) *string { return &c.APNsTopic })},
	{Name: "HERALD_FCM_SERVICE_ACCOUNT_FILE", Joined: true, Doc: "The default instance's FCM HTTP v1 service account (JSON).",
		to: verbatim(func(c *Config) *string { return &c.FCMServiceAccountFile })},
	{Name: "HERALD_VAPID_SUBJECT", Joined: true, Doc: "The `mailto:` or `https:` URI of its Web Push VAPID tokens (the keys are generated per instance).",
		to: verbatim(func(c *Config) *string { return &c.VAPIDSubject })},
	{Name: "HERALD_APNS_URL", Table: Tuning, Doc: "APNs gateway override (unset: `https://api.push.apple.com`).",
		to: verbatim(func(c *Config) *string { return &c.APNsURL })},
	{Name: "HERALD_APNS_CA_FILE", Table: Tuning, Doc: "An extra CA to trust for APNs.",
		to: verbatim(func(c *Config) *string { return &c.APNsCAFile })},
	{Name: "HERALD_FCM_URL", Table: Tuning, Doc: "FCM gateway override (unset: `https://fcm.googleapis.com`); requests go to `<url>/v1/projects/<project_id>/messages:send`.",
		to: verbatim(func(c *Config) *string { return &c.FCMURL })},

	{Name: "HERALD_REDIS_URL", Doc: "A `redis://` or `rediss://` URL, a comma-separated list of them (shards), `redis-sentinel://…/<master>` or `redis-cluster://…` ([the forms](server/config/README.md#herald_redis_url)): run as one node of the cluster of every Herald on that Redis (see [Running a cluster](README.md#running-a-cluster)). Unset: a single node, with no cost of the cluster on any path.",
		to: verbatim(func(c *Config) *string { return &c.RedisURL })},
	{Name: "HERALD_REDIS_CA_FILE", Table: Tuning, Doc: "A PEM file of CA certificates trusted, besides the system's roots, for the `rediss://` connection to Redis only: a Redis whose certificate a private CA signed. Only with a `rediss://` `HERALD_REDIS_URL`; a missing file or one without a certificate stops the start. Unlike `SSL_CERT_FILE`, it leaves the roots of APNs, FCM, Web Push and webhooks alone.",
		to: verbatim(func(c *Config) *string { return &c.RedisCAFile })},
	{Name: "HERALD_NODE_ID", Doc: "The node's id in the cluster (Redis) and in the leases of the push pages it claims (a shared PostgreSQL database): 1 to 64 letters, digits, `-`, `_`, `.`, unique among the nodes. Random at each start when unset (logged).",
		to: verbatim(func(c *Config) *string { return &c.NodeID })},
	{Name: "HERALD_PUSH_LEASE", Table: Tuning, Default: "30s", Doc: "How long a node sending a page of a push publish's targets holds it without renewing it (it renews every quarter of it): on a PostgreSQL database several nodes share, how soon another node takes over the pages of one that died (see [PostgreSQL](server/config/README.md#herald_db-postgresql)).",
		to: duration(func(c *Config) *time.Duration { return &c.PushLease })},

	{Name: "HERALD_ACTIVITY_TIMEOUT", Table: Tuning, Default: "120s", Doc: "Sent to clients as `activity_timeout`; a silent client is pinged after it.",
		to: duration(func(c *Config) *time.Duration { return &c.ActivityTimeout })},
	{Name: "HERALD_PONG_TIMEOUT", Table: Tuning, Default: "30s", Doc: "Time a pinged client has to answer before it is closed with 4201.",
		to: duration(func(c *Config) *time.Duration { return &c.PongTimeout })},
	{Name: "HERALD_WS_CONNECT_RATE_LIMIT", Table: Tuning, Default: "0", Doc: "New WebSocket connections and HTTP fallback sessions per second per client address (IPv6: per /64), in bursts of one second's worth; beyond it the upgrade (or the session's opening request) is refused with HTTP 429 `rate_limited` and `Retry-After`. `0` is off, as users behind one NAT share an address.",
		to: rate(func(c *Config) *float64 { return &c.ConnectRateLimit })},
	{Name: "HERALD_MAX_SUBSCRIPTIONS_PER_APP", Table: Tuning, Default: "0", Doc: "Channel subscriptions one app may hold over all its connections (`0`: no cap); a subscribe beyond it is answered with `pusher:subscription_error` `{\"type\":\"LimitReached\",\"status\":429}`.",
		to: count(func(c *Config) *int { return &c.MaxSubscriptions })},
	{Name: "HERALD_HTTP_READ_TIMEOUT", Table: Tuning, Default: "30s", Doc: "Time a request has to send its headers (at most 10 s of it) and its body; a slower client is disconnected. Not the WebSocket upgrade or the console's event stream.",
		to: duration(func(c *Config) *time.Duration { return &c.BodyReadTimeout })},
	{Name: "HERALD_HTTP_WRITE_TIMEOUT", Table: Tuning, Default: "30s", Doc: "Time from the end of a request's headers until its answer is written. Not WebSockets or the console's event stream. With both timeouts equal, a body that stops arriving is cut off without an answer; with a longer write timeout it gets 400 `unreadable_body`.",
		to: duration(func(c *Config) *time.Duration { return &c.WriteTimeout })},
	{Name: "HERALD_ANON_RATE_LIMIT", Table: Tuning, Default: strconv.Itoa(DefaultAnonRateLimit), Doc: "Requests per second per client address (IPv6: per /64) on the Device and Reporting APIs together, in bursts of up to twice that; `0` turns the limit off. Over it: 429 with `Retry-After`.",
		to: rate(func(c *Config) *float64 { return &c.AnonRateLimit })},
	{Name: "HERALD_WEBPUSH_ALLOWED_HOSTS", Table: Tuning, Doc: "Comma-separated host names or IP addresses, each optionally with `:port` (IPv6 in brackets), whose Web Push endpoints may be private or plain `http`: a private push service, or the fake gateways of the tests (`127.0.0.1,localhost`). Without a port, any port. Every other endpoint must be `https` to a public address.",
		to: list(func(c *Config) *[]string { return &c.WebPushAllowedHosts })},
	{Name: "HERALD_WEBHOOK_MAX_QUEUED", Table: Tuning, Default: "10000", Doc: "Webhook requests kept per app in the outbox; past it the app's oldest waiting requests are dropped (counted, logged once a minute).",
		to: count(func(c *Config) *int { return &c.WebhookMaxQueued })},
	{Name: "HERALD_WEBHOOK_ALLOW_PRIVATE", Table: Tuning, Default: "true", Doc: "`false` puts webhook URLs (Channels and publish webhooks) behind the Web Push endpoints' address guard: no loopback, private, link-local or other internal address, checked at connect time. Operators often hook local services, hence the default.",
		to: notBoolean(func(c *Config) *bool { return &c.WebhookBlockPrivate })},

	{Name: "HERALD_IDEMPOTENCY_TTL", Table: Tuning, Default: "24h", Doc: "How long an `Idempotency-Key` of a trigger, batch or Beams publish is remembered from its first request (see [Idempotent publishing](README.md#idempotent-publishing)).",
		to: duration(func(c *Config) *time.Duration { return &c.IdempotencyTTL })},
	{Name: "HERALD_IDEMPOTENCY_MAX_KEYS", Table: Tuning, Default: "10000", Doc: "`Idempotency-Key` values kept per app and per instance; past it the oldest are forgotten first.",
		to: count(func(c *Config) *int { return &c.IdempotencyMaxKeys })},
	{Name: "HERALD_IDEMPOTENCY_MAX_BYTES", Table: Tuning, Default: "33554432", Doc: "Bytes of `Idempotency-Key` answers kept per app and per instance, each counting its key, its answer's body and 256 bytes; past it the oldest are forgotten first, however large the answers.",
		to: byteCount(func(c *Config) *int { return &c.IdempotencyMaxBytes })},
	{Name: "HERALD_HISTORY_MAX_BYTES", Table: Tuning, Default: "16777216", Doc: "Bytes of channel history one app may keep, counted as held: each event its name, its data and 64 bytes, each channel 512 bytes and five times its name ([what that holds](server/config/README.md#what-herald_history_max_bytes-holds)); past it the least recently written channel's oldest events go first.",
		to: byteCount(func(c *Config) *int { return &c.HistoryMaxBytes })},
	{Name: "HERALD_HISTORY_MAX_CHANNELS", Table: Tuning, Default: "10000", Doc: "Channels with history one app may keep; past it the least recently written channel's history goes.",
		to: count(func(c *Config) *int { return &c.HistoryMaxChannels })},
}

// lookupVar returns the entry of name in Vars.
func lookupVar(name string) (Var, bool) {
	for _, v := range Vars {
		if v.Name == name {
			return v, true
		}
	}
	return Var{}, false
}

// A setting is where a Var's value goes in Config and how its text is read.
type setting interface {
	// set reads value (never empty) into c; an error names the variable.
	set(c *Config, name, value string) error
	// field is the Config field set fills, a pointer into c: the tests
	// check that every field has one Var.
	field(c *Config) any
	// kind says what the value is, for the tables: "bytes" shows the
	// default in MiB too.
	kind() string
}

// into is the setting of a Config field of type T.
type into[T any] struct {
	at    func(*Config) *T
	parse func(name, value string) (T, error)
	what  string
}

func (s into[T]) set(c *Config, name, value string) error {
	v, err := s.parse(name, value)
	if err != nil {
		return err
	}
	*s.at(c) = v
	return nil
}

func (s into[T]) field(c *Config) any { return s.at(c) }

func (s into[T]) kind() string { return s.what }

// verbatim is a setting taken as it is written.
func verbatim(at func(*Config) *string) setting {
	return into[string]{at, func(_, v string) (string, error) { return v, nil }, "text"}
}

// list is a comma-separated setting; blanks between the commas are dropped.
func list(at func(*Config) *[]string) setting {
	return into[[]string]{at, func(_, v string) ([]string, error) { return splitList(v), nil }, "list"}
}

// duration is a positive duration such as 30s.
func duration(at func(*Config) *time.Duration) setting {
	return into[time.Duration]{at, parseDuration, "duration"}
}

func parseDuration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s must be a positive duration such as 30s, not %q", name, v)
	}
	return d, nil
}

// window is a duration that may be 0 (off); nil in Config when unset.
func window(at func(*Config) **time.Duration) setting {
	return into[*time.Duration]{at, func(name, v string) (*time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%s must be a duration such as 2m, or 0 for off, not %q", name, v)
		}
		return &d, nil
	}, "duration"}
}

// count is a whole number, 0 or more.
func count(at func(*Config) *int) setting {
	return into[int]{at, parseCount, "count"}
}

// byteCount is a count of bytes.
func byteCount(at func(*Config) *int) setting {
	return into[int]{at, parseCount, "bytes"}
}

// optionalCount is a count that is nil in Config when unset.
func optionalCount(at func(*Config) **int) setting {
	return into[*int]{at, func(name, v string) (*int, error) {
		n, err := parseCount(name, v)
		return &n, err
	}, "count"}
}

func parseCount(name, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s must be a whole number, 0 or more, not %q", name, v)
	}
	return n, nil
}

// rate is a number of requests per second, 0 or more.
func rate(at func(*Config) *float64) setting {
	return into[float64]{at, func(name, v string) (float64, error) {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, fmt.Errorf("%s must be a number of requests per second, 0 or more, not %q", name, v)
		}
		return f, nil
	}, "rate"}
}

// notBoolean is a true or false setting whose Config field holds the
// opposite (HERALD_WEBHOOK_ALLOW_PRIVATE=false sets WebhookBlockPrivate).
func notBoolean(at func(*Config) *bool) setting {
	return into[bool]{at, func(name, v string) (bool, error) {
		switch v {
		case "true", "1", "on", "yes":
			return false, nil
		case "false", "0", "off", "no":
			return true, nil
		}
		return false, fmt.Errorf("%s must be true or false, not %q", name, v)
	}, "bool"}
}

// splitList splits a comma-separated setting, dropping blanks; nil when
// empty.
func splitList(v string) []string {
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// markdownLink is a Markdown link, [text](target).
var markdownLink = regexp.MustCompile(`\[([^\]]+)\]\(([^)]+)\)`)

// plainDoc is v.Doc without its Markdown: links are their text, code is
// unquoted.
func (v Var) plainDoc() string {
	return strings.ReplaceAll(markdownLink.ReplaceAllString(v.Doc, "$1"), "`", "")
}

// WriteEnvHelp writes the settings of Vars, one per line with its default
// and flag, for --help.
func WriteEnvHelp(w io.Writer) {
	fmt.Fprintln(w, "Settings: environment variables, or keys of the HERALD_CONFIG file (TOML). A flag wins")
	fmt.Fprintln(w, "over the environment, the environment over the file; an empty variable counts as unset.")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, v := range Vars {
		def := v.Default
		if def == "" {
			def = "-"
		}
		doc := v.plainDoc()
		if v.Flag != "" {
			doc += " (flag --" + v.Flag + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", v.Name, def, doc)
	}
	tw.Flush()
}
