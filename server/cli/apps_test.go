package cli

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

// fullApp are the create arguments that set every option of app 42.
var fullApp = []string{
	"create", "--id", "42", "--key", "app-key", "--secret", "app-secret",
	"--client-events=false", "--subscription-count=false", "--user-auth-timeout", "30s",
	"--max-connections", "10", "--max-presence-members", "5", "--max-user-info-bytes", "512",
	"--webhook", "https://example.com/presence,events=member_added+client_event,prefix=presence-,batch",
	"--webhook", "http://127.0.0.1:9/all",
}

// fullAppWant is app 42 as fullApp creates it, without timestamps and
// webhook IDs.
var fullAppWant = storage.App{
	ID:                       "42",
	Key:                      "app-key",
	Secret:                   "app-secret",
	Enabled:                  true,
	UserAuthTimeout:          30 * time.Second,
	MaxConnections:           10,
	MaxPresenceMembers:       5,
	MaxPresenceUserInfoBytes: 512,
	RecoveryWindow:           storage.DefaultRecoveryWindow,
	Webhooks: []storage.Webhook{
		{URL: "https://example.com/presence", EventTypes: []string{"member_added", "client_event"}, ChannelPrefix: "presence-", Batch: true},
		{URL: "http://127.0.0.1:9/all"},
	},
}

