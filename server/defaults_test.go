package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/node"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/server/webhook"
	"github.com/heraldrt/herald/server/ws"
	"github.com/heraldrt/herald/storage"
)

// lookup returns the config.Var of name.
func lookup(t *testing.T, name string) config.Var {
	t.Helper()
	for _, v := range config.Vars {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no Var %s", name)
	return config.Var{}
}

// A package falls back to a default of its own when given zero (a test, a
// caller without config): each such default is the one config.Vars
// declares, so there is one value however Herald is started. Checked here,
// where every package is linked: config imports none of them (it only reads
// settings), and its tests, which make check-docs runs, stay as light.
func TestPackageDefaultsAreVars(t *testing.T) {
	for _, tt := range []struct {
		name string
		pkg  any // the package's default: a time.Duration or an int
	}{
		{"HERALD_ACTIVITY_TIMEOUT", ws.DefaultActivityTimeout},
		{"HERALD_PONG_TIMEOUT", ws.DefaultPongTimeout},
		{"HERALD_HTTP_READ_TIMEOUT", node.DefaultReadTimeout},
		{"HERALD_HTTP_WRITE_TIMEOUT", node.DefaultWriteTimeout},
		{"HERALD_PUSH_LEASE", push.DefaultLease},
		{"HERALD_WEBHOOK_MAX_QUEUED", webhook.DefaultMaxQueued},
		{"HERALD_IDEMPOTENCY_TTL", idempotency.DefaultTTL},
		{"HERALD_IDEMPOTENCY_MAX_KEYS", idempotency.DefaultMaxKeys},
		{"HERALD_IDEMPOTENCY_MAX_BYTES", idempotency.DefaultMaxBytes},
		{"HERALD_HISTORY_MAX_BYTES", eventlog.DefaultMaxBytes},
		{"HERALD_HISTORY_MAX_CHANNELS", eventlog.DefaultMaxChannels},
		{"HERALD_ANON_RATE_LIMIT", config.DefaultAnonRateLimit},
	} {
		def := lookup(t, tt.name).Default
		var err error
		var got any
		switch tt.pkg.(type) {
		case time.Duration:
			got, err = time.ParseDuration(def)
		default:
			got, err = strconv.Atoi(def)
		}
		if err != nil || got != tt.pkg {
			t.Errorf("%s defaults to %q in Vars, its package to %v", tt.name, def, tt.pkg)
		}
	}
}

// Where a setting's unset value is a package's default that Load leaves to
// the package (an empty gateway URL, a new app's history), its doc names
// that value: check that it is the package's.
func TestDocsNameThePackagesValues(t *testing.T) {
	for _, tt := range []struct{ name, value string }{
		{"HERALD_APNS_URL", push.DefaultAPNsURL},
		{"HERALD_FCM_URL", push.DefaultFCMURL},
		{"HERALD_APP_HISTORY_TTL", "`" + strings.TrimSuffix(storage.DefaultHistoryTTL.String(), "0m0s") + "`"},
		{"HERALD_ADMIN_TOKEN", fmt.Sprintf("at least %d characters", config.MinAdminTokenLength)},
	} {
		if doc := lookup(t, tt.name).Doc; !strings.Contains(doc, tt.value) {
			t.Errorf("%s's doc %q does not name %s", tt.name, doc, tt.value)
		}
	}
}
