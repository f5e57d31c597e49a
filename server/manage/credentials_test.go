package manage

import (
	"regexp"
	"testing"

	"github.com/heraldrt/herald/server/internal/testkit"
)

func TestNewApp(t *testing.T) {
	appID := regexp.MustCompile(`^[1-9][0-9]{6}$`)
	lowerHex := regexp.MustCompile(`^[0-9a-f]{20}$`)
	for range 200 {
		app := NewApp()
		if !appID.MatchString(app.ID) {
			t.Fatalf("app id %q: want 7 digits without a leading zero", app.ID)
		}
		if !lowerHex.MatchString(app.Key) || !lowerHex.MatchString(app.Secret) {
			t.Fatalf("key %q, secret %q: want 20 lower-case hex digits each", app.Key, app.Secret)
		}
		if !app.Enabled || !app.ClientEvents || !app.SubscriptionCount {
			t.Fatalf("app %+v: want enabled, client events and subscription_count on", app)
		}
	}
}

func TestNewInstance(t *testing.T) {
	uuidV4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	secretKey := regexp.MustCompile(`^[0-9A-F]{64}$`)
	seen := map[string]bool{}
	for range 200 {
		in, err := NewInstance()
		if err != nil {
			t.Fatal(err)
		}
		if !uuidV4.MatchString(in.ID) || !ValidInstanceID(in.ID) {
			t.Fatalf("%q is not a version 4 UUID", in.ID)
		}
		if !secretKey.MatchString(in.SecretKey) {
			t.Fatalf("secret key %q: want 64 upper-case hex digits", in.SecretKey)
		}
		if seen[in.ID] || seen[in.VAPID.PublicKey] {
			t.Fatalf("instance %q or its VAPID key generated twice", in.ID)
		}
		seen[in.ID], seen[in.VAPID.PublicKey] = true, true
		testkit.CheckVAPID(t, in.VAPID.PublicKey, in.VAPID.PrivateKey)
	}
}

func TestRandomHex(t *testing.T) {
	for _, n := range []int{0, 1, 10, 32} {
		got := randomHex(n)
		if len(got) != 2*n || !regexp.MustCompile(`^[0-9a-f]*$`).MatchString(got) {
			t.Fatalf("randomHex(%d) = %q, want %d lower-case hex digits", n, got, 2*n)
		}
	}
}

func TestValidInstanceID(t *testing.T) {
	for id, want := range map[string]bool{
		"0c2bbe0a-96b6-4f58-9ad7-1d4bd7bc9b63":          true,
		"0C2BBE0A-96B6-4F58-9AD7-1D4BD7BC9B63":          true,
		"0c2bbe0a96b64f589ad71d4bd7bc9b63":              false, // no hyphens
		"{0c2bbe0a-96b6-4f58-9ad7-1d4bd7bc9b63}":        false,
		"urn:uuid:0c2bbe0a-96b6-4f58-9ad7-1d4bd7bc9b63": false,
		"0c2bbe0a-96b6-4f58-9ad7-1d4bd7bc9b6g":          false,
		"0c2bbe0a+96b6-4f58-9ad7-1d4bd7bc9b63":          false,
		"":                                              false,
	} {
		if got := ValidInstanceID(id); got != want {
			t.Errorf("ValidInstanceID(%q) = %v, want %v", id, got, want)
		}
	}
}
