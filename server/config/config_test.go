package config

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/internal/testcert"
)

// getenv returns a getenv that reads only vars.
func getenv(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// defaults is the Config of an empty environment and no flags.
var defaults = Config{
	Addr: DefaultAddr, DB: DefaultDB, LogFormat: "json", LogLevel: "info", AnonRateLimit: DefaultAnonRateLimit,
	ActivityTimeout: 120 * time.Second, PongTimeout: 30 * time.Second, WebhookMaxQueued: 10000,
	BodyReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, PushLease: 30 * time.Second,
	IdempotencyTTL: 24 * time.Hour, IdempotencyMaxKeys: 10000, IdempotencyMaxBytes: 32 << 20,
	HistoryMaxBytes: 16 << 20, HistoryMaxChannels: 10000,
}

func TestLoad(t *testing.T) {
	everyVar := map[string]string{
		"HERALD_ADDR":                      "0.0.0.0:9000",
		"HERALD_DB":                        "/var/lib/herald/state.db",
		"HERALD_LOG_FORMAT":                "console",
		"HERALD_LOG_LEVEL":                 "debug",
		"HERALD_TLS_CERT_FILE":             "/etc/herald/cert.pem",
		"HERALD_TLS_KEY_FILE":              "/etc/herald/key.pem",
		"HERALD_APP_ID":                    "42",
		"HERALD_APP_KEY":                   "app-key",
		"HERALD_APP_SECRET":                "app-secret",
		"HERALD_APP_WEBHOOK_URL":           "https://example.com/hook",
		"HERALD_INSTANCE_ID":               "8a0f4d2c-9b1e-4c3a-8f5d-6e7a8b9c0d1e",
		"HERALD_INSTANCE_SECRET_KEY":       "INSTANCE-SECRET",
		"HERALD_APNS_KEY_FILE":             "/keys/apns.p8",
		"HERALD_APNS_KEY_ID":               "KEYID12345",
		"HERALD_APNS_TEAM_ID":              "TEAM123456",
		"HERALD_APNS_TOPIC":                "com.example.app",
		"HERALD_APNS_URL":                  "http://127.0.0.1:8443",
		"HERALD_APNS_CA_FILE":              "/keys/ca.pem",
		"HERALD_FCM_SERVICE_ACCOUNT_FILE":  "/keys/fcm.json",
		"HERALD_FCM_URL":                   "http://127.0.0.1:8444",
		"HERALD_VAPID_SUBJECT":             "mailto:ops@example.com",
		"HERALD_ACTIVITY_TIMEOUT":          "45s",
		"HERALD_PONG_TIMEOUT":              "1m",
		"HERALD_WEBPUSH_ALLOWED_HOSTS":     " push.internal:8443, 10.0.0.7 ,,[::1]:9000",
		"HERALD_WEBHOOK_ALLOW_PRIVATE":     "false",
		"HERALD_WEBHOOK_MAX_QUEUED":        "500",
		"HERALD_ANON_RATE_LIMIT":           "0",
		"HERALD_WS_CONNECT_RATE_LIMIT":     "2.5",
		"HERALD_MAX_SUBSCRIPTIONS_PER_APP": "100000",
		"HERALD_TRUSTED_PROXIES":           "10.0.0.0/8,192.168.1.1",
		"HERALD_HTTP_READ_TIMEOUT":         "5s",
		"HERALD_HTTP_WRITE_TIMEOUT":        "20s",
		"HERALD_PUSH_LEASE":                "5s",
		"HERALD_IDEMPOTENCY_TTL":           "1h",
		"HERALD_IDEMPOTENCY_MAX_KEYS":      "50",
		"HERALD_IDEMPOTENCY_MAX_BYTES":     "65536",
		"HERALD_APP_HISTORY_EVENTS":        "0",
		"HERALD_APP_HISTORY_TTL":           "5m",
		"HERALD_APP_PUSH_INSTANCE":         "3f2504e0-4f89-41d3-9a0c-0305e82c3301",
		"HERALD_HISTORY_MAX_BYTES":         "1048576",
		"HERALD_HISTORY_MAX_CHANNELS":      "20",
	}
	fromEveryVar := Config{
		Addr:                  "0.0.0.0:9000",
		DB:                    "/var/lib/herald/state.db",
		LogFormat:             "console",
		LogLevel:              "debug",
		TLSCertFile:           "/etc/herald/cert.pem",
		TLSKeyFile:            "/etc/herald/key.pem",
		AppID:                 "42",
		AppKey:                "app-key",
		AppSecret:             "app-secret",
		AppWebhookURL:         "https://example.com/hook",
		InstanceID:            "8a0f4d2c-9b1e-4c3a-8f5d-6e7a8b9c0d1e",
		InstanceSecretKey:     "INSTANCE-SECRET",
		APNsKeyFile:           "/keys/apns.p8",
		APNsKeyID:             "KEYID12345",
		APNsTeamID:            "TEAM123456",
		APNsTopic:             "com.example.app",
		APNsURL:               "http://127.0.0.1:8443",
		APNsCAFile:            "/keys/ca.pem",
		FCMServiceAccountFile: "/keys/fcm.json",
		FCMURL:                "http://127.0.0.1:8444",
		VAPIDSubject:          "mailto:ops@example.com",
		ActivityTimeout:       45 * time.Second,
		PongTimeout:           time.Minute,
		WebPushAllowedHosts:   []string{"push.internal:8443", "10.0.0.7", "[::1]:9000"},
		WebhookBlockPrivate:   true,
		WebhookMaxQueued:      500,
		AnonRateLimit:         0,
		ConnectRateLimit:      2.5,
		MaxSubscriptions:      100000,
		TrustedProxies:        []string{"10.0.0.0/8", "192.168.1.1"},
		BodyReadTimeout:       5 * time.Second,
		WriteTimeout:          20 * time.Second,
		PushLease:             5 * time.Second,
		IdempotencyTTL:        time.Hour,
		IdempotencyMaxKeys:    50,
		IdempotencyMaxBytes:   65536,
		AppHistoryEvents:      new(int), // set to 0: history off
		AppHistoryTTL:         5 * time.Minute,
		AppPushInstance:       "3f2504e0-4f89-41d3-9a0c-0305e82c3301",
		HistoryMaxBytes:       1 << 20,
		HistoryMaxChannels:    20,
	}
	with := func(c Config, change func(*Config)) Config {
		change(&c)
		return c
	}

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    Config // checked when wantErr is empty
		wantErr string // a part of the error message
	}{
		{name: "OKDefaults", want: defaults},
		{name: "OKEveryVariable", env: everyVar, want: fromEveryVar},
		{
			name: "OKFlags",
			args: []string{"--addr", "127.0.0.1:0", "--db=/tmp/x.db"},
			want: with(defaults, func(c *Config) { c.Addr, c.DB = "127.0.0.1:0", "/tmp/x.db" }),
		},
		{
			name: "OKFlagsOverrideEnv",
			args: []string{"-addr=127.0.0.1:1", "-db", "flag.db"},
			env:  everyVar,
			want: with(fromEveryVar, func(c *Config) { c.Addr, c.DB = "127.0.0.1:1", "flag.db" }),
		},
		{
			name: "OKVAPIDSubjectHTTPS",
			env:  map[string]string{"HERALD_VAPID_SUBJECT": "https://example.com/contact"},
			want: with(defaults, func(c *Config) { c.VAPIDSubject = "https://example.com/contact" }),
		},
		{
			name: "OKAppIDAlone",
			env:  map[string]string{"HERALD_APP_ID": "7"},
			want: with(defaults, func(c *Config) { c.AppID = "7" }),
		},
		{
			name: "OKLogLevelWarn",
			env:  map[string]string{"HERALD_LOG_LEVEL": "warn"},
			want: with(defaults, func(c *Config) { c.LogLevel = "warn" }),
		},
		{
			name:    "ErrActivityTimeoutNotDuration",
			env:     map[string]string{"HERALD_ACTIVITY_TIMEOUT": "120"},
			wantErr: `HERALD_ACTIVITY_TIMEOUT must be a positive duration such as 30s, not "120"`,
		},
		{
			name:    "ErrPongTimeoutNotPositive",
			env:     map[string]string{"HERALD_PONG_TIMEOUT": "0s"},
			wantErr: "HERALD_PONG_TIMEOUT must be a positive duration",
		},
		{
			name: "OKWebhookAllowPrivateTrue",
			env:  map[string]string{"HERALD_WEBHOOK_ALLOW_PRIVATE": "true"},
			want: defaults,
		},
		{
			name:    "ErrWebhookAllowPrivate",
			env:     map[string]string{"HERALD_WEBHOOK_ALLOW_PRIVATE": "maybe"},
			wantErr: `HERALD_WEBHOOK_ALLOW_PRIVATE must be true or false, not "maybe"`,
		},
		{
			name:    "ErrAnonRateLimitNegative",
			env:     map[string]string{"HERALD_ANON_RATE_LIMIT": "-1"},
			wantErr: `HERALD_ANON_RATE_LIMIT must be a number of requests per second, 0 or more, not "-1"`,
		},
		{
			name:    "ErrConnectRateLimitNotNumber",
			env:     map[string]string{"HERALD_WS_CONNECT_RATE_LIMIT": "fast"},
			wantErr: "HERALD_WS_CONNECT_RATE_LIMIT must be a number",
		},
		{
			name:    "ErrWebhookMaxQueuedFraction",
			env:     map[string]string{"HERALD_WEBHOOK_MAX_QUEUED": "1.5"},
			wantErr: `HERALD_WEBHOOK_MAX_QUEUED must be a whole number, 0 or more, not "1.5"`,
		},
		{
			name:    "ErrMaxSubscriptionsNegative",
			env:     map[string]string{"HERALD_MAX_SUBSCRIPTIONS_PER_APP": "-5"},
			wantErr: "HERALD_MAX_SUBSCRIPTIONS_PER_APP must be a whole number",
		},
		{
			name:    "ErrReadTimeout",
			env:     map[string]string{"HERALD_HTTP_READ_TIMEOUT": "-1s"},
			wantErr: "HERALD_HTTP_READ_TIMEOUT must be a positive duration",
		},
		{
			name: "OKWebPushAllowedPortsAtTheirBounds",
			env:  map[string]string{"HERALD_WEBPUSH_ALLOWED_HOSTS": "127.0.0.1:1,[::1]:65535"},
			want: with(defaults, func(c *Config) { c.WebPushAllowedHosts = []string{"127.0.0.1:1", "[::1]:65535"} }),
		},
		{
			name:    "ErrWebPushAllowedPortZero",
			env:     map[string]string{"HERALD_WEBPUSH_ALLOWED_HOSTS": "127.0.0.1:0"},
			wantErr: `HERALD_WEBPUSH_ALLOWED_HOSTS: "127.0.0.1:0" has an invalid port`,
		},
		{
			name:    "ErrWebPushAllowedPortPastTheLast",
			env:     map[string]string{"HERALD_WEBPUSH_ALLOWED_HOSTS": "127.0.0.1:65536"},
			wantErr: `HERALD_WEBPUSH_ALLOWED_HOSTS: "127.0.0.1:65536" has an invalid port`,
		},
		{
			// Every kind of character a node id may hold, each bound of a range.
			name: "OKNodeIDOfEveryAllowedCharacter",
			env:  map[string]string{"HERALD_NODE_ID": "aAzZ09-_." + strings.Repeat("n", 55)},
			want: with(defaults, func(c *Config) { c.NodeID = "aAzZ09-_." + strings.Repeat("n", 55) }),
		},
		{
			name:    "ErrNodeIDTooLong",
			env:     map[string]string{"HERALD_NODE_ID": strings.Repeat("n", 65)},
			wantErr: "HERALD_NODE_ID must be 1 to 64 letters",
		},
		{
			// Each character just outside a range: '/' ':' '@' '[' '`' '{'.
			name:    "ErrNodeIDWithASlash",
			env:     map[string]string{"HERALD_NODE_ID": "node/1"},
			wantErr: "HERALD_NODE_ID must be 1 to 64 letters",
		},
		{name: "ErrNodeIDWithAColon", env: map[string]string{"HERALD_NODE_ID": "node:1"}, wantErr: "HERALD_NODE_ID must be"},
		{name: "ErrNodeIDWithAnAt", env: map[string]string{"HERALD_NODE_ID": "node@1"}, wantErr: "HERALD_NODE_ID must be"},
		{name: "ErrNodeIDWithABracket", env: map[string]string{"HERALD_NODE_ID": "node[1"}, wantErr: "HERALD_NODE_ID must be"},
		{name: "ErrNodeIDWithABacktick", env: map[string]string{"HERALD_NODE_ID": "node`1"}, wantErr: "HERALD_NODE_ID must be"},
		{name: "ErrNodeIDWithABrace", env: map[string]string{"HERALD_NODE_ID": "node{1"}, wantErr: "HERALD_NODE_ID must be"},
		{
			name: "OKAdminTokenOfTheLeastLength",
			env:  map[string]string{"HERALD_ADMIN_TOKEN": strings.Repeat("t", MinAdminTokenLength)},
			want: with(defaults, func(c *Config) { c.AdminToken = strings.Repeat("t", MinAdminTokenLength) }),
		},
		{
			name:    "ErrAdminTokenTooShort",
			env:     map[string]string{"HERALD_ADMIN_TOKEN": strings.Repeat("t", MinAdminTokenLength-1)},
			wantErr: "HERALD_ADMIN_TOKEN must be at least 16 characters long",
		},
		{
			name: "OKRecoveryWindowOff",
			env:  map[string]string{"HERALD_APP_ID": "1", "HERALD_APP_RECOVERY_WINDOW": "0"},
			want: with(defaults, func(c *Config) { c.AppID, c.AppRecoveryWindow = "1", new(time.Duration) }),
		},
		{
			name:    "ErrRecoveryWindowNegative",
			env:     map[string]string{"HERALD_APP_ID": "1", "HERALD_APP_RECOVERY_WINDOW": "-1s"},
			wantErr: `HERALD_APP_RECOVERY_WINDOW must be a duration such as 2m, or 0 for off, not "-1s"`,
		},
		{
			name:    "ErrWebPushAllowedHostWithPath",
			env:     map[string]string{"HERALD_WEBPUSH_ALLOWED_HOSTS": "push.example/path"},
			wantErr: `HERALD_WEBPUSH_ALLOWED_HOSTS: "push.example/path" is not a host name or IP address`,
		},
		{
			name:    "ErrWebPushAllowedHostBadPort",
			env:     map[string]string{"HERALD_WEBPUSH_ALLOWED_HOSTS": "127.0.0.1:99999"},
			wantErr: `HERALD_WEBPUSH_ALLOWED_HOSTS: "127.0.0.1:99999" has an invalid port`,
		},
		{
			name:    "ErrTrustedProxyName",
			env:     map[string]string{"HERALD_TRUSTED_PROXIES": "proxy.internal"},
			wantErr: `HERALD_TRUSTED_PROXIES: "proxy.internal" is neither an IP address nor a CIDR range`,
		},
		{
			name:    "ErrLogFormat",
			env:     map[string]string{"HERALD_LOG_FORMAT": "text"},
			wantErr: `HERALD_LOG_FORMAT must be json or console, not "text"`,
		},
		{
			name:    "ErrLogLevel",
			env:     map[string]string{"HERALD_LOG_LEVEL": "loud"},
			wantErr: "HERALD_LOG_LEVEL",
		},
		{
			name:    "ErrVAPIDSubjectHTTP",
			env:     map[string]string{"HERALD_VAPID_SUBJECT": "http://example.com"},
			wantErr: "HERALD_VAPID_SUBJECT must be a mailto: or https: URI",
		},
		{
			name:    "ErrVAPIDSubjectBareAddress",
			env:     map[string]string{"HERALD_VAPID_SUBJECT": "ops@example.com"},
			wantErr: "HERALD_VAPID_SUBJECT",
		},
		{
			name:    "ErrAppKeyWithoutAppID",
			env:     map[string]string{"HERALD_APP_KEY": "k"},
			wantErr: "need HERALD_APP_ID",
		},
		{
			name:    "ErrAppSecretWithoutAppID",
			env:     map[string]string{"HERALD_APP_SECRET": "s"},
			wantErr: "need HERALD_APP_ID",
		},
		{
			name:    "ErrAppWebhookURLWithoutAppID",
			env:     map[string]string{"HERALD_APP_WEBHOOK_URL": "https://example.com/hook"},
			wantErr: "need HERALD_APP_ID",
		},
		{
			name:    "ErrAppHistoryWithoutAppID",
			env:     map[string]string{"HERALD_APP_HISTORY_EVENTS": "10"},
			wantErr: "HERALD_APP_HISTORY_EVENTS, HERALD_APP_HISTORY_TTL and HERALD_APP_RECOVERY_WINDOW need HERALD_APP_ID",
		},
		{
			name:    "ErrAppPushInstanceWithoutAppID",
			env:     map[string]string{"HERALD_APP_PUSH_INSTANCE": "3f2504e0-4f89-41d3-9a0c-0305e82c3301"},
			wantErr: "HERALD_APP_PUSH_INSTANCE needs HERALD_APP_ID",
		},
		{
			name:    "ErrAppHistoryEventsNotANumber",
			env:     map[string]string{"HERALD_APP_ID": "1", "HERALD_APP_HISTORY_EVENTS": "-1"},
			wantErr: "HERALD_APP_HISTORY_EVENTS must be a whole number",
		},
		{
			name:    "ErrAppWebhookURLNotHTTP",
			env:     map[string]string{"HERALD_APP_ID": "1", "HERALD_APP_WEBHOOK_URL": "example.com/hook"},
			wantErr: "HERALD_APP_WEBHOOK_URL must be an http:// or https:// URL",
		},
		{
			// Named without user info and query, where credentials go.
			name:    "ErrAppWebhookURLNotHTTPRedacted",
			env:     map[string]string{"HERALD_APP_ID": "1", "HERALD_APP_WEBHOOK_URL": "ftp://user:hunter2@example.com/hook?token=hunter3"},
			wantErr: `HERALD_APP_WEBHOOK_URL must be an http:// or https:// URL, not "ftp://example.com/hook"`,
		},
		{
			name:    "ErrInstanceSecretWithoutInstanceID",
			env:     map[string]string{"HERALD_INSTANCE_SECRET_KEY": "s"},
			wantErr: "HERALD_INSTANCE_SECRET_KEY needs HERALD_INSTANCE_ID",
		},
		{
			name:    "ErrTLSCertWithoutKey",
			env:     map[string]string{"HERALD_TLS_CERT_FILE": "cert.pem"},
			wantErr: "HERALD_TLS_CERT_FILE and HERALD_TLS_KEY_FILE go together",
		},
		{
			name:    "ErrTLSKeyWithoutCert",
			env:     map[string]string{"HERALD_TLS_KEY_FILE": "key.pem"},
			wantErr: "HERALD_TLS_CERT_FILE and HERALD_TLS_KEY_FILE go together",
		},
		{
			name:    "ErrConfigFileMissing",
			env:     map[string]string{"HERALD_CONFIG": "/nonexistent/herald.toml"},
			wantErr: "configuration file: stat /nonexistent/herald.toml: no such file or directory",
		},
		{
			name:    "ErrPositionalArgument",
			args:    []string{"--addr", "127.0.0.1:0", "extra"},
			wantErr: `serve takes no arguments, got ["extra"]`,
		},
		{
			name:    "ErrUnknownFlag",
			args:    []string{"--port", "80"},
			wantErr: "flag provided but not defined: -port",
		},
		{
			name:    "ErrFlagWithoutValue",
			args:    []string{"--db"},
			wantErr: "flag needs an argument: -db",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			got, err := Load(tt.args, getenv(tt.env), &stderr)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load: got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Load:\n got %+v\nwant %+v", got, tt.want)
			}
			if stderr.Len() != 0 {
				t.Fatalf("Load wrote to stderr: %q", stderr.String())
			}
		})
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	env := map[string]string{"HERALD_LOG_FORMAT": "xml", "HERALD_LOG_LEVEL": "loud", "HERALD_APP_KEY": "k"}
	_, err := Load(nil, getenv(env), &bytes.Buffer{})
	if err == nil {
		t.Fatal("Load: got no error")
	}
	for _, want := range []string{"HERALD_LOG_FORMAT", "HERALD_LOG_LEVEL", "HERALD_APP_ID"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %s", err, want)
		}
	}
}

