package storage

import (
	"testing"
	"time"

	"github.com/heraldrt/herald/storage/testdb"
)

// testApp returns an app with every field set to a non-zero value.
func testApp(id, key string) App {
	return App{
		ID:                       id,
		Key:                      key,
		Secret:                   "secret-" + id,
		Enabled:                  true,
		ClientEvents:             true,
		SubscriptionCount:        true,
		UserAuthTimeout:          30 * time.Second,
		MaxConnections:           500,
		MaxPresenceMembers:       50,
		MaxPresenceUserInfoBytes: 2048,
		HistoryEvents:            25,
		HistoryTTL:               5 * time.Minute,
		RecoveryWindow:           30 * time.Second,
		Webhooks: []Webhook{
			{URL: "https://example.com/hook", EventTypes: []string{"channel_occupied", "channel_vacated"}, ChannelPrefix: "private-", Batch: true},
			{URL: "https://example.com/all"},
		},
	}
}

func TestCreateApp(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		db := testdb.New(t, Open)
		before := time.Now().Add(-time.Millisecond)
		in := testApp("1", "key1")
		got, err := db.CreateApp(t.Context(), in)
		checkErr(t, "CreateApp", err, nil)

		if got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now()) {
			t.Fatalf("CreatedAt: got %v, want about now", got.CreatedAt)
		}
		check(t, "UpdatedAt", got.UpdatedAt, got.CreatedAt)
		if got.Webhooks[0].ID == 0 || got.Webhooks[1].ID == 0 {
			t.Fatalf("webhook IDs not set: %+v", got.Webhooks)
		}
		want := in
		want.CreatedAt, want.UpdatedAt = got.CreatedAt, got.UpdatedAt
		want.Webhooks = []Webhook{in.Webhooks[0], in.Webhooks[1]}
		want.Webhooks[0].ID, want.Webhooks[1].ID = got.Webhooks[0].ID, got.Webhooks[1].ID
		check(t, "created app", got, want)

		stored, err := db.GetApp(t.Context(), "1")
		checkErr(t, "GetApp", err, nil)
		check(t, "stored app", stored, got)
	})

	t.Run("ZeroFields", func(t *testing.T) {
		db := testdb.New(t, Open)
		got, err := db.CreateApp(t.Context(), App{ID: "1", Key: "key1", Webhooks: []Webhook{{URL: "https://example.com", EventTypes: []string{}}}})
		checkErr(t, "CreateApp", err, nil)
		check(t, "MaxPresenceMembers", got.MaxPresenceMembers, DefaultMaxPresenceMembers)
		check(t, "RecoveryWindow", got.RecoveryWindow, DefaultRecoveryWindow)
		check(t, "MaxPresenceUserInfoBytes", got.MaxPresenceUserInfoBytes, DefaultMaxPresenceUserInfoBytes)
		check(t, "HistoryEvents", got.HistoryEvents, 0)
		check(t, "HistoryTTL", got.HistoryTTL, time.Duration(0)) // no history, no age limit
		check(t, "EventTypes", got.Webhooks[0].EventTypes, nil)

		stored, err := db.GetApp(t.Context(), "1")
		checkErr(t, "GetApp", err, nil)
		check(t, "stored app", stored, got)
	})

	t.Run("ErrConflictDuplicateID", func(t *testing.T) {
		db := testdb.New(t, Open)
		_, err := db.CreateApp(t.Context(), testApp("1", "key1"))
		checkErr(t, "first CreateApp", err, nil)
		_, err = db.CreateApp(t.Context(), testApp("1", "key2"))
		checkErr(t, "second CreateApp", err, ErrConflict)
	})

	t.Run("ErrConflictDuplicateKey", func(t *testing.T) {
		db := testdb.New(t, Open)
		_, err := db.CreateApp(t.Context(), testApp("1", "key1"))
		checkErr(t, "first CreateApp", err, nil)
		_, err = db.CreateApp(t.Context(), testApp("2", "key1"))
		checkErr(t, "second CreateApp", err, ErrConflict)

		n, err := db.CountApps(t.Context())
		checkErr(t, "CountApps", err, nil)
		check(t, "apps", n, 1)
	})
}

func TestGetApp(t *testing.T) {
	db := testdb.New(t, Open)
	want, err := db.CreateApp(t.Context(), testApp("1", "key1"))
	checkErr(t, "CreateApp", err, nil)

	t.Run("OK", func(t *testing.T) {
		got, err := db.GetApp(t.Context(), "1")
		checkErr(t, "GetApp", err, nil)
		check(t, "app", got, want)
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := db.GetApp(t.Context(), "key1")
		checkErr(t, "GetApp", err, ErrNotFound)
	})
}

