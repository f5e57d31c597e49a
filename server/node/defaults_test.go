package node

import (
	"strconv"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/server/webhook"
	"github.com/heraldrt/herald/server/ws"
)

// The defaults of the environment (config.Vars, which the docs and
// `herald env` print) are those the packages fall back to: a default is
// stated in its package and config must agree with it.
func TestConfigDefaultsAgreeWithThePackages(t *testing.T) {
	durations := map[string]time.Duration{
		"HERALD_ACTIVITY_TIMEOUT":   ws.DefaultActivityTimeout,
		"HERALD_PONG_TIMEOUT":       ws.DefaultPongTimeout,
		"HERALD_HTTP_READ_TIMEOUT":  DefaultReadTimeout,
		"HERALD_HTTP_WRITE_TIMEOUT": DefaultWriteTimeout,
		"HERALD_IDEMPOTENCY_TTL":    idempotency.DefaultTTL,
		"HERALD_PUSH_LEASE":         push.DefaultLease,
	}
	counts := map[string]int{
		"HERALD_WEBHOOK_MAX_QUEUED":    webhook.DefaultMaxQueued,
		"HERALD_IDEMPOTENCY_MAX_KEYS":  idempotency.DefaultMaxKeys,
		"HERALD_IDEMPOTENCY_MAX_BYTES": idempotency.DefaultMaxBytes,
		"HERALD_ANON_RATE_LIMIT":       config.DefaultAnonRateLimit,
		"HERALD_HISTORY_MAX_BYTES":     eventlog.DefaultMaxBytes,
		"HERALD_HISTORY_MAX_CHANNELS":  eventlog.DefaultMaxChannels,
	}
	defaults := map[string]string{}
	for _, v := range config.Vars {
		defaults[v.Name] = v.Default
	}
	for name, want := range durations {
		got, err := time.ParseDuration(defaults[name])
		if err != nil || got != want {
			t.Errorf("%s defaults to %q in config, the package to %v", name, defaults[name], want)
		}
	}
	for name, want := range counts {
		got, err := strconv.Atoi(defaults[name])
		if err != nil || got != want {
			t.Errorf("%s defaults to %q in config, the package to %d", name, defaults[name], want)
		}
	}
}

// A zero Options is what `herald serve` runs with: the certificate files
// checked every 2 s, the directories every second; a field set is kept.
func TestOptionsDefaults(t *testing.T) {
	if o := (Options{}).WithDefaults(); o.CertPoll != 2*time.Second || o.DirectoryReload != time.Second {
		t.Fatalf("defaults: certificate poll %v, directory reload %v; want 2s and 1s", o.CertPoll, o.DirectoryReload)
	}
	if o := (Options{CertPoll: time.Hour, DirectoryReload: time.Minute}).WithDefaults(); o.CertPoll != time.Hour || o.DirectoryReload != time.Minute {
		t.Fatalf("set: certificate poll %v, directory reload %v; want 1h and 1m", o.CertPoll, o.DirectoryReload)
	}
}
