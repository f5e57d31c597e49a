package storage

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldrt/herald/storage/testdb"
	"github.com/heraldrt/herald/storage/testpg"
)

// Every string an API stores is refused with ErrInvalidText when it holds
// the NUL character, raw or (in a JSON column) as the \u0000 escape, on
// SQLite as on PostgreSQL (HERALD_TEST_DB=postgres), where the database
// itself would refuse it with an error of its own; and nothing is stored.
func TestNULIsRefusedInEveryStoredString(t *testing.T) {
	const nul = "a\x00b"
	db := openDeviceDB(t)
	ctx := t.Context()
	app := testApp("nul-app", "nul-key")
	if _, err := db.CreateApp(ctx, app); err != nil {
		t.Fatal(err)
	}
	dev := registerTestDevice(t, db, PlatformFCM, "nul-token")
	withApp := func(change func(*App)) App {
		a := testApp("nul-app-2", "nul-key-2")
		change(&a)
		return a
	}
	withInstance := func(change func(*Instance)) Instance {
		in := testInstance("00000000-0000-4000-8000-00000000000a")
		change(&in)
		return in
	}
	publish := func(targets []string, payload string) error {
		_, err := db.CreatePublish(ctx, Publish{ID: "nul-publish", InstanceID: instanceID, TargetKind: TargetUsers, Targets: targets,
			Payload: json.RawMessage(payload)}, 0, time.Time{})
		return err
	}
	for _, tt := range []struct {
		name  string
		write func(context.Context) error
	}{
		{"AppID", func(ctx context.Context) error {
			_, err := db.CreateApp(ctx, withApp(func(a *App) { a.ID = nul }))
			return err
		}},
		{"AppKey", func(ctx context.Context) error {
			_, err := db.CreateApp(ctx, withApp(func(a *App) { a.Key = nul }))
			return err
		}},
		{"AppSecret", func(ctx context.Context) error {
			a := app
			a.Secret = nul
			return db.UpdateApp(ctx, a)
		}},
		{"WebhookURL", func(ctx context.Context) error {
			a := app
			a.Webhooks = []Webhook{{URL: "https://example.test/" + nul}}
			return db.UpdateApp(ctx, a)
		}},
		{"WebhookPrefix", func(ctx context.Context) error {
			a := app
			a.Webhooks = []Webhook{{URL: "https://example.test/", ChannelPrefix: nul}}
			return db.UpdateApp(ctx, a)
		}},
		{"InstanceSecret", func(ctx context.Context) error {
			_, err := db.CreateInstance(ctx, withInstance(func(in *Instance) { in.SecretKey = nul }))
			return err
		}},
		{"InstanceIssuer", func(ctx context.Context) error {
			_, err := db.CreateInstance(ctx, withInstance(func(in *Instance) { in.JWTIssuer = nul }))
			return err
		}},
		{"APNsTopic", func(ctx context.Context) error {
			_, err := db.CreateInstance(ctx, withInstance(func(in *Instance) { in.APNs.Topic = nul }))
			return err
		}},
		{"DeviceToken", func(ctx context.Context) error {
			_, _, err := db.RegisterDevice(ctx, Device{InstanceID: instanceID, Platform: PlatformAPNs, Token: nul})
			return err
		}},
		{"DeviceTokenStartingWithNUL", func(ctx context.Context) error {
			_, _, err := db.RegisterDevice(ctx, Device{InstanceID: instanceID, Platform: PlatformAPNs, Token: "\x00b"})
			return err
		}},
		{"DeviceBundle", func(ctx context.Context) error {
			_, _, err := db.RegisterDevice(ctx, Device{InstanceID: instanceID, Platform: PlatformAPNs, Token: "t", BundleIdentifier: nul})
			return err
		}},
		{"DeviceMetadataValue", func(ctx context.Context) error {
			_, _, err := db.RegisterDevice(ctx, Device{InstanceID: instanceID, Platform: PlatformFCM, Token: "t", Metadata: map[string]string{"sdkVersion": nul}})
			return err
		}},
		{"DeviceMetadataUpdate", func(ctx context.Context) error {
			return db.UpdateDeviceMetadata(ctx, instanceID, PlatformFCM, dev.ID, map[string]string{nul: "1"})
		}},
		{"DeviceTokenUpdate", func(ctx context.Context) error {
			return db.UpdateDeviceToken(ctx, instanceID, PlatformFCM, dev.ID, nul)
		}},
		{"UserID", func(ctx context.Context) error { return db.SetDeviceUser(ctx, instanceID, PlatformFCM, dev.ID, nul) }},
		{"Interest", func(ctx context.Context) error {
			return db.AddDeviceInterest(ctx, instanceID, PlatformFCM, dev.ID, nul)
		}},
		{"Interests", func(ctx context.Context) error {
			return db.SetDeviceInterests(ctx, instanceID, PlatformFCM, dev.ID, []string{"ok", nul})
		}},
		{"ImportedDevice", func(ctx context.Context) error {
			return db.ImportDevices(ctx, []DeviceImport{{Device: Device{ID: "fcm-imported", InstanceID: instanceID, Platform: PlatformFCM, Token: nul}}})
		}},
		{"ReportDeviceID", func(ctx context.Context) error {
			_, err := db.RecordReportEvent(ctx, ReportEvent{InstanceID: instanceID, PublishID: "p", DeviceID: nul, Kind: ReportKind("delivery")})
			return err
		}},
		{"PublishTarget", func(ctx context.Context) error { return publish([]string{"u1", nul}, `{"fcm":{}}`) }},
		{"PublishPayloadEscape", func(ctx context.Context) error { return publish([]string{"u1"}, `{"fcm":{"data":{"k":"a\u0000b"}}}`) }},
		{"PublishWebhook", func(ctx context.Context) error {
			_, err := db.CreatePublish(ctx, Publish{ID: "nul-publish", InstanceID: instanceID, TargetKind: TargetUsers, Targets: []string{"u1"},
				Payload: json.RawMessage(`{"fcm":{}}`), WebhookURL: "https://example.test/" + nul}, 0, time.Time{})
			return err
		}},
		{"LookupUser", func(ctx context.Context) error { _, err := db.DeleteUser(ctx, instanceID, nul); return err }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, tt.name, tt.write(ctx), ErrInvalidText)
		})
	}

	// What was there before is untouched, and nothing else was stored.
	got, err := db.GetDevice(ctx, instanceID, PlatformFCM, dev.ID)
	checkErr(t, "GetDevice", err, nil)
	check(t, "device", got, dev)
	interests, _, err := db.DeviceInterests(ctx, instanceID, PlatformFCM, dev.ID, "", 10)
	checkErr(t, "DeviceInterests", err, nil)
	check(t, "interests", len(interests), 0)
	_, err = db.GetPublish(ctx, instanceID, "nul-publish")
	checkErr(t, "GetPublish", err, ErrNotFound)

	// A backslash before "u0000" is no NUL: `\\u0000` is stored as sent.
	checkErr(t, "escaped backslash", publish([]string{`u\u0000`}, `{"fcm":{"data":{"k":"a\\u0000b"}}}`), nil)
}