func getApp(t *testing.T, path, id string) storage.App {
	t.Helper()
	var app storage.App
	withDB(t, path, func(db *storage.DB) {
		var err error
		if app, err = db.GetApp(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	})
	return app
}

// withoutStoredFields returns app without the fields the database assigns:
// timestamps and webhook IDs.
func withoutStoredFields(app storage.App) storage.App {
	app.CreatedAt, app.UpdatedAt = time.Time{}, time.Time{}
	hooks := make([]storage.Webhook, len(app.Webhooks))
	for i, w := range app.Webhooks {
		w.ID = 0
		hooks[i] = w
	}
	app.Webhooks = hooks
	return app
}

func checkApp(t *testing.T, got, want storage.App) {
	t.Helper()
	if got, want := withoutStoredFields(got), withoutStoredFields(want); !reflect.DeepEqual(got, want) {
		t.Fatalf("got app\n%+v\nwant\n%+v", got, want)
	}
}

func TestAppsCreate(t *testing.T) {
	t.Parallel()
	t.Run("OKEveryOption", func(t *testing.T) {
		path := testdb.SQLite(t)
		stdout := mustRun(t, Apps, path, fullApp...)
		checkApp(t, getApp(t, path, "42"), fullAppWant)

		for _, want := range [][]string{
			{"id", "42"}, {"key", "app-key"}, {"secret", "app-secret"}, {"enabled", "true"},
			{"client", "events", "false"}, {"subscription", "count", "false"},
			{"user", "auth", "timeout", "30s"}, {"max", "connections", "10"},
		} {
			if got := rowStarting(stdout, want[:len(want)-1]); !reflect.DeepEqual(got, want) {
				t.Fatalf("got line %q, want %q in\n%s", got, want, stdout)
			}
		}
		for _, want := range []string{
			`https://example.com/presence (member_added+client_event; prefix "presence-"; batch true)`,
			`http://127.0.0.1:9/all (all events; prefix ""; batch false)`,
		} {
			if !strings.Contains(stdout, want) {
				t.Fatalf("output does not show webhook %s:\n%s", want, stdout)
			}
		}
	})

	t.Run("OKDefaults", func(t *testing.T) {
		path := testdb.SQLite(t)
		stdout := mustRun(t, Apps, path, "create")
		id := row(stdout, "id")
		if len(id) != 2 || !regexp.MustCompile(`^[1-9][0-9]{6}$`).MatchString(id[1]) {
			t.Fatalf("output %q: want a line with a 7-digit id", stdout)
		}
		app := getApp(t, path, id[1])
		if !regexp.MustCompile(`^[0-9a-f]{20}$`).MatchString(app.Key) || !regexp.MustCompile(`^[0-9a-f]{20}$`).MatchString(app.Secret) {
			t.Fatalf("key %q, secret %q: want generated hex", app.Key, app.Secret)
		}
		want := storage.App{
			ID: app.ID, Key: app.Key, Secret: app.Secret, Enabled: true, ClientEvents: true, SubscriptionCount: true,
			MaxPresenceMembers: storage.DefaultMaxPresenceMembers, MaxPresenceUserInfoBytes: storage.DefaultMaxPresenceUserInfoBytes,
			RecoveryWindow: storage.DefaultRecoveryWindow,
		}
		checkApp(t, app, want)
	})

	errs := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"ErrWebhookNotHTTP", []string{"--webhook", "ftp://example.com"}, "the URL must start with http:// or https://"},
		{"ErrWebhookUnknownKind", []string{"--webhook", "https://example.com,events=member_added+nope"}, `unknown event kind "nope"`},
		{"ErrWebhookUnknownOption", []string{"--webhook", "https://example.com,retries=3"}, `unknown option "retries"`},
		{"ErrEmptyKey", []string{"--key="}, "key and secret may not be empty"},
		{"ErrEmptySecret", []string{"--secret", ""}, "key and secret may not be empty"},
		{"ErrNegativeLimit", []string{"--max-connections", "-1"}, "limits may not be negative"},
		{"ErrNegativeTimeout", []string{"--user-auth-timeout", "-1s"}, "limits may not be negative"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := testdb.SQLite(t)
			_, _, err := runCmd(t, Apps, path, append([]string{"create", "--id", "1"}, tt.args...)...)
			checkErr(t, err, tt.wantErr)
			withDB(t, path, func(db *storage.DB) {
				if n, _ := db.CountApps(context.Background()); n != 0 {
					t.Fatalf("got %d apps after a failed create, want 0", n)
				}
			})
		})
	}

	t.Run("ErrDuplicateID", func(t *testing.T) {
		path := testdb.SQLite(t)
		mustRun(t, Apps, path, "create", "--id", "1", "--key", "k1")
		_, _, err := runCmd(t, Apps, path, "create", "--id", "1", "--key", "k2")
		checkErr(t, err, `app "1": id or key already taken`)
	})

	t.Run("ErrDuplicateKey", func(t *testing.T) {
		path := testdb.SQLite(t)
		mustRun(t, Apps, path, "create", "--id", "1", "--key", "k1")
		_, _, err := runCmd(t, Apps, path, "create", "--id", "2", "--key", "k1")
		checkErr(t, err, `app "2": id or key already taken`)
	})

	t.Run("ErrUnknownFlag", func(t *testing.T) {
		_, stderr, err := runCmd(t, Apps, testdb.SQLite(t), "create", "--colour", "red")
		if !errors.Is(err, ErrUsage) || !strings.Contains(stderr, "flag provided but not defined: -colour") {
			t.Fatalf("got %v and %q, want ErrUsage and the flag error", err, stderr)
		}
	})

	t.Run("ErrPositionalArgument", func(t *testing.T) {
		_, stderr, err := runCmd(t, Apps, testdb.SQLite(t), "create", "42")
		if !errors.Is(err, ErrUsage) || !strings.Contains(stderr, "expected 0 argument(s)") {
			t.Fatalf("got %v and %q, want ErrUsage", err, stderr)
		}
	})
}

// rowStarting returns the fields of the first line whose fields begin with
// prefix, or nil.
func rowStarting(table string, prefix []string) []string {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(prefix) && reflect.DeepEqual(f[:len(prefix)], prefix) {
			return f
		}
	}
	return nil
}

