package signing

import (
	"net/url"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/clientauth"
)

// Tests that kill mutants gremlins found alive (make mutate); the
// equivalent ones are listed in scripts/mutate-equivalent.md.

func TestParseQueryWithoutSeparator(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want string // StringToSign's query line
	}{
		{"", ""},
		{"auth_key=k", "auth_key=k"},
		{"&", ""},
	} {
		p, err := ParseQuery(tt.raw)
		if err != nil {
			t.Fatalf("ParseQuery(%q): %v", tt.raw, err)
		}
		if got, want := p.StringToSign("GET", "/p"), "GET\n/p\n"+tt.want; got != want {
			t.Fatalf("ParseQuery(%q): string to sign %q, want %q", tt.raw, got, want)
		}
	}
}

// Requests of two apps taking turns both find their keyed MAC cached:
// verifying them allocates nothing.
func TestVerifyTwoSecretsAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	now := time.Unix(1_700_000_000, 0)
	type signed struct {
		req    Request
		p      Params
		secret string
	}
	var apps []signed
	for _, secret := range []string{"two-secrets-a", "two-secrets-b"} {
		raw := clientauth.SignQuery("GET", "/apps/3/channels", url.Values{}, nil, vectorKey, secret, now)
		p, err := ParseQuery(raw)
		if err != nil {
			t.Fatal(err)
		}
		apps = append(apps, signed{Request{Method: "GET", Path: "/apps/3/channels", RawQuery: raw}, p, secret})
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, a := range apps {
			if err := Verify(a.req, a.p, a.secret, now); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs > 0 {
		t.Fatalf("Verify allocates %.0f times per pair of requests of two apps, want 0", allocs)
	}
}

func TestKey(t *testing.T) {
	for _, tt := range []struct {
		raw, want string
	}{
		{"auth_key=278d&auth_timestamp=1", "278d"},
		{"AUTH_KEY=278d", "278d"},
		{"auth_key=", ""},
		{"auth_timestamp=1", ""},
	} {
		p, err := ParseQuery(tt.raw)
		if err != nil {
			t.Fatal(err)
		}
		key, ferr := p.Key()
		if tt.want != "" && (key != tt.want || ferr != nil) {
			t.Fatalf("%q: Key() = %q, %v; want %q", tt.raw, key, ferr, tt.want)
		}
		if tt.want == "" && (ferr == nil || ferr.Kind != KindMissingParam) {
			t.Fatalf("%q: Key() = %q, %v; want %s", tt.raw, key, ferr, KindMissingParam)
		}
	}
	if got, want := fail(KindBadVersion, "auth_version must be %s.", AuthVersion).Error(), "invalid_auth_version: auth_version must be 1.0."; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}