func TestJSONHoldsNUL(t *testing.T) {
	for _, tt := range []struct {
		json string
		want bool
	}{
		{`{"a":"b"}`, false},
		{`{"a":"\u0000"}`, true},
		{`{"a":"\\u0000"}`, false},    // a backslash, then u0000
		{`{"a":"\\\u0000"}`, true},    // a backslash, then NUL
		{`{"a":"x\\\\u0000"}`, false}, // two backslashes, then u0000
		{"{\"a\":\"\x00\"}", true},
		{`{"a":"\u00000"}`, true},
		{`{"\u0000":1}`, true},
		// At the very start, where the scans begin.
		{"\x00{}", true},
		{`\u0000`, true},
		{`\\u0000`, false},
	} {
		if got := JSONHoldsNUL([]byte(tt.json)); got != tt.want {
			t.Errorf("JSONHoldsNUL(%s) = %v, want %v", tt.json, got, tt.want)
		}
	}
}

// A device imported with the NUL character in an interest is refused with
// ErrInvalidText, in the same words on PostgreSQL (whose import streams
// rows with COPY, which would refuse it with an error naming no row) as on
// SQLite, and nothing of the import is stored.
func TestImportDevicesRefusesNULInAnInterest(t *testing.T) {
	words := map[string]string{}
	for name, dsn := range map[string]func(*testing.T) string{
		"SQLite":     func(t *testing.T) string { return filepath.Join(t.TempDir(), "herald.db") },
		"PostgreSQL": func(t *testing.T) string { return testpg.Start(t) },
	} {
		t.Run(name, func(t *testing.T) {
			db := testdb.Open(t, Open, dsn(t))
			ctx := t.Context()
			if _, err := db.CreateInstance(ctx, testInstance(instanceID)); err != nil {
				t.Fatal(err)
			}
			err := db.ImportDevices(ctx, []DeviceImport{
				{Device: Device{ID: "fcm-ok", InstanceID: instanceID, Platform: PlatformFCM, Token: "t1"}, Interests: []string{"news"}},
				{Device: Device{ID: "fcm-nul", InstanceID: instanceID, Platform: PlatformFCM, Token: "t2"}, Interests: []string{"ok", "a\x00b"}},
			})
			checkErr(t, "ImportDevices", err, ErrInvalidText)
			words[name] = err.Error()
			n, err := db.CountDevices(ctx, instanceID)
			checkErr(t, "CountDevices", err, nil)
			check(t, "devices stored", n, 0)
		})
	}
	if words["SQLite"] != "" && words["PostgreSQL"] != "" && words["SQLite"] != words["PostgreSQL"] {
		t.Fatalf("PostgreSQL says %q, SQLite %q", words["PostgreSQL"], words["SQLite"])
	}
}