func TestAppsList(t *testing.T) {
	t.Parallel()
	t.Run("OKEmpty", func(t *testing.T) {
		stdout := mustRun(t, Apps, testdb.SQLite(t), "list")
		if !reflect.DeepEqual(strings.Fields(stdout), []string{"ID", "KEY", "SECRET", "ENABLED", "WEBHOOKS"}) {
			t.Fatalf("got %q, want only the header", stdout)
		}
	})

	t.Run("OKRows", func(t *testing.T) {
		path := testdb.SQLite(t)
		mustRun(t, Apps, path, fullApp...)
		mustRun(t, Apps, path, "create", "--id", "7", "--key", "k7", "--secret", "s7", "--enabled=false")
		stdout := mustRun(t, Apps, path, "list")
		if got, want := row(stdout, "42"), []string{"42", "app-key", "app-secret", "true", "2"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("row of app 42: got %q, want %q\n%s", got, want, stdout)
		}
		if got, want := row(stdout, "7"), []string{"7", "k7", "s7", "false", "0"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("row of app 7: got %q, want %q\n%s", got, want, stdout)
		}
		if lines := strings.Split(strings.TrimSpace(stdout), "\n"); len(lines) != 3 {
			t.Fatalf("got %d lines, want a header and two rows:\n%s", len(lines), stdout)
		}
	})

	t.Run("ErrArgument", func(t *testing.T) {
		if _, _, err := runCmd(t, Apps, testdb.SQLite(t), "list", "42"); !errors.Is(err, ErrUsage) {
			t.Fatalf("got %v, want ErrUsage", err)
		}
	})
}

func TestAppsShow(t *testing.T) {
	t.Parallel()
	path := testdb.SQLite(t)
	mustRun(t, Apps, path, fullApp...)
	stored := getApp(t, path, "42")

	t.Run("OKText", func(t *testing.T) {
		stdout := mustRun(t, Apps, path, "show", "42")
		for _, want := range [][]string{
			{"id", "42"}, {"key", "app-key"}, {"secret", "app-secret"}, {"enabled", "true"},
			{"client", "events", "false"}, {"subscription", "count", "false"}, {"user", "auth", "timeout", "30s"},
			{"max", "connections", "10"}, {"max", "presence", "members", "5"}, {"max", "user", "info", "bytes", "512"},
		} {
			if got := rowStarting(stdout, want[:len(want)-1]); !reflect.DeepEqual(got, want) {
				t.Fatalf("got line %q, want %q in\n%s", got, want, stdout)
			}
		}
		if !strings.Contains(stdout, `https://example.com/presence (member_added+client_event; prefix "presence-"; batch true)`) {
			t.Fatalf("output does not show the webhook:\n%s", stdout)
		}
	})

	t.Run("OKTextDefaults", func(t *testing.T) {
		mustRun(t, Apps, path, "create", "--id", "8")
		stdout := mustRun(t, Apps, path, "show", "8")
		for _, want := range [][]string{{"user", "auth", "timeout", "off"}, {"max", "connections", "none"}} {
			if got := rowStarting(stdout, want[:len(want)-1]); !reflect.DeepEqual(got, want) {
				t.Fatalf("got line %q, want %q in\n%s", got, want, stdout)
			}
		}
	})

	for _, args := range [][]string{{"show", "42", "--json"}, {"show", "--json", "42"}} {
		t.Run("OKJSON"+strings.Join(args[1:], ""), func(t *testing.T) {
			stdout := mustRun(t, Apps, path, args...)
			var got storage.App
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("output is not an app as JSON: %v\n%s", err, stdout)
			}
			if !got.CreatedAt.Equal(stored.CreatedAt) || !got.UpdatedAt.Equal(stored.UpdatedAt) {
				t.Fatalf("got times %v, %v, want %v, %v", got.CreatedAt, got.UpdatedAt, stored.CreatedAt, stored.UpdatedAt)
			}
			got.CreatedAt, got.UpdatedAt = stored.CreatedAt, stored.UpdatedAt
			if !reflect.DeepEqual(got, stored) {
				t.Fatalf("JSON round trip:\n got %+v\nwant %+v", got, stored)
			}
		})
	}

	t.Run("ErrNoApp", func(t *testing.T) {
		_, _, err := runCmd(t, Apps, path, "show", "999")
		checkErr(t, err, `no app with id "999"`)
	})

	t.Run("ErrNoID", func(t *testing.T) {
		_, stderr, err := runCmd(t, Apps, path, "show", "--json")
		if !errors.Is(err, ErrUsage) || !strings.Contains(stderr, "expected 1 argument(s): <id>") {
			t.Fatalf("got %v and %q, want ErrUsage", err, stderr)
		}
	})

	t.Run("ErrTwoIDs", func(t *testing.T) {
		if _, _, err := runCmd(t, Apps, path, "show", "42", "43"); !errors.Is(err, ErrUsage) {
			t.Fatalf("got %v, want ErrUsage", err)
		}
	})
}