func TestGetAppByKey(t *testing.T) {
	db := testdb.New(t, Open)
	want, err := db.CreateApp(t.Context(), testApp("1", "key1"))
	checkErr(t, "CreateApp", err, nil)

	t.Run("OK", func(t *testing.T) {
		got, err := db.GetAppByKey(t.Context(), "key1")
		checkErr(t, "GetAppByKey", err, nil)
		check(t, "app", got, want)
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := db.GetAppByKey(t.Context(), "1")
		checkErr(t, "GetAppByKey", err, ErrNotFound)
	})
}

func TestListApps(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		db := testdb.New(t, Open)
		// Created out of order, with webhooks interleaved between apps.
		b, err := db.CreateApp(t.Context(), testApp("b", "keyb"))
		checkErr(t, "CreateApp b", err, nil)
		noHooks := testApp("c", "keyc")
		noHooks.Webhooks = nil
		c, err := db.CreateApp(t.Context(), noHooks)
		checkErr(t, "CreateApp c", err, nil)
		a, err := db.CreateApp(t.Context(), testApp("a", "keya"))
		checkErr(t, "CreateApp a", err, nil)

		got, err := db.ListApps(t.Context())
		checkErr(t, "ListApps", err, nil)
		check(t, "apps", got, []App{a, b, c})
	})

	t.Run("Empty", func(t *testing.T) {
		db := testdb.New(t, Open)
		got, err := db.ListApps(t.Context())
		checkErr(t, "ListApps", err, nil)
		check(t, "apps", len(got), 0)
	})
}

func TestUpdateApp(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		db := testdb.New(t, Open)
		created, err := db.CreateApp(t.Context(), testApp("1", "key1"))
		checkErr(t, "CreateApp", err, nil)

		update := App{
			ID:                       "1",
			Key:                      "key1-new",
			Secret:                   "secret-new",
			Enabled:                  false,
			ClientEvents:             false,
			SubscriptionCount:        false,
			UserAuthTimeout:          0,
			MaxConnections:           0,
			MaxPresenceMembers:       7,
			MaxPresenceUserInfoBytes: 64,
			HistoryEvents:            3,
			HistoryTTL:               0, // stored as the default, since history is on
			RecoveryWindow:           RecoveryOff,
			Webhooks:                 []Webhook{{URL: "https://example.org/new", EventTypes: []string{"client_event"}}},
			CreatedAt:                time.Unix(1, 0), // ignored
		}
		checkErr(t, "UpdateApp", db.UpdateApp(t.Context(), update), nil)

		got, err := db.GetApp(t.Context(), "1")
		checkErr(t, "GetApp", err, nil)
		check(t, "CreatedAt", got.CreatedAt, created.CreatedAt)
		if got.UpdatedAt.Before(created.UpdatedAt) {
			t.Fatalf("UpdatedAt: got %v, before CreatedAt %v", got.UpdatedAt, created.UpdatedAt)
		}
		check(t, "webhooks", len(got.Webhooks), 1)
		want := update
		want.CreatedAt, want.UpdatedAt = got.CreatedAt, got.UpdatedAt
		want.Webhooks[0].ID = got.Webhooks[0].ID
		want.HistoryTTL = DefaultHistoryTTL
		check(t, "updated app", got, want)

		_, err = db.GetAppByKey(t.Context(), "key1")
		checkErr(t, "GetAppByKey old key", err, ErrNotFound)
		var webhooks int
		if err := db.reader.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM app_webhooks").Scan(&webhooks); err != nil {
			t.Fatal(err)
		}
		check(t, "webhook rows", webhooks, 1)
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		db := testdb.New(t, Open)
		err := db.UpdateApp(t.Context(), testApp("1", "key1"))
		checkErr(t, "UpdateApp", err, ErrNotFound)
	})

	t.Run("ErrConflictDuplicateKey", func(t *testing.T) {
		db := testdb.New(t, Open)
		_, err := db.CreateApp(t.Context(), testApp("1", "key1"))
		checkErr(t, "CreateApp 1", err, nil)
		want, err := db.CreateApp(t.Context(), testApp("2", "key2"))
		checkErr(t, "CreateApp 2", err, nil)

		update := testApp("2", "key1")
		update.Webhooks = nil
		checkErr(t, "UpdateApp", db.UpdateApp(t.Context(), update), ErrConflict)

		got, err := db.GetApp(t.Context(), "2")
		checkErr(t, "GetApp", err, nil)
		check(t, "app after failed update", got, want)
	})
}

