package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/internal/testkit"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

const (
	instanceID = "3f2504e0-4f89-41d3-9a0c-0305e82c3301"
	apnsKey    = "-----BEGIN PRIVATE KEY-----\nMIGTAgEAMBMGByqGSM49\n-----END PRIVATE KEY-----\n"
	apnsCA     = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n"
	fcmAccount = `{"type":"service_account","project_id":"demo","token_uri":"http://127.0.0.1:8445/token"}`
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// writeFile writes content to name in a fresh temporary directory and
// returns the path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fullInstance returns create arguments that set every option of instance
// instanceID, and the instance they create without timestamps and VAPID keys.
func fullInstance(t *testing.T) ([]string, storage.Instance) {
	t.Helper()
	args := []string{
		"create", "--id", instanceID, "--secret-key", "SECRET-1", "--enabled=false",
		"--jwt-issuer", "https://auth.example.com", "--publish-quota", "5",
		"--apns-key-file", writeFile(t, "apns.p8", apnsKey), "--apns-key-id", "KEYID12345",
		"--apns-team-id", "TEAM123456", "--apns-topic", "com.example.app", "--apns-url", "http://127.0.0.1:8443",
		"--apns-ca-file", writeFile(t, "ca.pem", apnsCA),
		"--fcm-service-account-file", writeFile(t, "fcm.json", fcmAccount), "--fcm-url", "http://127.0.0.1:8444",
		"--vapid-subject", "mailto:ops@example.com",
	}
	want := storage.Instance{
		ID:           instanceID,
		SecretKey:    "SECRET-1",
		JWTIssuer:    "https://auth.example.com",
		PublishQuota: 5,
		APNs: storage.APNsConfig{
			KeyPEM: apnsKey, KeyID: "KEYID12345", TeamID: "TEAM123456", Topic: "com.example.app",
			URL: "http://127.0.0.1:8443", CAPEM: apnsCA,
		},
		FCM:   storage.FCMConfig{ServiceAccountJSON: fcmAccount, URL: "http://127.0.0.1:8444"},
		VAPID: storage.VAPIDConfig{Subject: "mailto:ops@example.com"},
	}
	return args, want
}

func getInstance(t *testing.T, path, id string) storage.Instance {
	t.Helper()
	var in storage.Instance
	withDB(t, path, func(db *storage.DB) {
		var err error
		if in, err = db.GetInstance(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	})
	return in
}

// checkInstance compares got with want except for timestamps; VAPID keys
// are compared only when want has them.
func checkInstance(t *testing.T, got, want storage.Instance) {
	t.Helper()
	got.CreatedAt, got.UpdatedAt = time.Time{}, time.Time{}
	want.CreatedAt, want.UpdatedAt = time.Time{}, time.Time{}
	if want.VAPID.PublicKey == "" {
		got.VAPID.PublicKey, got.VAPID.PrivateKey = "", ""
	}
	if got != want {
		t.Fatalf("got instance\n%+v\nwant\n%+v", got, want)
	}
}

func TestInstancesCreate(t *testing.T) {
	t.Parallel()
	t.Run("OKEveryOption", func(t *testing.T) {
		path := testdb.SQLite(t)
		args, want := fullInstance(t)
		stdout := mustRun(t, Instances, path, args...)
		got := getInstance(t, path, instanceID)
		checkInstance(t, got, want)
		testkit.CheckVAPID(t, got.VAPID.PublicKey, got.VAPID.PrivateKey)

		for _, line := range []string{
			"id " + instanceID,
			"secret key SECRET-1",
			`apns key true, key id "KEYID12345", team "TEAM123456", topic "com.example.app", url http://127.0.0.1:8443`,
			"fcm service account true, url http://127.0.0.1:8444",
			"web push vapid public key " + got.VAPID.PublicKey + `, subject "mailto:ops@example.com"`,
		} {
			if !hasLine(stdout, line) {
				t.Fatalf("output has no line %q:\n%s", line, stdout)
			}
		}
	})

	t.Run("OKDefaults", func(t *testing.T) {
		path := testdb.SQLite(t)
		stdout := mustRun(t, Instances, path, "create")
		id := row(stdout, "id")
		if len(id) != 2 || !uuidV4.MatchString(id[1]) {
			t.Fatalf("output %q: want a line with a UUID", stdout)
		}
		got := getInstance(t, path, id[1])
		if !regexp.MustCompile(`^[0-9A-F]{64}$`).MatchString(got.SecretKey) {
			t.Fatalf("secret key %q: want 64 upper-case hex digits", got.SecretKey)
		}
		testkit.CheckVAPID(t, got.VAPID.PublicKey, got.VAPID.PrivateKey)
		checkInstance(t, got, storage.Instance{ID: id[1], SecretKey: got.SecretKey, Enabled: true})
		for _, line := range []string{
			"jwt issuer (standard only)",
			"url https://api.push.apple.com",
			"url https://fcm.googleapis.com",
		} {
			if !strings.Contains(strings.Join(strings.Fields(stdout), " "), line) {
				t.Fatalf("output does not contain %q:\n%s", line, stdout)
			}
		}
	})

	t.Run("OKOneFileForTwoOptions", func(t *testing.T) {
		path := testdb.SQLite(t)
		bundle := writeFile(t, "bundle.pem", apnsKey+apnsCA)
		mustRun(t, Instances, path, "create", "--id", instanceID, "--apns-key-file", bundle, "--apns-ca-file", bundle)
		got := getInstance(t, path, instanceID)
		if got.APNs.KeyPEM != apnsKey+apnsCA || got.APNs.CAPEM != apnsKey+apnsCA {
			t.Fatalf("got key %q and CA %q, want the file's contents in both", got.APNs.KeyPEM, got.APNs.CAPEM)
		}
	})

	t.Run("ErrMissingFile", func(t *testing.T) {
		path := testdb.SQLite(t)
		missing := filepath.Join(t.TempDir(), "missing.p8")
		_, _, err := runCmd(t, Instances, path, "create", "--apns-key-file", missing)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
			t.Fatalf("got %v, want an error naming %s", err, missing)
		}
		if stdout := mustRun(t, Instances, path, "list"); len(strings.Split(strings.TrimSpace(stdout), "\n")) != 1 {
			t.Fatalf("an instance was created:\n%s", stdout)
		}
	})

	t.Run("ErrEmptySecretKey", func(t *testing.T) {
		_, _, err := runCmd(t, Instances, testdb.SQLite(t), "create", "--secret-key=")
		checkErr(t, err, "the secret key may not be empty")
	})

	t.Run("ErrVAPIDSubject", func(t *testing.T) {
		_, _, err := runCmd(t, Instances, testdb.SQLite(t), "create", "--vapid-subject", "ops@example.com")
		checkErr(t, err, "the VAPID subject must be a mailto: or https: URI")
	})

	t.Run("ErrDuplicateID", func(t *testing.T) {
		path := testdb.SQLite(t)
		mustRun(t, Instances, path, "create", "--id", instanceID)
		_, _, err := runCmd(t, Instances, path, "create", "--id", instanceID)
		checkErr(t, err, `instance "`+instanceID+`": id or key already taken`)
	})

	t.Run("ErrUnknownFlag", func(t *testing.T) {
		if _, _, err := runCmd(t, Instances, testdb.SQLite(t), "create", "--apns-key", "x"); !errors.Is(err, ErrUsage) {
			t.Fatalf("got %v, want ErrUsage", err)
		}
	})
}

func TestInstancesList(t *testing.T) {
	t.Parallel()
	path := testdb.SQLite(t)
	args, _ := fullInstance(t)
	mustRun(t, Instances, path, args...)
	other := row(mustRun(t, Instances, path, "create", "--secret-key", "SECRET-2"), "id")[1]

	stdout := mustRun(t, Instances, path, "list")
	if got, want := strings.Fields(strings.Split(stdout, "\n")[0]), []string{"ID", "SECRET", "KEY", "ENABLED", "APNS", "FCM", "WEB"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("header %q, want %q", got, want)
	}
	if got, want := row(stdout, instanceID), []string{instanceID, "SECRET-1", "false", "true", "true", "true"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("row of %s: got %q, want %q", instanceID, got, want)
	}
	if got, want := row(stdout, other), []string{other, "SECRET-2", "true", "false", "false", "true"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("row of %s: got %q, want %q", other, got, want)
	}
}

func TestInstancesShow(t *testing.T) {
	t.Parallel()
	path := testdb.SQLite(t)
	args, _ := fullInstance(t)
	mustRun(t, Instances, path, args...)
	stored := getInstance(t, path, instanceID)

	t.Run("OKText", func(t *testing.T) {
		stdout := mustRun(t, Instances, path, "show", instanceID)
		for _, want := range [][]string{
			{"id", instanceID}, {"secret", "key", "SECRET-1"}, {"enabled", "false"},
			{"jwt", "issuer", "https://auth.example.com"}, {"publish", "quota", "5"},
		} {
			if got := rowStarting(stdout, want[:len(want)-1]); !reflect.DeepEqual(got, want) {
				t.Fatalf("got line %q, want %q in\n%s", got, want, stdout)
			}
		}
		if strings.Contains(stdout, "PRIVATE KEY") || strings.Contains(stdout, stored.VAPID.PrivateKey) {
			t.Fatalf("show printed a private key:\n%s", stdout)
		}
	})

	t.Run("OKJSON", func(t *testing.T) {
		stdout := mustRun(t, Instances, path, "show", "--json", instanceID)
		var got storage.Instance
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("output is not an instance as JSON: %v\n%s", err, stdout)
		}
		if !got.CreatedAt.Equal(stored.CreatedAt) || !got.UpdatedAt.Equal(stored.UpdatedAt) {
			t.Fatalf("got times %v, %v, want %v, %v", got.CreatedAt, got.UpdatedAt, stored.CreatedAt, stored.UpdatedAt)
		}
		checkInstance(t, got, stored)
	})

	t.Run("ErrNoInstance", func(t *testing.T) {
		_, _, err := runCmd(t, Instances, path, "show", "00000000-0000-4000-8000-000000000000")
		checkErr(t, err, `no instance with id "00000000-0000-4000-8000-000000000000"`)
	})

	t.Run("ErrNoID", func(t *testing.T) {
		if _, _, err := runCmd(t, Instances, path, "show"); !errors.Is(err, ErrUsage) {
			t.Fatalf("got %v, want ErrUsage", err)
		}
	})
}