func TestAppsUpdate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		change  func(*storage.App) // applied to fullAppWant; nil when the app must not change
		wantErr string             // a part of the error message
		usage   bool               // want ErrUsage
	}{
		{
			name:   "OKSecretAndEnabled",
			args:   []string{"--secret", "new-secret", "--enabled=false"},
			change: func(a *storage.App) { a.Secret, a.Enabled = "new-secret", false },
		},
		{
			name:   "OKKey",
			args:   []string{"--key=new-key"},
			change: func(a *storage.App) { a.Key = "new-key" },
		},
		{
			name: "OKOptions",
			args: []string{"--client-events", "--subscription-count", "--user-auth-timeout", "0", "--max-connections", "0", "--max-presence-members", "50", "--max-user-info-bytes", "2048"},
			change: func(a *storage.App) {
				a.ClientEvents, a.SubscriptionCount, a.UserAuthTimeout = true, true, 0
				a.MaxConnections, a.MaxPresenceMembers, a.MaxPresenceUserInfoBytes = 0, 50, 2048
			},
		},
		{
			name:   "OKHistory",
			args:   []string{"--history-events", "100", "--history-ttl", "5m"},
			change: func(a *storage.App) { a.HistoryEvents, a.HistoryTTL = 100, 5*time.Minute },
		},
		{
			name:   "OKHistoryDefaultTTL",
			args:   []string{"--history-events", "10"},
			change: func(a *storage.App) { a.HistoryEvents, a.HistoryTTL = 10, storage.DefaultHistoryTTL },
		},
		{
			name: "OKRecoveryWindow",
			args: []string{"--history-events", "10", "--recovery-window", "30s"},
			change: func(a *storage.App) {
				a.HistoryEvents, a.HistoryTTL, a.RecoveryWindow = 10, storage.DefaultHistoryTTL, 30*time.Second
			},
		},
		{
			name:   "OKRecoveryOff",
			args:   []string{"--recovery-window", "0"},
			change: func(a *storage.App) { a.RecoveryWindow = storage.RecoveryOff },
		},
		{
			name: "OKAddWebhook",
			args: []string{"--webhook", "https://example.com/cache,events=cache_miss"},
			change: func(a *storage.App) {
				a.Webhooks = append(a.Webhooks, storage.Webhook{URL: "https://example.com/cache", EventTypes: []string{"cache_miss"}})
			},
		},
		{
			name: "OKReplaceWebhooks",
			args: []string{"--clear-webhooks", "--webhook", "https://example.com/new,batch"},
			change: func(a *storage.App) {
				a.Webhooks = []storage.Webhook{{URL: "https://example.com/new", Batch: true}}
			},
		},
		{
			name:   "OKClearWebhooks",
			args:   []string{"--clear-webhooks"},
			change: func(a *storage.App) { a.Webhooks = nil },
		},
		{name: "ErrNothingToUpdate", wantErr: "nothing to update"},
		{name: "ErrKeyTaken", args: []string{"--key", "other-key"}, wantErr: `app "42": id or key already taken`},
		{name: "ErrBadWebhook", args: []string{"--secret", "s", "--webhook", "https://example.com,events=nope"}, wantErr: `unknown event kind "nope"`},
		{name: "ErrEmptySecret", args: []string{"--secret="}, wantErr: "key and secret may not be empty"},
		{name: "ErrNegativeLimit", args: []string{"--max-presence-members", "-1"}, wantErr: "limits may not be negative"},
		{name: "ErrHistoryTooLong", args: []string{"--history-events", "1001"}, wantErr: "history events must be 0 (off) to 1000"},
		{name: "ErrHistoryTTL", args: []string{"--history-events", "5", "--history-ttl", "200h"}, wantErr: "the history TTL must be whole milliseconds from 0 to 168h0m0s"},
		{name: "ErrRecoveryWindow", args: []string{"--recovery-window", "200h"}, wantErr: "the recovery window must be whole milliseconds up to 168h0m0s"},
		{name: "ErrRecoveryWindowNegative", args: []string{"--recovery-window", "-1s"}, wantErr: "usage"},
		{name: "ErrUnknownFlag", args: []string{"--id", "43"}, usage: true},
		{name: "ErrPositionalArgument", args: []string{"--secret", "s", "extra"}, usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := testdb.SQLite(t)
			mustRun(t, Apps, path, fullApp...)
			mustRun(t, Apps, path, "create", "--id", "43", "--key", "other-key")

			stdout, _, err := runCmd(t, Apps, path, append([]string{"update", "42"}, tt.args...)...)
			want := fullAppWant
			switch {
			case tt.usage:
				if !errors.Is(err, ErrUsage) {
					t.Fatalf("got %v, want ErrUsage", err)
				}
			case tt.wantErr != "":
				checkErr(t, err, tt.wantErr)
			default:
				if err != nil {
					t.Fatal(err)
				}
				want.Webhooks = append([]storage.Webhook(nil), want.Webhooks...)
				tt.change(&want)
				if got := row(stdout, "id"); !reflect.DeepEqual(got, []string{"id", "42"}) {
					t.Fatalf("output does not show the app:\n%s", stdout)
				}
			}
			checkApp(t, getApp(t, path, "42"), want)
			if other := getApp(t, path, "43"); other.Key != "other-key" {
				t.Fatalf("updating 42 changed 43: %+v", other)
			}
		})
	}

	t.Run("ErrNoID", func(t *testing.T) {
		_, stderr, err := runCmd(t, Apps, testdb.SQLite(t), "update", "--secret", "s")
		if !errors.Is(err, ErrUsage) || !strings.Contains(stderr, "usage: herald apps update <id>") {
			t.Fatalf("got %v and %q, want ErrUsage", err, stderr)
		}
	})

	t.Run("ErrNoApp", func(t *testing.T) {
		_, _, err := runCmd(t, Apps, testdb.SQLite(t), "update", "999", "--secret", "s")
		checkErr(t, err, `no app with id "999"`)
	})
}