// HERALD_REDIS_CA_FILE: a PEM file of certificates, only with a rediss://
// HERALD_REDIS_URL; anything else stops the start, naming the variable.
func TestLoadRedisCAFile(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t)
	good := filepath.Join(dir, "ca.pem")
	ca.WriteCert(t, good)
	noCert := filepath.Join(dir, "key.pem")
	testcert.ReplaceFile(t, noCert, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("not a certificate")}))
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string // a part of the error message; empty: Load succeeds
	}{
		{name: "OKWithRediss", env: map[string]string{"HERALD_REDIS_URL": "rediss://redis.internal:6380/0", "HERALD_REDIS_CA_FILE": good}},
		{
			name:    "ErrPlainURL",
			env:     map[string]string{"HERALD_REDIS_URL": "redis://redis.internal:6379/0", "HERALD_REDIS_CA_FILE": good},
			wantErr: "HERALD_REDIS_CA_FILE needs a rediss:// HERALD_REDIS_URL",
		},
		{
			name:    "ErrNoURL",
			env:     map[string]string{"HERALD_REDIS_CA_FILE": good},
			wantErr: "HERALD_REDIS_CA_FILE needs a rediss:// HERALD_REDIS_URL",
		},
		{
			name:    "ErrMissingFile",
			env:     map[string]string{"HERALD_REDIS_URL": "rediss://redis.internal:6380/0", "HERALD_REDIS_CA_FILE": filepath.Join(dir, "none.pem")},
			wantErr: "HERALD_REDIS_CA_FILE: open " + filepath.Join(dir, "none.pem") + ": no such file or directory",
		},
		{
			name:    "ErrNoCertificate",
			env:     map[string]string{"HERALD_REDIS_URL": "rediss://redis.internal:6380/0", "HERALD_REDIS_CA_FILE": noCert},
			wantErr: "HERALD_REDIS_CA_FILE: " + noCert + " holds no PEM certificate",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(nil, getenv(tt.env), &bytes.Buffer{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load: got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got.RedisURL != tt.env["HERALD_REDIS_URL"] || got.RedisCAFile != tt.env["HERALD_REDIS_CA_FILE"] {
				t.Fatalf("Load: RedisURL %q, RedisCAFile %q", got.RedisURL, got.RedisCAFile)
			}
		})
	}
}

