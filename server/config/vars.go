package config

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Var is one setting of `herald serve`: an environment variable, which the
// configuration file (HERALD_CONFIG) may hold too and a flag may override.
type Var struct {
	Name    string // the environment variable, HERALD_…
	Flag    string // the flag of herald serve that wins over it, without dashes; empty if none
	Default string // what Load uses when neither the environment nor the file sets it
	Doc     string // one line for --help
}

// Vars is every setting Load reads, in the order --help lists them. Load
// takes its defaults from here, and a test checks that every variable Load
// reads is listed, so the help cannot drift from what Herald does.
var Vars = []Var{
	{Name: "HERALD_CONFIG", Flag: "config", Doc: "a TOML file of these settings, keyed by variable name; the environment and flags win over it"},
	{Name: "HERALD_ADDR", Flag: "addr", Default: DefaultAddr, Doc: "listen address of every API; port 0 picks a free port"},
	{Name: "HERALD_DB", Flag: "db", Default: DefaultDB, Doc: "the SQLite file that holds all state, or a postgres:// URL of the PostgreSQL database the nodes of a cluster share"},
	{Name: "HERALD_LOG_FORMAT", Default: "json", Doc: "json (production) or console (people)"},
	{Name: "HERALD_LOG_LEVEL", Default: "info", Doc: "debug, info, warn or error; successful requests are logged at debug"},
	{Name: "HERALD_TLS_CERT_FILE", Doc: "PEM certificate chain: serve https and wss on HERALD_ADDR (with HERALD_TLS_KEY_FILE); reloaded on SIGHUP and when the files change"},
	{Name: "HERALD_TLS_KEY_FILE", Doc: "PEM private key of HERALD_TLS_CERT_FILE"},
	{Name: "HERALD_APP_ID", Doc: "create or update this Channels app at start"},
	{Name: "HERALD_APP_KEY", Doc: "its key"},
	{Name: "HERALD_APP_SECRET", Doc: "its secret"},
	{Name: "HERALD_APP_WEBHOOK_URL", Doc: "a webhook endpoint of that app for every event kind"},
	{Name: "HERALD_APP_HISTORY_EVENTS", Doc: "that app keeps the last N events of each channel for the history API (0: off; unset: as stored)"},
	{Name: "HERALD_APP_HISTORY_TTL", Doc: "and forgets them after this long, such as 5m (unset: as stored; 1h for a new history)"},
	{Name: "HERALD_APP_RECOVERY_WINDOW", Doc: "a client of that app that comes back within this long gets what it missed on its channels, with the recovery plugin and history on, such as 30s (0: off; unset: as stored; 2m for a new app)"},
	{Name: "HERALD_APP_PUSH_INSTANCE", Doc: "link that app to this Push instance (its id) for triggers with push_if_offline; the instance must exist or be HERALD_INSTANCE_ID, else the start fails (none: unlink; unset: as stored)"},
	{Name: "HERALD_INSTANCE_ID", Doc: "create or update this Push instance at start (a UUID)"},
	{Name: "HERALD_INSTANCE_SECRET_KEY", Doc: "its secret key"},
	{Name: "HERALD_APNS_KEY_FILE", Doc: "APNs token key (.p8) of the default instance"},
	{Name: "HERALD_APNS_KEY_ID", Doc: "its key id"},
	{Name: "HERALD_APNS_TEAM_ID", Doc: "its team id"},
	{Name: "HERALD_APNS_TOPIC", Doc: "the app's bundle id"},
	{Name: "HERALD_APNS_URL", Doc: "APNs gateway override (unset: https://api.push.apple.com)"},
	{Name: "HERALD_APNS_CA_FILE", Doc: "an extra CA to trust for APNs"},
	{Name: "HERALD_FCM_SERVICE_ACCOUNT_FILE", Doc: "FCM HTTP v1 service account JSON of the default instance"},
	{Name: "HERALD_FCM_URL", Doc: "FCM gateway override (unset: https://fcm.googleapis.com)"},
	{Name: "HERALD_VAPID_SUBJECT", Doc: "mailto: or https: URI sent in Web Push VAPID tokens"},
	{Name: "HERALD_ACTIVITY_TIMEOUT", Default: "120s", Doc: "sent to clients as activity_timeout; a silent client is pinged after it"},
	{Name: "HERALD_PONG_TIMEOUT", Default: "30s", Doc: "time a pinged client has to answer before it is closed (4201)"},
	{Name: "HERALD_WS_CONNECT_RATE_LIMIT", Default: "0", Doc: "new WebSocket connections and HTTP fallback sessions per second per client address; 0 is off"},
	{Name: "HERALD_MAX_SUBSCRIPTIONS_PER_APP", Default: "0", Doc: "channel subscriptions one app may hold over all its connections; 0 is no cap"},
	{Name: "HERALD_METRICS_ADDR", Doc: "serve GET /metrics on this address only (unset: on HERALD_ADDR)"},
	{Name: "HERALD_ADMIN_TOKEN", Doc: "enables the admin API and the console (at least 16 characters)"},
	{Name: "HERALD_WEBHOOK_MAX_QUEUED", Default: "10000", Doc: "webhook requests kept per app in the outbox before the oldest are dropped"},
	{Name: "HERALD_WEBHOOK_ALLOW_PRIVATE", Default: "true", Doc: "false keeps webhook URLs off loopback, private and link-local addresses"},
	{Name: "HERALD_WEBPUSH_ALLOWED_HOSTS", Doc: "comma-separated hosts (optionally :port) whose Web Push endpoints may be private or plain http"},
	{Name: "HERALD_TRUSTED_PROXIES", Doc: "comma-separated IPs or CIDRs of reverse proxies whose X-Forwarded-For is believed"},
	{Name: "HERALD_HTTP_READ_TIMEOUT", Default: "30s", Doc: "time a request has to send its headers and body"},
	{Name: "HERALD_HTTP_WRITE_TIMEOUT", Default: "30s", Doc: "time to write an answer (not WebSockets or the console's stream)"},
	{Name: "HERALD_ANON_RATE_LIMIT", Default: "50", Doc: "requests per second per client address on the Device and Reporting APIs; 0 is off"},
	{Name: "HERALD_REDIS_URL", Doc: "redis:// or rediss:// URL (password, db number), a comma-separated list of them (shards), redis-sentinel://[:password@]host:port[,host:port…]/<master>, or redis-cluster://[:password@]host:port[,host:port…] (a Redis Cluster's seed nodes): run as one node of the cluster sharing that Redis"},
	{Name: "HERALD_REDIS_CA_FILE", Doc: "PEM file of CA certificates trusted, besides the system's, for the rediss:// HERALD_REDIS_URL only"},
	{Name: "HERALD_PUSH_LEASE", Default: "30s", Doc: "how long a node holds a page of a push publish's targets without renewing it (it renews every quarter of it): on a shared PostgreSQL database, how soon another node takes over a dead one's pages"},
	{Name: "HERALD_IDEMPOTENCY_TTL", Default: "24h", Doc: "how long an Idempotency-Key of a trigger, batch or Beams publish is remembered from its first request"},
	{Name: "HERALD_IDEMPOTENCY_MAX_KEYS", Default: "10000", Doc: "Idempotency-Key values kept per app and per instance; past it the oldest are forgotten first"},
	{Name: "HERALD_IDEMPOTENCY_MAX_BYTES", Default: "33554432", Doc: "bytes of Idempotency-Key answers kept per app and per instance (each its key, its answer and 256 bytes); past it the oldest are forgotten first"},
	{Name: "HERALD_HISTORY_MAX_BYTES", Default: "16777216", Doc: "bytes of channel history kept per app (each event its name, data and 64 bytes; each channel 512 bytes and its name five times); past it the least recently written channel's oldest events go first"},
	{Name: "HERALD_HISTORY_MAX_CHANNELS", Default: "10000", Doc: "channels with history kept per app; past it the least recently written channel's history goes"},
	{Name: "HERALD_NODE_ID", Doc: "this node's id in the cluster and in the push publishes' leases, unique among its nodes (unset: random at each start)"},
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
		doc := v.Doc
		if v.Flag != "" {
			doc += " (flag --" + v.Flag + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", v.Name, def, doc)
	}
	tw.Flush()
}
