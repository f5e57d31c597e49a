package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/gen/admin"
	"github.com/heraldrt/herald/gen/adminclient"
	"github.com/heraldrt/herald/server/console/traffic"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/manage"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

const adminToken = "admin-token-for-tests-0123"

type adminServer struct {
	db      *storage.DB
	hub     *hub.Hub
	traffic *traffic.Recorder // the traffic charts the console's endpoints read
	// triggered are the events the Channels API's hook was told of, as
	// "app channel event data".
	triggeredMu sync.Mutex
	triggered   []string
	url         string
	spec        *specChecker
	client      *adminclient.ClientWithResponses // sends the token
	anon        *adminclient.ClientWithResponses // sends no token
}

func newAdminServer(t *testing.T) *adminServer {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	db := testdb.New(t, storage.Open)
	s := &adminServer{db: db, hub: hub.New(log), spec: newSpecChecker(t, admin.GetSpec)}
	engine := NewEngine(log)
	engine.Use(s.spec.middleware)
	// The node's source of the charts: triggers and deliveries as the hub counts them.
	s.traffic = traffic.New(traffic.Sources{Apps: traffic.HubApps(s.hub)}, traffic.Options{})
	channels := NewChannelsAPI(s.hub, testApps, log, ChannelsOptions{
		History: eventlog.NewMemory(eventlog.Limits{}),
		OnTrigger: func(appID, channel, event, data string) {
			s.triggeredMu.Lock()
			defer s.triggeredMu.Unlock()
			s.triggered = append(s.triggered, strings.Join([]string{appID, channel, event, data}, " "))
		},
	})
	Mount(engine, Routes{Admin: NewAdminAPI(db, s.hub, ConsoleParts{Channels: channels, History: s.traffic, Node: "node-a"}, log, AdminOptions{}), AdminToken: adminToken})
	srv := httptest.NewServer(engine)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	bearer := adminclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+adminToken)
		return nil
	})
	var err error
	if s.client, err = adminclient.NewClientWithResponses(srv.URL, bearer); err != nil {
		t.Fatal(err)
	}
	if s.anon, err = adminclient.NewClientWithResponses(srv.URL); err != nil {
		t.Fatal(err)
	}
	return s
}

func errKind(body []byte) string {
	var e struct{ Error, Description string }
	if json.Unmarshal(body, &e) != nil || e.Description == "" {
		return "<not the error body: " + string(body) + ">"
	}
	return e.Error
}

