package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/testkit"
	"github.com/heraldrt/herald/server/manage"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

var (
	uuidV4    = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	appID     = regexp.MustCompile(`^[1-9][0-9]{6}$`)
	lowerHex  = regexp.MustCompile(`^[0-9a-f]{20}$`)
	secretKey = regexp.MustCompile(`^[0-9A-F]{64}$`)
)

const instanceID = "3f2504e0-4f89-41d3-9a0c-0305e82c3301"

// observed returns a logger that records every entry at info and above.
func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.InfoLevel)
	return zap.New(core), logs
}

func run(t *testing.T, db *storage.DB, cfg config.Config, log *zap.Logger) {
	t.Helper()
	if err := Run(context.Background(), db, cfg, log); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func listApps(t *testing.T, db *storage.DB) []storage.App {
	t.Helper()
	apps, err := db.ListApps(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return apps
}

func listInstances(t *testing.T, db *storage.DB) []storage.Instance {
	t.Helper()
	list, err := db.ListInstances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func onlyApp(t *testing.T, db *storage.DB) storage.App {
	t.Helper()
	apps := listApps(t, db)
	if len(apps) != 1 {
		t.Fatalf("got %d apps, want 1: %+v", len(apps), apps)
	}
	return apps[0]
}

func onlyInstance(t *testing.T, db *storage.DB) storage.Instance {
	t.Helper()
	list := listInstances(t, db)
	if len(list) != 1 {
		t.Fatalf("got %d instances, want 1: %+v", len(list), list)
	}
	return list[0]
}

// writeFile writes content to a new file in a temporary directory and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fields returns the string fields of a log entry by key.
func fields(e observer.LoggedEntry) map[string]string {
	m := map[string]string{}
	for k, v := range e.ContextMap() {
		if s, ok := v.(string); ok {
			m[k] = s
		}
	}
	return m
}

func TestRunEmptyDatabase(t *testing.T) {
	db := testdb.New(t, storage.Open)
	log, logs := observed()
	run(t, db, config.Config{}, log)

	app := onlyApp(t, db)
	if !appID.MatchString(app.ID) {
		t.Fatalf("app id %q: want 7 digits", app.ID)
	}
	if !lowerHex.MatchString(app.Key) || !lowerHex.MatchString(app.Secret) {
		t.Fatalf("app key %q, secret %q: want 20 lower-case hex digits each", app.Key, app.Secret)
	}
	if app.Key == app.Secret {
		t.Fatal("app key and secret are equal")
	}
	if !app.Enabled || !app.ClientEvents || !app.SubscriptionCount || app.UserAuthTimeout != 0 {
		t.Fatalf("app options %+v: want enabled, client events, subscription count, no user auth timeout", app)
	}
	if app.MaxConnections != 0 || len(app.Webhooks) != 0 {
		t.Fatalf("app %+v: want no connection limit and no webhooks", app)
	}

	in := onlyInstance(t, db)
	if !uuidV4.MatchString(in.ID) {
		t.Fatalf("instance id %q is not a version 4 UUID", in.ID)
	}
	if !secretKey.MatchString(in.SecretKey) {
		t.Fatalf("instance secret key %q: want 64 upper-case hex digits", in.SecretKey)
	}
	if !in.Enabled {
		t.Fatal("instance is disabled")
	}
	testkit.CheckVAPID(t, in.VAPID.PublicKey, in.VAPID.PrivateKey)
	if in.VAPID.Subject != "" || in.APNs != (storage.APNsConfig{}) || in.FCM != (storage.FCMConfig{}) {
		t.Fatalf("instance has gateway settings nobody gave: %+v", in)
	}

	// The credentials are in the log exactly once each.
	appLogs := logs.FilterMessageSnippet("created the default Channels app").All()
	if len(appLogs) != 1 {
		t.Fatalf("got %d app creation entries, want 1: %+v", len(appLogs), logs.All())
	}
	if got, want := fields(appLogs[0]), map[string]string{"app_id": app.ID, "key": app.Key, "secret": app.Secret}; !reflect.DeepEqual(got, want) {
		t.Fatalf("app creation entry fields %v, want %v", got, want)
	}
	inLogs := logs.FilterMessageSnippet("created the Push instance").All()
	if len(inLogs) != 1 {
		t.Fatalf("got %d instance creation entries, want 1: %+v", len(inLogs), logs.All())
	}
	if got, want := fields(inLogs[0]), map[string]string{"instance_id": in.ID, "secret_key": in.SecretKey}; !reflect.DeepEqual(got, want) {
		t.Fatalf("instance creation entry fields %v, want %v", got, want)
	}
	if logs.Len() != 2 {
		t.Fatalf("got %d log entries, want 2: %+v", logs.Len(), logs.All())
	}

	// A restart creates nothing, changes no credentials and logs no secret.
	logs.TakeAll()
	run(t, db, config.Config{}, log)
	if logs.Len() != 0 {
		t.Fatalf("second Run logged %+v, want nothing", logs.All())
	}
	if again := onlyApp(t, db); again.ID != app.ID || again.Key != app.Key || again.Secret != app.Secret {
		t.Fatalf("after a restart the app is %+v, want %+v", again, app)
	}
	if again := onlyInstance(t, db); again.ID != in.ID || again.SecretKey != in.SecretKey || again.VAPID != in.VAPID {
		t.Fatalf("after a restart the instance is %+v, want %+v", again, in)
	}
}

func TestRunAppFromEnv(t *testing.T) {
	t.Run("OKCreateThenUpdate", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, logs := observed()
		cfg := config.Config{AppID: "42", AppKey: "key-1", AppSecret: "secret-1", AppWebhookURL: "https://example.com/hook"}
		run(t, db, cfg, log)

		app := onlyApp(t, db) // no random default app beside the named one
		if app.ID != "42" || app.Key != "key-1" || app.Secret != "secret-1" {
			t.Fatalf("got app %s key %s secret %s, want 42 key-1 secret-1", app.ID, app.Key, app.Secret)
		}
		if !app.Enabled || !app.ClientEvents || !app.SubscriptionCount || app.UserAuthTimeout != 0 {
			t.Fatalf("app options %+v: want the defaults", app)
		}
		if len(app.Webhooks) != 1 {
			t.Fatalf("got webhooks %+v, want one", app.Webhooks)
		}
		if w := app.Webhooks[0]; w.URL != "https://example.com/hook" || len(w.EventTypes) != 0 || w.ChannelPrefix != "" || w.Batch {
			t.Fatalf("got webhook %+v, want every event of every channel to https://example.com/hook", w)
		}
		created := logs.FilterMessageSnippet("created the Channels app from HERALD_APP_ID").All()
		if len(created) != 1 {
			t.Fatalf("got log %+v, want one creation entry", logs.All())
		}
		if got := fields(created[0]); got["app_id"] != "42" || got["key"] != "key-1" {
			t.Fatalf("creation entry fields %v, want app_id 42 and key key-1", got)
		}
		if logs.FilterFieldKey("secret").Len() != 0 {
			t.Fatal("the secret the operator gave was logged")
		}

		// Restart with new credentials: updated in place, the webhook is not
		// added a second time.
		cfg.AppKey, cfg.AppSecret = "key-2", "secret-2"
		logs.TakeAll()
		run(t, db, cfg, log)
		app = onlyApp(t, db)
		if app.ID != "42" || app.Key != "key-2" || app.Secret != "secret-2" {
			t.Fatalf("after the update got app %s key %s secret %s, want 42 key-2 secret-2", app.ID, app.Key, app.Secret)
		}
		if len(app.Webhooks) != 1 || app.Webhooks[0].URL != "https://example.com/hook" {
			t.Fatalf("after the update got webhooks %+v, want the one", app.Webhooks)
		}
		if logs.FilterFieldKey("secret").Len() != 0 || logs.FilterMessageSnippet("created").Len() != 0 {
			t.Fatalf("the update logged %+v", logs.All())
		}

		// Restart with only the id: the stored credentials stay.
		run(t, db, config.Config{AppID: "42"}, log)
		app = onlyApp(t, db)
		if app.Key != "key-2" || app.Secret != "secret-2" || len(app.Webhooks) != 1 {
			t.Fatalf("a restart with only HERALD_APP_ID changed the app: %+v", app)
		}
	})

	t.Run("OKGeneratedCredentials", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, _ := observed()
		run(t, db, config.Config{AppID: "9"}, log)
		app := onlyApp(t, db)
		if app.ID != "9" || !lowerHex.MatchString(app.Key) || !lowerHex.MatchString(app.Secret) {
			t.Fatalf("got app %+v, want id 9 with generated key and secret", app)
		}
	})

	t.Run("OKKeepsSettingsMadeWithTheCLI", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, _ := observed()
		cfg := config.Config{AppID: "42", AppKey: "key", AppSecret: "secret", AppWebhookURL: "https://example.com/hook"}
		run(t, db, cfg, log)
		app := onlyApp(t, db)
		app.Enabled = false
		app.MaxConnections = 10
		app.Webhooks = append(app.Webhooks, storage.Webhook{URL: "https://example.com/hook", EventTypes: []string{"member_added"}})
		if err := db.UpdateApp(context.Background(), app); err != nil {
			t.Fatal(err)
		}

		run(t, db, cfg, log)
		got := onlyApp(t, db)
		if got.Enabled || got.MaxConnections != 10 {
			t.Fatalf("a restart reset the app's options: %+v", got)
		}
		// The filtered webhook to the same URL does not count as the env one,
		// and the env one is not added again.
		if len(got.Webhooks) != 2 || len(got.Webhooks[0].EventTypes) != 0 || !reflect.DeepEqual(got.Webhooks[1].EventTypes, []string{"member_added"}) {
			t.Fatalf("got webhooks %+v, want the env one and the filtered one", got.Webhooks)
		}
	})

	t.Run("OKHistory", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, _ := observed()
		ten := 10
		run(t, db, config.Config{AppID: "42", AppHistoryEvents: &ten, AppHistoryTTL: 5 * time.Minute}, log)
		if app := onlyApp(t, db); app.HistoryEvents != 10 || app.HistoryTTL != 5*time.Minute {
			t.Fatalf("got history %d events, %s: want 10, 5m", app.HistoryEvents, app.HistoryTTL)
		}
		// Unset, the stored settings stay; HERALD_APP_HISTORY_EVENTS=0 turns it off.
		run(t, db, config.Config{AppID: "42"}, log)
		if app := onlyApp(t, db); app.HistoryEvents != 10 || app.HistoryTTL != 5*time.Minute {
			t.Fatalf("a restart without the history variables changed them: %d events, %s", app.HistoryEvents, app.HistoryTTL)
		}
		zero := 0
		run(t, db, config.Config{AppID: "42", AppHistoryEvents: &zero}, log)
		if app := onlyApp(t, db); app.HistoryEvents != 0 {
			t.Fatalf("HERALD_APP_HISTORY_EVENTS=0 left %d events", app.HistoryEvents)
		}
		tooMany := 5000
		err := Run(context.Background(), db, config.Config{AppID: "42", AppHistoryEvents: &tooMany}, log)
		if err == nil || !strings.Contains(err.Error(), "history events must be 0 (off) to 1000") {
			t.Fatalf("Run with 5000 history events: got %v, want the limit named", err)
		}
	})

	t.Run("OKRecoveryWindow", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, _ := observed()
		run(t, db, config.Config{AppID: "42"}, log)
		if app := onlyApp(t, db); app.RecoveryWindow != 2*time.Minute {
			t.Fatalf("a new app's recovery window is %s, want 2m", app.RecoveryWindow)
		}
		window := 30 * time.Second
		run(t, db, config.Config{AppID: "42", AppRecoveryWindow: &window}, log)
		if app := onlyApp(t, db); app.RecoveryWindow != window {
			t.Fatalf("HERALD_APP_RECOVERY_WINDOW=30s stored %s", app.RecoveryWindow)
		}
		run(t, db, config.Config{AppID: "42"}, log)
		if app := onlyApp(t, db); app.RecoveryWindow != window {
			t.Fatalf("a restart without HERALD_APP_RECOVERY_WINDOW changed it to %s", app.RecoveryWindow)
		}
		off := time.Duration(0)
		run(t, db, config.Config{AppID: "42", AppRecoveryWindow: &off}, log)
		if app := onlyApp(t, db); app.RecoveryWindow != storage.RecoveryOff {
			t.Fatalf("HERALD_APP_RECOVERY_WINDOW=0 stored %s, want off", app.RecoveryWindow)
		}
		tooLong := 200 * time.Hour
		err := Run(context.Background(), db, config.Config{AppID: "42", AppRecoveryWindow: &tooLong}, log)
		if err == nil || !strings.Contains(err.Error(), "HERALD_APP_RECOVERY_WINDOW") {
			t.Fatalf("Run with a 200h window: got %v, want the variable named", err)
		}
	})

	t.Run("OKPushInstance", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, _ := observed()
		const id = "3f2504e0-4f89-41d3-9a0c-0305e82c3301"
		// The instance HERALD_INSTANCE_ID creates in the same start.
		run(t, db, config.Config{AppID: "42", InstanceID: id, AppPushInstance: id}, log)
		if app := onlyApp(t, db); app.PushInstance != id {
			t.Fatalf("got push instance %q, want %q", app.PushInstance, id)
		}
		// Unset, the stored link stays; "none" unlinks.
		run(t, db, config.Config{AppID: "42"}, log)
		if app := onlyApp(t, db); app.PushInstance != id {
			t.Fatalf("a restart without HERALD_APP_PUSH_INSTANCE changed the link to %q", app.PushInstance)
		}
		run(t, db, config.Config{AppID: "42", AppPushInstance: "none"}, log)
		if app := onlyApp(t, db); app.PushInstance != "" {
			t.Fatalf("HERALD_APP_PUSH_INSTANCE=none left the link to %q", app.PushInstance)
		}
		// An instance created before, not named by HERALD_INSTANCE_ID.
		run(t, db, config.Config{AppID: "42", AppPushInstance: id}, log)
		if app := onlyApp(t, db); app.PushInstance != id {
			t.Fatalf("got push instance %q, want the existing %q", app.PushInstance, id)
		}
	})

	t.Run("ErrPushInstance", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, _ := observed()
		const missing = "0b5c9d7e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"
		err := Run(context.Background(), db, config.Config{AppID: "42", AppPushInstance: missing}, log)
		if err == nil || !strings.Contains(err.Error(), "HERALD_APP_PUSH_INSTANCE: there is no Push instance "+missing) {
			t.Fatalf("Run linked to a missing instance: got %v, want it named", err)
		}
		err = Run(context.Background(), db, config.Config{AppID: "42", AppPushInstance: "not-a-uuid"}, log)
		if err == nil || !strings.Contains(err.Error(), "the push instance must be a Push instance id (a UUID)") {
			t.Fatalf("Run linked to not-a-uuid: got %v, want the rule named", err)
		}
		if app := onlyApp(t, db); app.PushInstance != "" {
			t.Fatalf("a refused start linked the app to %q", app.PushInstance)
		}
	})

	t.Run("OKBesideTheDefaultApp", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, _ := observed()
		run(t, db, config.Config{}, log)
		run(t, db, config.Config{AppID: "42", AppKey: "key", AppSecret: "secret"}, log)
		if apps := listApps(t, db); len(apps) != 2 {
			t.Fatalf("got %d apps, want the default one and 42", len(apps))
		}
	})

	t.Run("ErrKeyTaken", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, _ := observed()
		run(t, db, config.Config{AppID: "1", AppKey: "taken"}, log)
		err := Run(context.Background(), db, config.Config{AppID: "2", AppKey: "taken"}, log)
		if !errors.Is(err, storage.ErrConflict) || !strings.Contains(err.Error(), "default app") {
			t.Fatalf("Run: got %v, want a default app conflict", err)
		}
	})
}

