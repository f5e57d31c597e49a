package signing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
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

// A request without a body is signed without body_md5, as the Pusher SDKs
// sign a GET; with a body, body_md5 is its MD5.
func TestSignQueryBodyMD5OnlyWithBody(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, body := range [][]byte{nil, {}} {
		q, err := url.ParseQuery(SignQuery("GET", "/apps/3/channels", url.Values{}, body, vectorKey, vectorSecret, now))
		if err != nil {
			t.Fatal(err)
		}
		if q.Has("body_md5") {
			t.Fatalf("body %q: signed with body_md5=%s", body, q.Get("body_md5"))
		}
	}
	q, _ := url.ParseQuery(SignQuery("POST", "/apps/3/events", url.Values{}, []byte(vectorBody), vectorKey, vectorSecret, now))
	if got, want := q.Get("body_md5"), "ec365a775a4cd0599faeb73354201b6f"; got != want {
		t.Fatalf("body_md5 = %q, want %q", got, want)
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
		raw := SignQuery("GET", "/apps/3/channels", url.Values{}, nil, vectorKey, secret, now)
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

// RequestSigner signs a request so that Verify accepts it, the body still
// readable (and readable again through GetBody).
func TestRequestSigner(t *testing.T) {
	sign := RequestSigner(vectorKey, vectorSecret)
	for _, body := range []string{"", vectorBody} {
		req := httptest.NewRequest(http.MethodPost, "http://h/apps/3/events?info=user_count", strings.NewReader(body))
		if body == "" {
			req.Body = nil
		}
		if err := sign(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		p, err := ParseQuery(req.URL.RawQuery)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := p.Get("info"); v != "user_count" {
			t.Fatalf("body %q: query parameter info lost: %s", body, req.URL.RawQuery)
		}
		var got []byte
		if req.Body != nil {
			got, _ = io.ReadAll(req.Body)
			again, _ := req.GetBody()
			if b, _ := io.ReadAll(again); string(b) != body {
				t.Fatalf("GetBody reads %q, want %q", b, body)
			}
		}
		if string(got) != body {
			t.Fatalf("body reads %q after signing, want %q", got, body)
		}
		if err := Verify(Request{Method: req.Method, Path: req.URL.EscapedPath(), RawQuery: req.URL.RawQuery, Body: got}, p, vectorSecret, time.Now()); err != nil {
			t.Fatalf("body %q: own signature refused: %v", body, err)
		}
	}
}