func TestAdminApps(t *testing.T) {
	s := newAdminServer(t)
	ctx := context.Background()

	created, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{
		ID: ptr("42"), Key: ptr("key-42"), Secret: ptr("secret-42"), MaxConnections: ptr(10),
		Webhooks: &[]adminclient.Webhook{{URL: "https://example.com/hook", EventTypes: &[]adminclient.WebhookKind{"member_added"}, Batch: ptr(true)}},
	})
	if err != nil || created.JSON201 == nil {
		t.Fatalf("create: %v %d %s", err, created.StatusCode(), created.Body)
	}
	a := created.JSON201
	if a.ID != "42" || a.Key != "key-42" || !a.Enabled || !a.ClientEvents || a.MaxConnections != 10 || a.MaxPresenceMembers != storage.DefaultMaxPresenceMembers ||
		len(a.Webhooks) != 1 || !*a.Webhooks[0].Batch || (*a.Webhooks[0].EventTypes)[0] != "member_added" {
		t.Fatalf("created %+v", a)
	}
	// Defaults: a random id, key and secret.
	auto, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{})
	if err != nil || auto.JSON201 == nil || auto.JSON201.ID == "" || auto.JSON201.Secret == "" {
		t.Fatalf("create with defaults: %v %s", err, auto.Body)
	}

	t.Run("OKGet", func(t *testing.T) {
		res, err := s.client.GetAppWithResponse(ctx, "42")
		if err != nil || res.JSON200 == nil || res.JSON200.Secret != "secret-42" {
			t.Fatalf("get: %v %s", err, res.Body)
		}
	})
	t.Run("OKList", func(t *testing.T) {
		res, err := s.client.ListAppsWithResponse(ctx)
		if err != nil || res.JSON200 == nil || len(res.JSON200.Apps) != 2 {
			t.Fatalf("list: %v %s", err, res.Body)
		}
	})
	t.Run("OKUpdateOnlyGiven", func(t *testing.T) {
		res, err := s.client.UpdateAppWithResponse(ctx, "42", adminclient.AppUpdate{ClientEvents: ptr(false), UserAuthTimeoutMs: ptr(30000)})
		if err != nil || res.JSON200 == nil {
			t.Fatalf("update: %v %s", err, res.Body)
		}
		if u := res.JSON200; u.ClientEvents || u.UserAuthTimeoutMs != 30000 || u.Key != "key-42" || u.MaxConnections != 10 || len(u.Webhooks) != 1 {
			t.Fatalf("updated %+v", u)
		}
	})
	t.Run("OKUpdateClearsWebhooks", func(t *testing.T) {
		res, err := s.client.UpdateAppWithResponse(ctx, "42", adminclient.AppUpdate{Webhooks: &[]adminclient.Webhook{}})
		if err != nil || res.JSON200 == nil || len(res.JSON200.Webhooks) != 0 {
			t.Fatalf("update: %v %s", err, res.Body)
		}
	})
	t.Run("OKRotateSecret", func(t *testing.T) {
		res, err := s.client.RotateAppSecretWithResponse(ctx, "42")
		if err != nil || res.JSON200 == nil || res.JSON200.Secret == "secret-42" || res.JSON200.Secret == "" {
			t.Fatalf("rotate: %v %s", err, res.Body)
		}
	})
	t.Run("OKDisableEnable", func(t *testing.T) {
		res, err := s.client.DisableAppWithResponse(ctx, "42")
		if err != nil || res.JSON200 == nil || res.JSON200.Enabled {
			t.Fatalf("disable: %v %s", err, res.Body)
		}
		if stored, _ := s.db.GetApp(ctx, "42"); stored.Enabled {
			t.Fatal("stored app still enabled")
		}
		en, err := s.client.EnableAppWithResponse(ctx, "42")
		if err != nil || en.JSON200 == nil || !en.JSON200.Enabled {
			t.Fatalf("enable: %v %s", err, en.Body)
		}
	})
	t.Run("OKPushInstance", func(t *testing.T) {
		const id = "3f2504e0-4f89-41d3-9a0c-0305e82c3301"
		if _, err := s.db.CreateInstance(ctx, storage.Instance{ID: id, SecretKey: "k", Enabled: true}); err != nil {
			t.Fatal(err)
		}
		res, err := s.client.UpdateAppWithResponse(ctx, "42", adminclient.AppUpdate{PushInstance: ptr(id)})
		if err != nil || res.JSON200 == nil || res.JSON200.PushInstance == nil || *res.JSON200.PushInstance != id {
			t.Fatalf("link: %v %s", err, res.Body)
		}
		if stored, _ := s.db.GetApp(ctx, "42"); stored.PushInstance != id {
			t.Fatalf("stored link %q", stored.PushInstance)
		}
		const other = "0b5c9d7e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"
		for _, bad := range []string{other, "not-a-uuid"} {
			r, err := s.client.UpdateAppWithResponse(ctx, "42", adminclient.AppUpdate{PushInstance: ptr(bad)})
			if err != nil || r.StatusCode() != 400 || errKind(r.Body) != "invalid_app" || !strings.Contains(string(r.Body), bad) {
				t.Fatalf("link to %s: %v %d %s", bad, err, r.StatusCode(), r.Body)
			}
		}
		c, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{PushInstance: ptr(other)})
		if err != nil || c.StatusCode() != 400 || errKind(c.Body) != "invalid_app" {
			t.Fatalf("create linked to %s: %v %d %s", other, err, c.StatusCode(), c.Body)
		}
		res, err = s.client.UpdateAppWithResponse(ctx, "42", adminclient.AppUpdate{PushInstance: ptr("")})
		if err != nil || res.JSON200 == nil || res.JSON200.PushInstance != nil {
			t.Fatalf("unlink: %v %s", err, res.Body)
		}
	})
	t.Run("OKLive", func(t *testing.T) {
		c := subscriber(t, s.hub, "42", "alice", "news", "presence-room")
		defer s.hub.Remove(c)
		res, err := s.client.GetAppLiveWithResponse(ctx, "42")
		if err != nil || res.JSON200 == nil {
			t.Fatalf("live: %v %s", err, res.Body)
		}
		l := res.JSON200
		if l.Connections != 1 || len(l.Channels) != 2 || l.Channels[0].Name != "news" || l.Channels[0].Subscriptions != 1 || l.Channels[0].Members != nil ||
			l.Channels[1].Name != "presence-room" || *l.Channels[1].Users != 1 || (*l.Channels[1].Members)[0] != "alice" {
			t.Fatalf("live %+v", l)
		}
	})

	errs := []struct {
		name   string
		call   func() (int, []byte, error)
		status int
		kind   string
	}{
		{"ErrNoToken", func() (int, []byte, error) {
			r, err := s.anon.ListAppsWithResponse(ctx)
			return r.StatusCode(), r.Body, err
		}, 401, "unauthorized"},
		{"ErrWrongToken", func() (int, []byte, error) {
			r, err := s.anon.GetAppWithResponse(ctx, "42", func(_ context.Context, r *http.Request) error {
				r.Header.Set("Authorization", "Bearer "+adminToken+"x")
				return nil
			})
			return r.StatusCode(), r.Body, err
		}, 401, "unauthorized"},
		{"ErrNotFound", func() (int, []byte, error) {
			r, err := s.client.GetAppWithResponse(ctx, "404")
			return r.StatusCode(), r.Body, err
		}, 404, "app_not_found"},
		{"ErrUpdateNotFound", func() (int, []byte, error) {
			r, err := s.client.UpdateAppWithResponse(ctx, "404", adminclient.AppUpdate{Enabled: ptr(true)})
			return r.StatusCode(), r.Body, err
		}, 404, "app_not_found"},
		{"ErrDuplicateID", func() (int, []byte, error) {
			r, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr("42")})
			return r.StatusCode(), r.Body, err
		}, 409, "app_exists"},
		{"ErrDuplicateKey", func() (int, []byte, error) {
			r, err := s.client.UpdateAppWithResponse(ctx, auto.JSON201.ID, adminclient.AppUpdate{Key: ptr("key-42")})
			return r.StatusCode(), r.Body, err
		}, 409, "app_exists"},
		{"ErrBadID", func() (int, []byte, error) {
			r, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr("a b")})
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_app"},
		{"ErrEmptySecret", func() (int, []byte, error) {
			r, err := s.client.UpdateAppWithResponse(ctx, "42", adminclient.AppUpdate{Secret: ptr("")})
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_app"},
		{"ErrNegativeLimit", func() (int, []byte, error) {
			r, err := s.client.UpdateAppWithResponse(ctx, "42", adminclient.AppUpdate{MaxConnections: ptr(-1)})
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_app"},
		{"ErrWebhookURL", func() (int, []byte, error) {
			r, err := s.client.UpdateAppWithResponse(ctx, "42", adminclient.AppUpdate{Webhooks: &[]adminclient.Webhook{{URL: "ftp://x"}}})
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_app"},
		{"ErrWebhookKind", func() (int, []byte, error) {
			r, err := s.client.UpdateAppWithResponse(ctx, "42", adminclient.AppUpdate{Webhooks: &[]adminclient.Webhook{{URL: "https://x", EventTypes: &[]adminclient.WebhookKind{"nope"}}}})
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_app"},
		{"ErrNotJSON", func() (int, []byte, error) {
			r, err := s.client.CreateAppWithBodyWithResponse(ctx, "application/json", strings.NewReader(`{"id":`))
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_request"},
		{"ErrWrongType", func() (int, []byte, error) {
			r, err := s.client.CreateAppWithBodyWithResponse(ctx, "application/json", strings.NewReader(`{"maxConnections":"ten"}`))
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_request"},
		{"ErrLiveNotFound", func() (int, []byte, error) {
			r, err := s.client.GetAppLiveWithResponse(ctx, "404")
			return r.StatusCode(), r.Body, err
		}, 404, "app_not_found"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			status, body, err := tt.call()
			if err != nil {
				t.Fatal(err)
			}
			if status != tt.status || errKind(body) != tt.kind {
				t.Fatalf("got %d %s, want %d %s", status, body, tt.status, tt.kind)
			}
		})
	}

	t.Run("OKDelete", func(t *testing.T) {
		res, err := s.client.DeleteAppWithResponse(ctx, "42")
		if err != nil || res.StatusCode() != 200 || strings.TrimSpace(string(res.Body)) != "{}" {
			t.Fatalf("delete: %v %d %s", err, res.StatusCode(), res.Body)
		}
		again, _ := s.client.DeleteAppWithResponse(ctx, "42")
		if again.StatusCode() != 404 {
			t.Fatalf("second delete: %d", again.StatusCode())
		}
	})
	for _, op := range []string{"listapps", "createapp", "getapp", "updateapp", "deleteapp", "rotateappsecret", "disableapp", "enableapp", "getapplive"} {
		if !s.spec.seen[op+" 200"] && !s.spec.seen[op+" 201"] {
			t.Errorf("%s never succeeded", op)
		}
	}
}

func TestAdminInstances(t *testing.T) {
	s := newAdminServer(t)
	ctx := context.Background()
	const id = "6f2b8a8e-3c1d-4a55-9a0e-1c2d3e4f5a6b"

	created, err := s.client.CreateInstanceWithResponse(ctx, adminclient.InstanceCreate{
		ID: ptr(id), ApnsKeyPem: ptr("-----BEGIN PRIVATE KEY-----\n..."), ApnsKeyID: ptr("KEY1"), ApnsTeamID: ptr("TEAM1"),
		ApnsTopic: ptr("com.example.app"), FcmURL: ptr("http://127.0.0.1:9999"), VapidSubject: ptr("mailto:ops@example.com"), PublishQuota: ptr(5),
	})
	if err != nil || created.JSON201 == nil {
		t.Fatalf("create: %v %d %s", err, created.StatusCode(), created.Body)
	}
	in := created.JSON201
	if in.ID != id || !in.Enabled || in.SecretKey == "" || !in.Apns.KeyConfigured || in.Apns.KeyID != "KEY1" || in.Fcm.ServiceAccountConfigured ||
		in.Fcm.URL != "http://127.0.0.1:9999" || in.Vapid.PublicKey == "" || in.Vapid.Subject != "mailto:ops@example.com" || in.PublishQuota != 5 || in.Devices != 0 {
		t.Fatalf("created %+v", in)
	}
	if strings.Contains(string(created.Body), "BEGIN PRIVATE KEY") {
		t.Fatal("the APNs key is returned")
	}
	if _, _, err := s.db.RegisterDevice(ctx, storage.Device{ID: "fcm-1", InstanceID: id, Platform: storage.PlatformFCM, Token: "t1"}); err != nil {
		t.Fatal(err)
	}

	t.Run("OKGetCountsDevices", func(t *testing.T) {
		res, err := s.client.GetInstanceWithResponse(ctx, id)
		if err != nil || res.JSON200 == nil || res.JSON200.Devices != 1 {
			t.Fatalf("get: %v %s", err, res.Body)
		}
	})
	t.Run("OKList", func(t *testing.T) {
		res, err := s.client.ListInstancesWithResponse(ctx)
		if err != nil || res.JSON200 == nil || len(res.JSON200.Instances) != 1 {
			t.Fatalf("list: %v %s", err, res.Body)
		}
	})
	t.Run("OKUpdate", func(t *testing.T) {
		res, err := s.client.UpdateInstanceWithResponse(ctx, id, adminclient.InstanceUpdate{JwtIssuer: ptr("https://auth.example.com"), PublishQuota: ptr(0)})
		if err != nil || res.JSON200 == nil || res.JSON200.JwtIssuer != "https://auth.example.com" || res.JSON200.PublishQuota != 0 || res.JSON200.Apns.KeyID != "KEY1" {
			t.Fatalf("update: %v %s", err, res.Body)
		}
	})
	t.Run("OKRotateDisableEnable", func(t *testing.T) {
		rot, err := s.client.RotateInstanceSecretWithResponse(ctx, id)
		if err != nil || rot.JSON200 == nil || rot.JSON200.SecretKey == in.SecretKey {
			t.Fatalf("rotate: %v %s", err, rot.Body)
		}
		dis, err := s.client.DisableInstanceWithResponse(ctx, id)
		if err != nil || dis.JSON200 == nil || dis.JSON200.Enabled {
			t.Fatalf("disable: %v %s", err, dis.Body)
		}
		en, err := s.client.EnableInstanceWithResponse(ctx, id)
		if err != nil || en.JSON200 == nil || !en.JSON200.Enabled {
			t.Fatalf("enable: %v %s", err, en.Body)
		}
	})
	for _, tt := range []struct {
		name   string
		call   func() (int, []byte, error)
		status int
		kind   string
	}{
		{"ErrNoToken", func() (int, []byte, error) {
			r, err := s.anon.ListInstancesWithResponse(ctx)
			return r.StatusCode(), r.Body, err
		}, 401, "unauthorized"},
		{"ErrNotUUID", func() (int, []byte, error) {
			r, err := s.client.CreateInstanceWithResponse(ctx, adminclient.InstanceCreate{ID: ptr("nope")})
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_instance"},
		{"ErrDuplicate", func() (int, []byte, error) {
			r, err := s.client.CreateInstanceWithResponse(ctx, adminclient.InstanceCreate{ID: ptr(id)})
			return r.StatusCode(), r.Body, err
		}, 409, "instance_exists"},
		{"ErrVAPIDSubject", func() (int, []byte, error) {
			r, err := s.client.UpdateInstanceWithResponse(ctx, id, adminclient.InstanceUpdate{VapidSubject: ptr("http://x")})
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_instance"},
		{"ErrEmptySecret", func() (int, []byte, error) {
			r, err := s.client.UpdateInstanceWithResponse(ctx, id, adminclient.InstanceUpdate{SecretKey: ptr("")})
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_instance"},
		{"ErrNotFound", func() (int, []byte, error) {
			r, err := s.client.GetInstanceWithResponse(ctx, "00000000-0000-0000-0000-000000000000")
			return r.StatusCode(), r.Body, err
		}, 404, "instance_not_found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body, err := tt.call()
			if err != nil {
				t.Fatal(err)
			}
			if status != tt.status || errKind(body) != tt.kind {
				t.Fatalf("got %d %s, want %d %s", status, body, tt.status, tt.kind)
			}
		})
	}
	t.Run("OKDelete", func(t *testing.T) {
		res, err := s.client.DeleteInstanceWithResponse(ctx, id)
		if err != nil || res.StatusCode() != 200 {
			t.Fatalf("delete: %v %s", err, res.Body)
		}
		if _, err := s.db.GetInstance(ctx, id); err == nil {
			t.Fatal("instance still stored")
		}
	})
}

// An app's recovery window in the admin API: 120000 ms for a new app that
// gives none, 0 off (storage's RecoveryOff), kept by an update that leaves
// it out; a window past the longest history TTL, negative, beyond a
// duration or not whole milliseconds is refused with the admin API's 400
// (invalid_app; the binding's invalid_request for a number that is no
// integer), and nothing is stored.
func TestAdminRecoveryWindow(t *testing.T) {
	s := newAdminServer(t)
	ctx := context.Background()
	maxMs := int(manage.MaxHistoryTTL.Milliseconds())
	stored := func(t *testing.T, id string) time.Duration {
		t.Helper()
		a, err := s.db.GetApp(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return a.RecoveryWindow
	}
	for _, tt := range []struct {
		name   string
		give   *int
		wantMs int
		stored time.Duration
	}{
		{"Default", nil, 120000, storage.DefaultRecoveryWindow},
		{"Off", ptr(0), 0, storage.RecoveryOff},
		{"HalfAMinute", ptr(30000), 30000, 30 * time.Second},
		{"LongestHistory", ptr(maxMs), maxMs, manage.MaxHistoryTTL},
	} {
		t.Run("Create"+tt.name, func(t *testing.T) {
			id := "rw" + tt.name
			res, err := s.client.CreateAppWithResponse(ctx, adminclient.AppCreate{ID: ptr(id), HistoryEvents: ptr(10), RecoveryWindowMs: tt.give})
			if err != nil || res.JSON201 == nil || res.JSON201.RecoveryWindowMs != tt.wantMs {
				t.Fatalf("create: %v %s, want recoveryWindowMs %d", err, res.Body, tt.wantMs)
			}
			if got := stored(t, id); got != tt.stored {
				t.Fatalf("stored %v, want %v", got, tt.stored)
			}
			if got, err := s.client.GetAppWithResponse(ctx, id); err != nil || got.JSON200 == nil || got.JSON200.RecoveryWindowMs != tt.wantMs {
				t.Fatalf("get: %v %s, want recoveryWindowMs %d", err, got.Body, tt.wantMs)
			}
		})
	}

	update := func(t *testing.T, o adminclient.AppUpdate, wantMs int, want time.Duration) {
		t.Helper()
		res, err := s.client.UpdateAppWithResponse(ctx, "rwDefault", o)
		if err != nil || res.JSON200 == nil || res.JSON200.RecoveryWindowMs != wantMs {
			t.Fatalf("update: %v %s, want recoveryWindowMs %d", err, res.Body, wantMs)
		}
		if got := stored(t, "rwDefault"); got != want {
			t.Fatalf("stored %v, want %v", got, want)
		}
	}
	t.Run("UpdateOff", func(t *testing.T) { update(t, adminclient.AppUpdate{RecoveryWindowMs: ptr(0)}, 0, storage.RecoveryOff) })
	t.Run("UpdateLeftOutKeepsOff", func(t *testing.T) { update(t, adminclient.AppUpdate{ClientEvents: ptr(false)}, 0, storage.RecoveryOff) })
	t.Run("UpdateOn", func(t *testing.T) {
		update(t, adminclient.AppUpdate{RecoveryWindowMs: ptr(45000)}, 45000, 45*time.Second)
	})
	t.Run("UpdateLeftOutKeepsIt", func(t *testing.T) {
		update(t, adminclient.AppUpdate{HistoryTTLMs: ptr(60000)}, 45000, 45*time.Second)
		// The update's own duration is stored in its unit, milliseconds.
		if a, err := s.db.GetApp(ctx, "rwDefault"); err != nil || a.HistoryTTL != time.Minute {
			t.Fatalf("stored history TTL %v (%v), want 1m", a.HistoryTTL, err)
		}
	})

	const wraps = 288230376151712744 // × 1,000,000 ns wraps around to 1 s
	for _, tt := range []struct {
		name, body, kind string
	}{
		{"PastLongestHistory", fmt.Sprintf(`{"historyEvents":10,"recoveryWindowMs":%d}`, maxMs+1), KindInvalidApp},
		{"Negative", `{"historyEvents":10,"recoveryWindowMs":-1}`, KindInvalidApp},
		{"BeyondADuration", fmt.Sprintf(`{"historyEvents":10,"recoveryWindowMs":%d}`, wraps), KindInvalidApp},
		// Not an integer: the binding's 400, as for every integer field.
		{"NotWholeMs", `{"historyEvents":10,"recoveryWindowMs":1.5}`, KindInvalidRequest},
	} {
		t.Run("Refused"+tt.name, func(t *testing.T) {
			created, err := s.client.CreateAppWithBodyWithResponse(ctx, "application/json", strings.NewReader(`{"id":"rwRefused",`+tt.body[1:]))
			if err != nil || created.StatusCode() != http.StatusBadRequest || errKind(created.Body) != tt.kind {
				t.Fatalf("create: %v %d %s, want 400 %s", err, created.StatusCode(), created.Body, tt.kind)
			}
			if res, err := s.client.GetAppWithResponse(ctx, "rwRefused"); err != nil || res.StatusCode() != http.StatusNotFound {
				t.Fatalf("after a refused create: %v %d, want no app", err, res.StatusCode())
			}
			updated, err := s.client.UpdateAppWithBodyWithResponse(ctx, "rwDefault", "application/json", strings.NewReader(tt.body))
			if err != nil || updated.StatusCode() != http.StatusBadRequest || errKind(updated.Body) != tt.kind {
				t.Fatalf("update: %v %d %s, want 400 %s", err, updated.StatusCode(), updated.Body, tt.kind)
			}
			if got := stored(t, "rwDefault"); got != 45*time.Second {
				t.Fatalf("after a refused update: stored %v, want 45s", got)
			}
		})
	}
}

// The admin API caps request bodies, shows whether an APNs CA is set, and
// lists up to 100 recent publishes.
func TestAdminLimitsAndFlags(t *testing.T) {
	s := newAdminServer(t)
	ctx := context.Background()
	big := `{"id":"x","pad":"` + strings.Repeat(" ", MaxAdminBodyBytes) + `"}`
	req, _ := http.NewRequest("POST", s.url+"/admin/v1/apps", strings.NewReader(big))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over %d bytes: status %d, want 413", MaxAdminBodyBytes, res.StatusCode)
	}

	for _, tc := range []struct {
		id, ca string
		want   bool
	}{{"8b4d0c0a-5e3f-4c77-9c20-3e4f5a6b7c8d", "-----BEGIN CERTIFICATE-----\n...", true}, {"9c5e1d1b-6f4a-4d88-8d31-4f5a6b7c8d9e", "", false}} {
		if _, err := s.db.CreateInstance(ctx, storage.Instance{ID: tc.id, SecretKey: "s", Enabled: true, APNs: storage.APNsConfig{CAPEM: tc.ca}}); err != nil {
			t.Fatal(err)
		}
		got, err := s.client.GetInstanceWithResponse(ctx, tc.id)
		if err != nil || got.JSON200 == nil || got.JSON200.Apns.CaConfigured != tc.want {
			t.Errorf("instance with CA %q: %v %s, want caConfigured %v", tc.ca, err, got.Body, tc.want)
		}
		list, err := s.client.ListInstancePublishesWithResponse(ctx, tc.id, &adminclient.ListInstancePublishesParams{Limit: ptr(100)})
		if err != nil || list.StatusCode() != 200 {
			t.Errorf("100 recent publishes: %v %d %s", err, list.StatusCode(), list.Body)
		}
	}
}