func TestRunInstanceFromEnv(t *testing.T) {
	gateways := func(t *testing.T) config.Config {
		return config.Config{
			APNsKeyFile:           writeFile(t, "apns.p8", "-----BEGIN PRIVATE KEY-----\nMIGT\n-----END PRIVATE KEY-----\n"),
			APNsKeyID:             "KEYID12345",
			APNsTeamID:            "TEAM123456",
			APNsTopic:             "com.example.app",
			APNsURL:               "http://127.0.0.1:8443",
			APNsCAFile:            writeFile(t, "ca.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
			FCMServiceAccountFile: writeFile(t, "fcm.json", `{"project_id":"p","token_uri":"http://127.0.0.1:8445/token"}`),
			FCMURL:                "http://127.0.0.1:8444",
			VAPIDSubject:          "mailto:ops@example.com",
		}
	}
	wantGateways := func(in *storage.Instance) {
		in.APNs = storage.APNsConfig{
			KeyPEM: "-----BEGIN PRIVATE KEY-----\nMIGT\n-----END PRIVATE KEY-----\n",
			KeyID:  "KEYID12345",
			TeamID: "TEAM123456",
			Topic:  "com.example.app",
			URL:    "http://127.0.0.1:8443",
			CAPEM:  "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
		}
		in.FCM = storage.FCMConfig{ServiceAccountJSON: `{"project_id":"p","token_uri":"http://127.0.0.1:8445/token"}`, URL: "http://127.0.0.1:8444"}
		in.VAPID.Subject = "mailto:ops@example.com"
	}

	t.Run("OKCreateThenUpdate", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, logs := observed()
		cfg := gateways(t)
		cfg.InstanceID, cfg.InstanceSecretKey = instanceID, "SECRET-1"
		run(t, db, cfg, log)

		in := onlyInstance(t, db) // no random default instance beside the named one
		testkit.CheckVAPID(t, in.VAPID.PublicKey, in.VAPID.PrivateKey)
		want := in
		want.ID, want.SecretKey, want.Enabled = instanceID, "SECRET-1", true
		wantGateways(&want)
		if !reflect.DeepEqual(in, want) {
			t.Fatalf("got instance\n%+v\nwant\n%+v", in, want)
		}
		created := logs.FilterMessageSnippet("created the Push instance").All()
		if len(created) != 1 || fields(created[0])["instance_id"] != instanceID {
			t.Fatalf("got log %+v, want one creation entry for %s", logs.All(), instanceID)
		}
		for _, e := range logs.All() {
			if strings.Contains(fmt.Sprint(e.Message, fields(e)), "SECRET-1") {
				t.Fatalf("the secret key the operator supplied was logged: %+v", e)
			}
		}

		// Restart with a new secret and one gateway variable: only those
		// change; the files already read and the VAPID keys stay.
		logs.TakeAll()
		run(t, db, config.Config{InstanceID: instanceID, InstanceSecretKey: "SECRET-2", APNsKeyID: "KEYID67890"}, log)
		got := onlyInstance(t, db)
		want.SecretKey, want.APNs.KeyID, want.UpdatedAt = "SECRET-2", "KEYID67890", got.UpdatedAt
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after the update got instance\n%+v\nwant\n%+v", got, want)
		}
		if logs.Len() != 0 {
			t.Fatalf("the update logged %+v, want nothing", logs.All())
		}
	})

	t.Run("OKGeneratedSecretKey", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, logs := observed()
		run(t, db, config.Config{InstanceID: instanceID}, log)
		in := onlyInstance(t, db)
		if in.ID != instanceID || !secretKey.MatchString(in.SecretKey) {
			t.Fatalf("got instance %s with secret key %q, want %s with a generated key", in.ID, in.SecretKey, instanceID)
		}
		// A generated key is logged once, as the only way to learn it at start.
		created := logs.FilterMessageSnippet("its secret key is logged only now").All()
		if len(created) != 1 || fields(created[0])["secret_key"] != in.SecretKey {
			t.Fatalf("got log %+v, want the generated key logged once", logs.All())
		}
	})

	t.Run("OKGatewaysApplyToTheOnlyInstance", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, _ := observed()
		run(t, db, config.Config{}, log)
		before := onlyInstance(t, db)

		run(t, db, gateways(t), log)
		got := onlyInstance(t, db)
		want := before
		wantGateways(&want)
		want.UpdatedAt = got.UpdatedAt
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got instance\n%+v\nwant\n%+v", got, want)
		}
	})

	t.Run("OKGatewaysOnFirstStart", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, _ := observed()
		run(t, db, gateways(t), log)
		in := onlyInstance(t, db)
		want := in
		wantGateways(&want)
		if !reflect.DeepEqual(in, want) {
			t.Fatalf("got instance\n%+v\nwant\n%+v", in, want)
		}
	})

	t.Run("ErrMissingKeyFile", func(t *testing.T) {
		db := testdb.New(t, storage.Open)
		log, _ := observed()
		missing := filepath.Join(t.TempDir(), "missing.p8")
		err := Run(context.Background(), db, config.Config{InstanceID: instanceID, APNsKeyFile: missing}, log)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "HERALD_APNS_KEY_FILE") {
			t.Fatalf("Run: got %v, want an error naming HERALD_APNS_KEY_FILE and %s", err, missing)
		}
		if n := len(listInstances(t, db)); n != 0 {
			t.Fatalf("got %d instances after the failure, want 0", n)
		}
	})
}