func TestDeleteApp(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		db := testdb.New(t, Open)
		_, err := db.CreateApp(t.Context(), testApp("1", "key1"))
		checkErr(t, "CreateApp 1", err, nil)
		other, err := db.CreateApp(t.Context(), testApp("2", "key2"))
		checkErr(t, "CreateApp 2", err, nil)

		checkErr(t, "DeleteApp", db.DeleteApp(t.Context(), "1"), nil)

		_, err = db.GetApp(t.Context(), "1")
		checkErr(t, "GetApp deleted", err, ErrNotFound)
		var webhooks int
		if err := db.reader.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM app_webhooks WHERE app_id = '1'").Scan(&webhooks); err != nil {
			t.Fatal(err)
		}
		check(t, "webhook rows of deleted app", webhooks, 0)
		got, err := db.ListApps(t.Context())
		checkErr(t, "ListApps", err, nil)
		check(t, "remaining apps", got, []App{other})
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		db := testdb.New(t, Open)
		checkErr(t, "DeleteApp", db.DeleteApp(t.Context(), "1"), ErrNotFound)
	})
}

func TestCountApps(t *testing.T) {
	db := testdb.New(t, Open)
	for i, id := range []string{"1", "2", "3"} {
		n, err := db.CountApps(t.Context())
		checkErr(t, "CountApps", err, nil)
		check(t, "apps", n, i)
		_, err = db.CreateApp(t.Context(), testApp(id, "key"+id))
		checkErr(t, "CreateApp", err, nil)
	}
	n, err := db.CountApps(t.Context())
	checkErr(t, "CountApps", err, nil)
	check(t, "apps", n, 3)
}

func TestWebhookTakes(t *testing.T) {
	for _, tt := range []struct {
		name          string
		w             Webhook
		kind, channel string
		want          bool
	}{
		{"OKEveryKindEveryChannel", Webhook{}, "client_event", "any", true},
		{"OKListedKind", Webhook{EventTypes: []string{"member_added", "member_removed"}}, "member_removed", "presence-a", true},
		{"OKPrefix", Webhook{ChannelPrefix: "presence-"}, "channel_occupied", "presence-a", true},
		{"OKKindAndPrefix", Webhook{EventTypes: []string{"cache_miss"}, ChannelPrefix: "cache-"}, "cache_miss", "cache-x", true},
		{"NoUnlistedKind", Webhook{EventTypes: []string{"member_added"}}, "channel_occupied", "presence-a", false},
		{"NoOtherPrefix", Webhook{ChannelPrefix: "presence-"}, "channel_occupied", "private-a", false},
		{"NoKindRightPrefixWrong", Webhook{EventTypes: []string{"cache_miss"}, ChannelPrefix: "cache-"}, "cache_miss", "private-cache-x", false},
	} {
		if got := tt.w.Takes(tt.kind, tt.channel); got != tt.want {
			t.Errorf("%s: Takes(%q, %q) = %v, want %v", tt.name, tt.kind, tt.channel, got, tt.want)
		}
	}
}

// linkedApp is a database with an instance and app 1 linked to it.
func linkedApp(t *testing.T) *DB {
	t.Helper()
	db := testdb.New(t, Open)
	_, err := db.CreateInstance(t.Context(), testInstance(instanceID))
	checkErr(t, "CreateInstance", err, nil)
	app := testApp("1", "key1")
	app.PushInstance = instanceID
	_, err = db.CreateApp(t.Context(), app)
	checkErr(t, "CreateApp", err, nil)
	return db
}

func TestAppPushInstance(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		db := linkedApp(t)
		got, err := db.GetApp(t.Context(), "1")
		checkErr(t, "GetApp", err, nil)
		check(t, "PushInstance", got.PushInstance, instanceID)

		// Unlinked by an update with none.
		got.PushInstance = ""
		checkErr(t, "UpdateApp", db.UpdateApp(t.Context(), got), nil)
		got, err = db.GetApp(t.Context(), "1")
		checkErr(t, "GetApp", err, nil)
		check(t, "PushInstance after unlinking", got.PushInstance, "")
	})

	t.Run("OKInstanceDeletedUnlinks", func(t *testing.T) {
		db := linkedApp(t)
		checkErr(t, "DeleteInstance", db.DeleteInstance(t.Context(), instanceID), nil)
		got, err := db.GetApp(t.Context(), "1")
		checkErr(t, "GetApp", err, nil)
		check(t, "PushInstance of an app whose instance was deleted", got.PushInstance, "")
	})

	t.Run("ErrUnknownInstance", func(t *testing.T) {
		db := testdb.New(t, Open)
		app := testApp("1", "key1")
		app.PushInstance = instanceID
		_, err := db.CreateApp(t.Context(), app)
		checkErr(t, "CreateApp", err, ErrUnknownInstance)
		app.PushInstance = ""
		_, err = db.CreateApp(t.Context(), app)
		checkErr(t, "CreateApp", err, nil)
		app.PushInstance = instanceID
		checkErr(t, "UpdateApp", db.UpdateApp(t.Context(), app), ErrUnknownInstance)
	})
}