func TestInstancesUpdate(t *testing.T) {
	t.Parallel()
	newKey := "-----BEGIN PRIVATE KEY-----\nNEW\n-----END PRIVATE KEY-----\n"
	tests := []struct {
		name    string
		args    func(t *testing.T) []string
		change  func(*storage.Instance) // nil when the instance must not change
		wantErr string                  // a part of the error message
		usage   bool                    // want ErrUsage
	}{
		{
			name:   "OKSecretKeyAndEnabled",
			args:   func(*testing.T) []string { return []string{"--secret-key", "SECRET-2", "--enabled"} },
			change: func(in *storage.Instance) { in.SecretKey, in.Enabled = "SECRET-2", true },
		},
		{
			name: "OKGateways",
			args: func(t *testing.T) []string {
				return []string{"--apns-key-file", writeFile(t, "new.p8", newKey), "--apns-topic", "com.example.other",
					"--fcm-url", "https://fcm.googleapis.com", "--vapid-subject", "https://example.com/contact"}
			},
			change: func(in *storage.Instance) {
				in.APNs.KeyPEM, in.APNs.Topic = newKey, "com.example.other"
				in.FCM.URL, in.VAPID.Subject = "https://fcm.googleapis.com", "https://example.com/contact"
			},
		},
		{
			name:   "OKClearJWTIssuerAndQuota",
			args:   func(*testing.T) []string { return []string{"--jwt-issuer=", "--publish-quota", "0"} },
			change: func(in *storage.Instance) { in.JWTIssuer, in.PublishQuota = "", 0 },
		},
		{name: "ErrNothingToUpdate", args: func(*testing.T) []string { return nil }, wantErr: "nothing to update"},
		{name: "ErrEmptySecretKey", args: func(*testing.T) []string { return []string{"--secret-key="} }, wantErr: "the secret key may not be empty"},
		{name: "ErrVAPIDSubject", args: func(*testing.T) []string { return []string{"--vapid-subject", "http://example.com"} }, wantErr: "VAPID subject"},
		{
			name: "ErrMissingFile",
			args: func(t *testing.T) []string {
				return []string{"--fcm-service-account-file", filepath.Join(t.TempDir(), "missing.json")}
			},
			wantErr: "missing.json",
		},
		{name: "ErrUnknownFlag", args: func(*testing.T) []string { return []string{"--id", instanceID} }, usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := testdb.SQLite(t)
			args, _ := fullInstance(t)
			mustRun(t, Instances, path, args...)
			want := getInstance(t, path, instanceID)

			stdout, _, err := runCmd(t, Instances, path, append([]string{"update", instanceID}, tt.args(t)...)...)
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
				tt.change(&want)
				if got := row(stdout, "id"); !reflect.DeepEqual(got, []string{"id", instanceID}) {
					t.Fatalf("output does not show the instance:\n%s", stdout)
				}
			}
			checkInstance(t, getInstance(t, path, instanceID), want)
		})
	}

	t.Run("ErrNoID", func(t *testing.T) {
		if _, _, err := runCmd(t, Instances, testdb.SQLite(t), "update"); !errors.Is(err, ErrUsage) {
			t.Fatalf("got %v, want ErrUsage", err)
		}
	})

	t.Run("ErrNoInstance", func(t *testing.T) {
		_, _, err := runCmd(t, Instances, testdb.SQLite(t), "update", instanceID, "--secret-key", "S")
		checkErr(t, err, `no instance with id "`+instanceID+`"`)
	})
}