func TestRunSeveralInstances(t *testing.T) {
	setup := func(t *testing.T) (*storage.DB, []storage.Instance) {
		db := testdb.New(t, storage.Open)
		for range 2 {
			in, err := manage.NewInstance()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.CreateInstance(context.Background(), in); err != nil {
				t.Fatal(err)
			}
		}
		return db, listInstances(t, db)
	}
	const warning = "gateway variables ignored: several instances exist and HERALD_INSTANCE_ID does not name one"

	t.Run("OKWarnsAndChangesNothing", func(t *testing.T) {
		db, before := setup(t)
		log, logs := observed()
		run(t, db, config.Config{APNsTopic: "com.example.app"}, log)
		if got := logs.FilterMessage(warning).FilterLevelExact(zapcore.WarnLevel).Len(); got != 1 {
			t.Fatalf("got log %+v, want the warning once", logs.All())
		}
		if got := listInstances(t, db); !reflect.DeepEqual(got, before) {
			t.Fatalf("instances changed:\n got %+v\nwant %+v", got, before)
		}
	})

	t.Run("OKNoGatewayVariablesNoWarning", func(t *testing.T) {
		db, before := setup(t)
		log, logs := observed()
		run(t, db, config.Config{}, log)
		if warnings := logs.FilterLevelExact(zapcore.WarnLevel); warnings.Len() != 0 {
			t.Fatalf("got warnings %+v, want none", warnings.All())
		}
		if got := listInstances(t, db); !reflect.DeepEqual(got, before) {
			t.Fatalf("instances changed:\n got %+v\nwant %+v", got, before)
		}
	})

	t.Run("OKInstanceIDNamesOne", func(t *testing.T) {
		db, before := setup(t)
		log, logs := observed()
		run(t, db, config.Config{InstanceID: before[1].ID, APNsTopic: "com.example.app"}, log)
		if logs.FilterMessage(warning).Len() != 0 {
			t.Fatal("warned although HERALD_INSTANCE_ID names an instance")
		}
		got := listInstances(t, db)
		if got[0].APNs.Topic != "" || got[1].APNs.Topic != "com.example.app" {
			t.Fatalf("got topics %q and %q, want only the named instance's set", got[0].APNs.Topic, got[1].APNs.Topic)
		}
	})
}

