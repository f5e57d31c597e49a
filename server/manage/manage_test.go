package manage

import (
	"errors"
	"strings"
	"testing"

	"github.com/heraldrt/herald/storage"
)

func TestValidateApp(t *testing.T) {
	valid := func() storage.App {
		a := NewApp()
		a.ID = "app_1-x"
		return a
	}
	if err := ValidateApp(valid()); err != nil {
		t.Fatalf("a new app is invalid: %v", err)
	}
	for _, tt := range []struct {
		name   string
		change func(*storage.App)
		want   string // in the message
	}{
		{"ErrEmptyID", func(a *storage.App) { a.ID = "" }, "app id"},
		{"ErrIDSlash", func(a *storage.App) { a.ID = "a/b" }, "app id"},
		{"ErrIDTooLong", func(a *storage.App) { a.ID = strings.Repeat("1", 65) }, "app id"},
		{"ErrEmptyKey", func(a *storage.App) { a.Key = "" }, "may not be empty"},
		{"ErrEmptySecret", func(a *storage.App) { a.Secret = "" }, "may not be empty"},
		{"ErrKeyColon", func(a *storage.App) { a.Key = "key:1" }, "at most 128"},
		{"ErrSecretSpace", func(a *storage.App) { a.Secret = "a secret" }, "at most 128"},
		{"ErrNegativeLimit", func(a *storage.App) { a.MaxConnections = -1 }, "negative"},
		{"ErrNegativeMembers", func(a *storage.App) { a.MaxPresenceMembers = -1 }, "negative"},
		{"ErrWebhookScheme", func(a *storage.App) { a.Webhooks = []storage.Webhook{{URL: "ftp://example.com"}} }, "http://"},
		{"ErrWebhookNUL", func(a *storage.App) { a.Webhooks = []storage.Webhook{{URL: "https://example.com/\x00"}} }, "NUL"},
		{"ErrWebhookKind", func(a *storage.App) {
			a.Webhooks = []storage.Webhook{{URL: "https://example.com", EventTypes: []string{"nope"}}}
		}, "unknown event kind"},
		{"ErrTooManyWebhooks", func(a *storage.App) {
			a.Webhooks = make([]storage.Webhook, MaxWebhooks+1)
			for i := range a.Webhooks {
				a.Webhooks[i].URL = "https://example.com"
			}
		}, "at most 100 webhooks"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := valid()
			tt.change(&a)
			err := ValidateApp(a)
			if err == nil || !IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an invalid error mentioning %q", err, tt.want)
			}
		})
	}
	t.Run("OKAllErrorsJoined", func(t *testing.T) {
		a := valid()
		a.ID, a.MaxConnections = "", -1
		err := ValidateApp(a)
		if !IsInvalid(err) || !strings.Contains(err.Error(), "app id") || !strings.Contains(err.Error(), "negative") {
			t.Fatalf("got %v, want both errors", err)
		}
	})
	t.Run("OKEveryWebhookKind", func(t *testing.T) {
		a := valid()
		a.Webhooks = []storage.Webhook{{URL: "http://example.com/hook", EventTypes: WebhookKinds, ChannelPrefix: "private-"}}
		if err := ValidateApp(a); err != nil {
			t.Fatal(err)
		}
	})
}

func TestIsInvalid(t *testing.T) {
	if IsInvalid(errors.New("disk full")) || IsInvalid(nil) {
		t.Error("a system error counts as invalid input")
	}
	if !IsInvalid(errors.Join(errors.New("x"), invalid("bad"))) {
		t.Error("a joined invalid error is not recognised")
	}
}

