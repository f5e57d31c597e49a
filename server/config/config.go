// Package config reads Herald's settings from flags and HERALD_* environment
// variables (a flag wins over its variable) and builds the logger.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config is everything `herald serve` needs. Every field names its variable
// and default.
type Config struct {
	Addr      string // HERALD_ADDR, --addr: listen address; default 127.0.0.1:8080 (port 0 picks a free port)
	DB        string // HERALD_DB, --db: SQLite file; default ./herald.db
	LogFormat string // HERALD_LOG_FORMAT: json (default) or console
	LogLevel  string // HERALD_LOG_LEVEL: debug, info (default), warn, error

	// The default Channels app, created or updated at start when AppID is set.
	AppID         string // HERALD_APP_ID
	AppKey        string // HERALD_APP_KEY
	AppSecret     string // HERALD_APP_SECRET
	AppWebhookURL string // HERALD_APP_WEBHOOK_URL: webhook endpoint for every event kind

	// The default Push instance, created or updated at start when InstanceID is set.
	InstanceID        string // HERALD_INSTANCE_ID (a UUID)
	InstanceSecretKey string // HERALD_INSTANCE_SECRET_KEY

	// Gateway credentials of the default instance.
	APNsKeyFile           string // HERALD_APNS_KEY_FILE: .p8 key
	APNsKeyID             string // HERALD_APNS_KEY_ID
	APNsTeamID            string // HERALD_APNS_TEAM_ID
	APNsTopic             string // HERALD_APNS_TOPIC
	APNsURL               string // HERALD_APNS_URL: default https://api.push.apple.com
	APNsCAFile            string // HERALD_APNS_CA_FILE: extra CA to trust
	FCMServiceAccountFile string // HERALD_FCM_SERVICE_ACCOUNT_FILE
	FCMURL                string // HERALD_FCM_URL: default https://fcm.googleapis.com
	VAPIDSubject          string // HERALD_VAPID_SUBJECT: mailto: or https: URI

	// WebSocket tuning.
	ActivityTimeout time.Duration // HERALD_ACTIVITY_TIMEOUT: idle time before the server pings a client; default 120s
	PongTimeout     time.Duration // HERALD_PONG_TIMEOUT: time a pinged client has to answer; default 30s

	// Operations.
	MetricsAddr string // HERALD_METRICS_ADDR: when set, GET /metrics is served on this address only, not on Addr; default empty (served on Addr)
	AdminToken  string // HERALD_ADMIN_TOKEN: bearer token of the admin API (/admin/v1) and the console (/console); default empty, which disables both (404)
}

// Defaults.
const (
	DefaultAddr = "127.0.0.1:8080"
	DefaultDB   = "./herald.db"
)

// Load parses the serve flags in args over the environment given by getenv.
func Load(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	c := Config{
		LogFormat:             env("HERALD_LOG_FORMAT", "json"),
		LogLevel:              env("HERALD_LOG_LEVEL", "info"),
		AppID:                 getenv("HERALD_APP_ID"),
		AppKey:                getenv("HERALD_APP_KEY"),
		AppSecret:             getenv("HERALD_APP_SECRET"),
		AppWebhookURL:         getenv("HERALD_APP_WEBHOOK_URL"),
		InstanceID:            getenv("HERALD_INSTANCE_ID"),
		InstanceSecretKey:     getenv("HERALD_INSTANCE_SECRET_KEY"),
		APNsKeyFile:           getenv("HERALD_APNS_KEY_FILE"),
		APNsKeyID:             getenv("HERALD_APNS_KEY_ID"),
		APNsTeamID:            getenv("HERALD_APNS_TEAM_ID"),
		APNsTopic:             getenv("HERALD_APNS_TOPIC"),
		APNsURL:               getenv("HERALD_APNS_URL"),
		APNsCAFile:            getenv("HERALD_APNS_CA_FILE"),
		FCMServiceAccountFile: getenv("HERALD_FCM_SERVICE_ACCOUNT_FILE"),
		FCMURL:                getenv("HERALD_FCM_URL"),
		VAPIDSubject:          getenv("HERALD_VAPID_SUBJECT"),
		MetricsAddr:           getenv("HERALD_METRICS_ADDR"),
		AdminToken:            getenv("HERALD_ADMIN_TOKEN"),
	}
	fs := flag.NewFlagSet("herald serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Addr, "addr", env("HERALD_ADDR", DefaultAddr), "listen address (HERALD_ADDR)")
	fs.StringVar(&c.DB, "db", env("HERALD_DB", DefaultDB), "SQLite database file (HERALD_DB)")
	var durErrs []error
	duration := func(name string, dst *time.Duration) {
		if v := getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				durErrs = append(durErrs, fmt.Errorf("%s must be a positive duration such as 30s, not %q", name, v))
			}
			*dst = d
		}
	}
	duration("HERALD_ACTIVITY_TIMEOUT", &c.ActivityTimeout)
	duration("HERALD_PONG_TIMEOUT", &c.PongTimeout)
	if err := errors.Join(durErrs...); err != nil {
		return Config{}, err
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	return c, c.validate()
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
	if c.AppWebhookURL != "" && !strings.HasPrefix(c.AppWebhookURL, "http://") && !strings.HasPrefix(c.AppWebhookURL, "https://") {
		errs = append(errs, fmt.Errorf("HERALD_APP_WEBHOOK_URL must be an http:// or https:// URL, not %q", c.AppWebhookURL))
	}
	if c.InstanceID == "" && c.InstanceSecretKey != "" {
		errs = append(errs, errors.New("HERALD_INSTANCE_SECRET_KEY needs HERALD_INSTANCE_ID"))
	}
	if c.VAPIDSubject != "" && !strings.HasPrefix(c.VAPIDSubject, "mailto:") && !strings.HasPrefix(c.VAPIDSubject, "https:") {
		errs = append(errs, fmt.Errorf("HERALD_VAPID_SUBJECT must be a mailto: or https: URI, not %q", c.VAPIDSubject))
	}
	if c.AdminToken != "" && len(c.AdminToken) < MinAdminTokenLength {
		errs = append(errs, fmt.Errorf("HERALD_ADMIN_TOKEN must be at least %d characters long", MinAdminTokenLength))
	}
	return errors.Join(errs...)
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