func TestAppsRotateSecret(t *testing.T) {
	t.Parallel()
	t.Run("OK", func(t *testing.T) {
		path := testdb.SQLite(t)
		mustRun(t, Apps, path, fullApp...)
		stdout := mustRun(t, Apps, path, "rotate-secret", "42")
		secret, ok := strings.CutPrefix(strings.TrimSpace(stdout), "new secret of app 42: ")
		if !ok || !regexp.MustCompile(`^[0-9a-f]{20}$`).MatchString(secret) {
			t.Fatalf("got %q, want the new secret", stdout)
		}
		want := fullAppWant
		want.Secret = secret
		checkApp(t, getApp(t, path, "42"), want)
	})

	t.Run("ErrNoApp", func(t *testing.T) {
		_, _, err := runCmd(t, Apps, testdb.SQLite(t), "rotate-secret", "999")
		checkErr(t, err, `no app with id "999"`)
	})

	t.Run("ErrNoID", func(t *testing.T) {
		if _, _, err := runCmd(t, Apps, testdb.SQLite(t), "rotate-secret"); !errors.Is(err, ErrUsage) {
			t.Fatalf("got %v, want ErrUsage", err)
		}
	})
}

func TestAppsDelete(t *testing.T) {
	t.Parallel()
	t.Run("OK", func(t *testing.T) {
		path := testdb.SQLite(t)
		mustRun(t, Apps, path, fullApp...)
		mustRun(t, Apps, path, "create", "--id", "43")
		if stdout := mustRun(t, Apps, path, "delete", "42"); stdout != "deleted app 42\n" {
			t.Fatalf("got %q, want the confirmation", stdout)
		}
		_, _, err := runCmd(t, Apps, path, "show", "42")
		checkErr(t, err, `no app with id "42"`)
		list := mustRun(t, Apps, path, "list")
		if row(list, "42") != nil || row(list, "43") == nil {
			t.Fatalf("list after deleting 42:\n%s", list)
		}
	})

	t.Run("ErrNoApp", func(t *testing.T) {
		_, _, err := runCmd(t, Apps, testdb.SQLite(t), "delete", "42")
		checkErr(t, err, `no app with id "42"`)
	})

	t.Run("ErrNoID", func(t *testing.T) {
		if _, _, err := runCmd(t, Apps, testdb.SQLite(t), "delete"); !errors.Is(err, ErrUsage) {
			t.Fatalf("got %v, want ErrUsage", err)
		}
	})
}