// A setting that the admin API would refuse in the field it sets stops the
// start with an error naming the variable, before anything is written, and
// without the secret it holds: a non-UUID instance id, a key or secret with
// characters outside A-Z a-z 0-9 _ - ., the NUL character a TOML file can
// hold, a value over its length, a key file holding NUL.
func TestRunRefusesWhatTheAdminAPIRefuses(t *testing.T) {
	const secret = "s3cret:with/odd chars"
	for _, tt := range []struct {
		name, variable string
		cfg            func(t *testing.T) config.Config
	}{
		{"AppID", "HERALD_APP_ID", func(*testing.T) config.Config { return config.Config{AppID: "a/b"} }},
		{"AppKey", "HERALD_APP_KEY", func(*testing.T) config.Config { return config.Config{AppID: "42", AppKey: secret} }},
		{"AppSecret", "HERALD_APP_SECRET", func(*testing.T) config.Config { return config.Config{AppID: "42", AppSecret: secret} }},
		{"AppSecretNUL", "HERALD_APP_SECRET", func(*testing.T) config.Config { return config.Config{AppID: "42", AppSecret: "s3cret\x00"} }},
		{"AppWebhookURL", "HERALD_APP_WEBHOOK_URL", func(*testing.T) config.Config {
			return config.Config{AppID: "42", AppWebhookURL: "https://example.com/" + strings.Repeat("x", 3000)}
		}},
		{"AppPushInstance", "HERALD_APP_PUSH_INSTANCE", func(*testing.T) config.Config { return config.Config{AppID: "42", AppPushInstance: "nonexistent"} }},
		{"InstanceID", "HERALD_INSTANCE_ID", func(*testing.T) config.Config { return config.Config{InstanceID: "not-a-uuid"} }},
		{"InstanceIDBraced", "HERALD_INSTANCE_ID", func(*testing.T) config.Config { return config.Config{InstanceID: "{" + instanceID + "}"} }},
		{"InstanceSecretKeyNUL", "HERALD_INSTANCE_SECRET_KEY", func(*testing.T) config.Config {
			return config.Config{InstanceID: instanceID, InstanceSecretKey: "s3cret\x00key"}
		}},
		{"InstanceSecretKeyLong", "HERALD_INSTANCE_SECRET_KEY", func(*testing.T) config.Config {
			return config.Config{InstanceID: instanceID, InstanceSecretKey: strings.Repeat("s3cret", 50)}
		}},
		{"APNsTopic", "HERALD_APNS_TOPIC", func(*testing.T) config.Config { return config.Config{APNsTopic: strings.Repeat("t", 300)} }},
		{"APNsKeyFileNUL", "HERALD_APNS_KEY_FILE", func(t *testing.T) config.Config {
			return config.Config{InstanceID: instanceID, APNsKeyFile: writeFile(t, "apns.p8", "-----BEGIN PRIVATE KEY-----\x00")}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := testdb.New(t, storage.Open)
			log, logs := observed()
			err := Run(context.Background(), db, tt.cfg(t), log)
			if err == nil || !strings.HasPrefix(err.Error(), tt.variable+": ") || !manage.IsInvalid(err) {
				t.Fatalf("Run: %v, want a refusal naming %s", err, tt.variable)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the refusal shows the secret: %v", err)
			}
			if apps, ins := listApps(t, db), listInstances(t, db); len(apps) != 0 || len(ins) != 0 || logs.Len() != 0 {
				t.Fatalf("after the refusal: %d apps, %d instances, %d log entries; want nothing done", len(apps), len(ins), logs.Len())
			}
		})
	}
}