func TestInstancesRotateSecret(t *testing.T) {
	t.Parallel()
	t.Run("OK", func(t *testing.T) {
		path := testdb.SQLite(t)
		args, _ := fullInstance(t)
		mustRun(t, Instances, path, args...)
		want := getInstance(t, path, instanceID)

		stdout := mustRun(t, Instances, path, "rotate-secret", instanceID)
		secret, ok := strings.CutPrefix(strings.TrimSpace(stdout), "new secret key of instance "+instanceID+": ")
		if !ok || !regexp.MustCompile(`^[0-9A-F]{64}$`).MatchString(secret) {
			t.Fatalf("got %q, want the new secret key", stdout)
		}
		want.SecretKey = secret
		checkInstance(t, getInstance(t, path, instanceID), want) // VAPID keys and gateways kept
	})

	t.Run("ErrNoInstance", func(t *testing.T) {
		_, _, err := runCmd(t, Instances, testdb.SQLite(t), "rotate-secret", instanceID)
		checkErr(t, err, `no instance with id "`+instanceID+`"`)
	})
}

func TestInstancesDelete(t *testing.T) {
	t.Parallel()
	t.Run("OK", func(t *testing.T) {
		path := testdb.SQLite(t)
		mustRun(t, Instances, path, "create", "--id", instanceID)
		if stdout := mustRun(t, Instances, path, "delete", instanceID); stdout != "deleted instance "+instanceID+"\n" {
			t.Fatalf("got %q, want the confirmation", stdout)
		}
		_, _, err := runCmd(t, Instances, path, "show", instanceID)
		checkErr(t, err, `no instance with id "`+instanceID+`"`)
		if list := mustRun(t, Instances, path, "list"); row(list, instanceID) != nil {
			t.Fatalf("list still shows the instance:\n%s", list)
		}
	})

	t.Run("ErrNoInstance", func(t *testing.T) {
		_, _, err := runCmd(t, Instances, testdb.SQLite(t), "delete", instanceID)
		checkErr(t, err, `no instance with id "`+instanceID+`"`)
	})
}