func TestLoadHelp(t *testing.T) {
	var stderr bytes.Buffer
	_, err := Load([]string{"--help"}, getenv(nil), &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Load --help: got %v, want flag.ErrHelp", err)
	}
	// A flag's usage names its variable, and its default only when it has one.
	for _, want := range []string{"-addr", "(HERALD_ADDR, default " + DefaultAddr + ")", "-db", "HERALD_DB", "(HERALD_CONFIG)"} {
		if !strings.Contains(stderr.String(), want) {
			t.Fatalf("help output %q does not mention %s", stderr.String(), want)
		}
	}
}

func TestLogger(t *testing.T) {
	t.Run("OKJSON", func(t *testing.T) {
		var buf bytes.Buffer
		log, err := Logger("json", "info", &buf)
		if err != nil {
			t.Fatal(err)
		}
		log.Debug("hidden")
		log.Info("hello")
		_ = log.Sync()
		out := buf.String()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 1 {
			t.Fatalf("got %d lines, want 1 (debug is below info): %q", len(lines), out)
		}
		var entry map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
			t.Fatalf("line %q is not JSON: %v", lines[0], err)
		}
		if entry["level"] != "info" || entry["msg"] != "hello" {
			t.Fatalf("got entry %v, want level info and msg hello", entry)
		}
		ts, ok := entry["time"].(string)
		if !ok {
			t.Fatalf("entry %v has no string time field", entry)
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts); err != nil {
			t.Fatalf("time %q is not ISO 8601: %v", ts, err)
		}
	})

	t.Run("OKConsole", func(t *testing.T) {
		var buf bytes.Buffer
		log, err := Logger("console", "debug", &buf)
		if err != nil {
			t.Fatal(err)
		}
		log.Debug("shown")
		_ = log.Sync()
		out := buf.String()
		if json.Valid([]byte(strings.TrimSpace(out))) {
			t.Fatalf("console output is JSON: %q", out)
		}
		if !strings.Contains(out, "\tDEBUG\t") || !strings.Contains(out, "shown") {
			t.Fatalf("got %q, want a console line with DEBUG and the message", out)
		}
	})

	t.Run("OKLevelFilters", func(t *testing.T) {
		var buf bytes.Buffer
		log, err := Logger("json", "warn", &buf)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("hidden")
		log.Warn("shown")
		_ = log.Sync()
		out := buf.String()
		if strings.Contains(out, "hidden") || !strings.Contains(out, "shown") {
			t.Fatalf("got %q, want only the warning", out)
		}
	})

	t.Run("ErrLevel", func(t *testing.T) {
		if _, err := Logger("json", "loud", io.Discard); err == nil {
			t.Fatal("Logger: got no error for level loud")
		}
	})
}

// HERALD_REDIS_URL: one redis:// or rediss:// URL, a list of them (shards),
// a redis-sentinel:// or a redis-cluster:// URL (server/cluster checks each
// further); another scheme stops the start, naming the variable.
func TestLoadRedisURLForms(t *testing.T) {
	for _, url := range []string{"redis://a:6379/0", "redis://a:6379,redis://b:6379", "redis-sentinel://a:26379,b:26379/herald", "redis-cluster://a:7000,b:7000"} {
		got, err := Load(nil, getenv(map[string]string{"HERALD_REDIS_URL": url}), &bytes.Buffer{})
		if err != nil || got.RedisURL != url {
			t.Fatalf("%s: %v", url, err)
		}
	}
	_, err := Load(nil, getenv(map[string]string{"HERALD_REDIS_URL": "http://a:6379"}), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "HERALD_REDIS_URL must be a redis://, rediss://, redis-sentinel:// or redis-cluster:// URL") {
		t.Fatalf("http://: %v", err)
	}
}