func TestParseWebhook(t *testing.T) {
	w, err := ParseWebhook("https://example.com/hook,events=channel_occupied+member_added,prefix=private-,batch")
	if err != nil {
		t.Fatal(err)
	}
	if w.URL != "https://example.com/hook" || len(w.EventTypes) != 2 || w.EventTypes[1] != "member_added" || w.ChannelPrefix != "private-" || !w.Batch {
		t.Fatalf("parsed %+v", w)
	}
	if w, err := ParseWebhook("http://example.com"); err != nil || w.Batch || len(w.EventTypes) != 0 {
		t.Fatalf("plain URL: %+v %v", w, err)
	}
	for _, spec := range []string{"example.com", "https://example.com,color=red", "https://example.com,events=nope"} {
		if _, err := ParseWebhook(spec); !IsInvalid(err) {
			t.Errorf("ParseWebhook(%q) = %v, want an invalid error", spec, err)
		}
	}
	// Refusals name the endpoint without the credentials it may carry.
	for _, spec := range []string{"ftp://u:hunter2@example.com/h", "https://u:hunter2@example.com/h?token=hunter2,color=red", "https://example.com/h?token=hunter2,events=nope"} {
		if _, err := ParseWebhook(spec); !IsInvalid(err) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseWebhook(%q) = %v, want an invalid error without the secret", spec, err)
		}
	}
}

func TestValidateInstance(t *testing.T) {
	valid := func() storage.Instance {
		in, err := NewInstance()
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	if err := ValidateInstance(valid()); err != nil {
		t.Fatalf("a new instance is invalid: %v", err)
	}
	for _, tt := range []struct {
		name   string
		change func(*storage.Instance)
		want   string
	}{
		{"ErrNotUUID", func(in *storage.Instance) { in.ID = "instance-1" }, "UUID"},
		{"ErrEmptySecret", func(in *storage.Instance) { in.SecretKey = "" }, "secret key may not be empty"},
		{"ErrLongSecret", func(in *storage.Instance) { in.SecretKey = strings.Repeat("s", 257) }, "secret key is limited"},
		{"ErrNegativeQuota", func(in *storage.Instance) { in.PublishQuota = -1 }, "quota"},
		{"ErrVAPIDSubject", func(in *storage.Instance) { in.VAPID.Subject = "http://example.com" }, "VAPID subject"},
		{"ErrAPNsURL", func(in *storage.Instance) { in.APNs.URL = "api.push.apple.com" }, "APNs URL"},
		{"ErrFCMURL", func(in *storage.Instance) { in.FCM.URL = "ftp://fcm" }, "FCM URL"},
		{"ErrLongTopic", func(in *storage.Instance) { in.APNs.Topic = strings.Repeat("t", 257) }, "APNs topic"},
		{"ErrNULSecret", func(in *storage.Instance) { in.SecretKey = "a\x00b" }, "NUL"},
		{"ErrNULKeyFile", func(in *storage.Instance) { in.APNs.KeyPEM = "-----BEGIN\x00" }, "NUL"},
		{"ErrURLShownRedacted", func(in *storage.Instance) { in.FCM.URL = "ftp://user:s3cret@fcm" }, "not \"ftp://fcm\""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := valid()
			tt.change(&in)
			err := ValidateInstance(in)
			if err == nil || !IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an invalid error mentioning %q", err, tt.want)
			}
		})
	}
	t.Run("OKSubjects", func(t *testing.T) {
		for _, s := range []string{"", "mailto:ops@example.com", "https://example.com"} {
			in := valid()
			in.VAPID.Subject = s
			if err := ValidateInstance(in); err != nil {
				t.Errorf("subject %q: %v", s, err)
			}
		}
	})
}

func TestRotateSecrets(t *testing.T) {
	a := NewApp()
	old := a.Secret
	RotateAppSecret(&a)
	if a.Secret == old || ValidateApp(storage.App{ID: "1", Key: a.Key, Secret: a.Secret}) != nil {
		t.Errorf("rotated app secret %q (was %q)", a.Secret, old)
	}
	in, err := NewInstance()
	if err != nil {
		t.Fatal(err)
	}
	oldKey := in.SecretKey
	if err := RotateInstanceSecret(&in); err != nil || in.SecretKey == oldKey || in.SecretKey == "" {
		t.Errorf("rotated instance secret %q (was %q): %v", in.SecretKey, oldKey, err)
	}
}