func TestParseWebhook(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		spec    string
		want    storage.Webhook
		wantErr string
	}{
		{name: "OKURLOnly", spec: "https://example.com/hook", want: storage.Webhook{URL: "https://example.com/hook"}},
		{name: "OKPlainHTTP", spec: "http://127.0.0.1:8080/h", want: storage.Webhook{URL: "http://127.0.0.1:8080/h"}},
		{
			name: "OKEveryOption",
			spec: "https://example.com/hook,events=member_added+client_event,prefix=presence-,batch",
			want: storage.Webhook{URL: "https://example.com/hook", EventTypes: []string{"member_added", "client_event"}, ChannelPrefix: "presence-", Batch: true},
		},
		{
			name: "OKEveryKind",
			spec: "https://x/," + "events=" + strings.Join(WebhookKinds, "+"),
			want: storage.Webhook{URL: "https://x/", EventTypes: WebhookKinds},
		},
		{name: "ErrNoScheme", spec: "example.com/hook", wantErr: "the URL must start with http:// or https://"},
		{name: "ErrEmpty", spec: "", wantErr: "the URL must start with http:// or https://"},
		{name: "ErrUnknownKind", spec: "https://x,events=member_added+channel_created", wantErr: `unknown event kind "channel_created"`},
		{name: "ErrEmptyKinds", spec: "https://x,events=", wantErr: `unknown event kind ""`},
		{name: "ErrUnknownOption", spec: "https://x,timeout=5", wantErr: `unknown option "timeout"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseWebhook(tt.spec)
			if tt.wantErr != "" {
				checkErr(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestAppsPushInstance(t *testing.T) {
	t.Parallel()
	path := testdb.SQLite(t)
	mustRun(t, Instances, path, "create", "--id", instanceID)
	mustRun(t, Apps, path, "create", "--id", "42", "--push-instance", instanceID)
	if got := getApp(t, path, "42").PushInstance; got != instanceID {
		t.Fatalf("created with --push-instance: got %q, want %q", got, instanceID)
	}
	stdout := mustRun(t, Apps, path, "show", "42")
	if got, want := rowStarting(stdout, []string{"push", "instance"}), []string{"push", "instance", instanceID}; !reflect.DeepEqual(got, want) {
		t.Fatalf("show: got line %q, want %q in\n%s", got, want, stdout)
	}

	const other = "0b5c9d7e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"
	_, _, err := runCmd(t, Apps, path, "update", "42", "--push-instance", other)
	checkErr(t, err, `no Push instance with id "`+other+`" to link app "42" to`)
	_, _, err = runCmd(t, Apps, path, "update", "42", "--push-instance", "not-a-uuid")
	checkErr(t, err, "the push instance must be a Push instance id (a UUID)")
	_, _, err = runCmd(t, Apps, path, "create", "--id", "43", "--push-instance", other)
	checkErr(t, err, `no Push instance with id "`+other+`" to link app "43" to`)
	if got := getApp(t, path, "42").PushInstance; got != instanceID {
		t.Fatalf("refused updates changed the link to %q", got)
	}

	stdout = mustRun(t, Apps, path, "update", "42", "--push-instance", "")
	if got := getApp(t, path, "42").PushInstance; got != "" {
		t.Fatalf(`--push-instance "" left the link to %q`, got)
	}
	if got, want := rowStarting(stdout, []string{"push", "instance"}), []string{"push", "instance", "none"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("update: got line %q, want %q in\n%s", got, want, stdout)
	}
}
