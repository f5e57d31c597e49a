package clientauth_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldrt/herald/server/beamsauth"
	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/signing"
)

// The test vector published with the Pusher HTTP API documentation.
const (
	vectorKey    = "278d425bdf160c739803"
	vectorSecret = "7ad3773142a6692b25b8"
	vectorBody   = `{"name":"foo","channels":["project-3"],"data":"{\"some\":\"data\"}"}`
)

func TestSignQueryPublishedVector(t *testing.T) {
	raw := clientauth.SignQuery("POST", "/apps/3/events", nil, []byte(vectorBody), vectorKey, vectorSecret, time.Unix(1353088179, 0))
	q, err := url.ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"auth_key":       vectorKey,
		"auth_timestamp": "1353088179",
		"auth_version":   "1.0",
		"body_md5":       "ec365a775a4cd0599faeb73354201b6f",
		"auth_signature": "da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c",
	} {
		if got := q.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// Whatever the caller's query, Herald's verifier accepts the signature: the
// two sides of the scheme agree on the string to sign.
func TestSignQueryVerifies(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name   string
		method string
		path   string
		query  url.Values
		body   string
	}{
		{"NoQueryNoBody", "GET", "/apps/3/channels", nil, ""},
		{"Body", "POST", "/apps/3/events", nil, vectorBody},
		{"LowerCaseMethod", "get", "/apps/3/channels", nil, ""},
		{"Info", "GET", "/apps/3/channels/presence-room", url.Values{"info": {"user_count,subscription_count"}}, ""},
		{"RepeatedKeyKeepsOrder", "GET", "/apps/3/channels", url.Values{"channels[]": {"z", "a"}}, ""},
		{"KeysDifferingInCase", "GET", "/apps/3/channels", url.Values{"B": {"1"}, "b": {"2"}, "a": {"3"}}, ""},
		{"EscapedValues", "GET", "/apps/3/channels", url.Values{"filter_by_prefix": {"presence-a b&c=d%"}}, ""},
		{"CallerSigningParamsReplaced", "POST", "/apps/3/events", url.Values{"Auth_Key": {"other"}, "BODY_MD5": {"stale"}, "auth_signature": {"x"}}, vectorBody},
		{"EscapedPath", "GET", "/apps/3/channels/%23server-to-user-1", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := clientauth.SignQuery(tt.method, tt.path, tt.query, []byte(tt.body), vectorKey, vectorSecret, now)
			p, err := signing.ParseQuery(raw)
			if err != nil {
				t.Fatal(err)
			}
			req := signing.Request{Method: strings.ToUpper(tt.method), Path: tt.path, RawQuery: raw, Body: []byte(tt.body)}
			if err := signing.Verify(req, p, vectorSecret, now); err != nil {
				t.Fatalf("refused: %v (query %s)", err, raw)
			}
			if key, _ := p.Get("auth_key"); key != vectorKey {
				t.Fatalf("auth_key = %q, want %q", key, vectorKey)
			}
			for k, vs := range tt.query {
				if strings.HasPrefix(strings.ToLower(k), "auth_") || strings.EqualFold(k, "body_md5") {
					continue
				}
				if got := signing.WithoutAuth(raw); !strings.Contains(got, url.Values{k: vs}.Encode()) {
					t.Fatalf("parameter %s lost: %s", k, raw)
				}
			}
		})
	}
}

// A request without a body is signed without body_md5, as the Pusher SDKs
// sign a GET; with a body, body_md5 is its MD5.
func TestSignQueryBodyMD5OnlyWithBody(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, body := range [][]byte{nil, {}} {
		q, err := url.ParseQuery(clientauth.SignQuery("GET", "/apps/3/channels", url.Values{}, body, vectorKey, vectorSecret, now))
		if err != nil {
			t.Fatal(err)
		}
		if q.Has("body_md5") {
			t.Fatalf("body %q: signed with body_md5=%s", body, q.Get("body_md5"))
		}
	}
}

// ChannelsSigner signs a request so that Verify accepts it, the body still
// readable (and readable again through GetBody), the caller's parameters kept.
func TestChannelsSigner(t *testing.T) {
	sign := clientauth.ChannelsSigner(vectorKey, vectorSecret)
	for _, body := range []string{"", vectorBody} {
		req := httptest.NewRequest(http.MethodPost, "http://h/apps/3/events?info=user_count", strings.NewReader(body))
		if body == "" {
			req.Body = nil
		}
		if err := sign(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		p, err := signing.ParseQuery(req.URL.RawQuery)
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
		if err := signing.Verify(signing.Request{Method: req.Method, Path: req.URL.EscapedPath(), RawQuery: req.URL.RawQuery, Body: got}, p, vectorSecret, time.Now()); err != nil {
			t.Fatalf("body %q: own signature refused: %v", body, err)
		}
	}
}

type failingBody struct{}

func (failingBody) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }
func (failingBody) Close() error             { return nil }

func TestChannelsSignerBodyError(t *testing.T) {
	req := httptest.NewRequest(http.MethodPost, "http://h/apps/3/events", nil)
	req.Body = failingBody{}
	err := clientauth.ChannelsSigner(vectorKey, vectorSecret)(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("err = %v, want the body's read error", err)
	}
}

func TestBearerToken(t *testing.T) {
	req := httptest.NewRequest(http.MethodPost, "http://h/publish_api/v1/instances/i/publishes", nil)
	req.Header.Set("Authorization", "Basic old")
	if err := clientauth.BearerToken("s3cret")(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer s3cret" {
		t.Fatalf("Authorization = %q, want [Bearer s3cret]", got)
	}
	if err := clientauth.BearerToken("")(context.Background(), req); err == nil {
		t.Fatal("empty token accepted")
	}
}

// The tokens carry what the Beams SDKs' generateToken puts in, and Herald's
// verifier (server/beamsauth) takes them.
func TestBeamsUserTokens(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return at }
	long := strings.Repeat("é", clientauth.MaxBeamsUserIDLength) // characters, not bytes
	tests := []struct {
		name    string
		gen     clientauth.BeamsUserTokens
		user    string
		wantExp time.Time
		wantErr string
	}{
		{"DefaultTTL", clientauth.BeamsUserTokens{InstanceID: instanceID, SecretKey: secretKey, Now: clock}, "alice", at.Add(24 * time.Hour), ""},
		{"OwnTTL", clientauth.BeamsUserTokens{InstanceID: instanceID, SecretKey: secretKey, TTL: time.Hour, Now: clock}, "alice", at.Add(time.Hour), ""},
		{"LongestUserID", clientauth.BeamsUserTokens{InstanceID: instanceID, SecretKey: secretKey, Now: clock}, long, at.Add(24 * time.Hour), ""},
		{"ErrUserIDTooLong", clientauth.BeamsUserTokens{InstanceID: instanceID, SecretKey: secretKey}, long + "x", time.Time{}, "at most 164"},
		{"ErrEmptyUserID", clientauth.BeamsUserTokens{InstanceID: instanceID, SecretKey: secretKey}, "", time.Time{}, "empty user id"},
		{"ErrNoInstance", clientauth.BeamsUserTokens{SecretKey: secretKey}, "alice", time.Time{}, "instance id"},
		{"ErrNoSecret", clientauth.BeamsUserTokens{InstanceID: instanceID}, "alice", time.Time{}, "secret key"},
		{"ErrNegativeTTL", clientauth.BeamsUserTokens{InstanceID: instanceID, SecretKey: secretKey, TTL: -time.Second}, "alice", time.Time{}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token, err := tt.gen.Generate(tt.user)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var claims jwt.RegisteredClaims
			parsed, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return []byte(secretKey), nil },
				jwt.WithValidMethods([]string{"HS256"}), jwt.WithTimeFunc(clock))
			if err != nil {
				t.Fatal(err)
			}
			if alg := parsed.Header["alg"]; alg != "HS256" {
				t.Fatalf("alg = %v, want HS256", alg)
			}
			if claims.Subject != tt.user || claims.Issuer != beamsauth.Issuer(instanceID) || !claims.ExpiresAt.Equal(tt.wantExp) {
				t.Fatalf("claims sub=%q iss=%q exp=%v; want %q, %q, %v", claims.Subject, claims.Issuer, claims.ExpiresAt, tt.user, beamsauth.Issuer(instanceID), tt.wantExp)
			}
			v := beamsauth.Verifier{InstanceID: instanceID, SecretKey: secretKey, Now: clock}
			if user, err := v.Verify("Bearer " + token); err != nil || user != tt.user {
				t.Fatalf("Herald's verifier: user %q, %v", user, err)
			}
			v.Now = func() time.Time { return tt.wantExp.Add(time.Second) }
			if _, err := v.Verify("Bearer " + token); !errors.Is(err, beamsauth.ErrExpired) {
				t.Fatalf("a second past exp: %v, want ErrExpired", err)
			}
		})
	}
}

// Without a clock, tokens are valid from now for a day.
func TestBeamsUserTokensRealClock(t *testing.T) {
	token, err := clientauth.BeamsUserTokens{InstanceID: instanceID, SecretKey: secretKey}.Generate("bob")
	if err != nil {
		t.Fatal(err)
	}
	v := beamsauth.Verifier{InstanceID: instanceID, SecretKey: secretKey}
	if user, err := v.Verify("Bearer " + token); err != nil || user != "bob" {
		t.Fatalf("user %q, %v", user, err)
	}
	v.Now = func() time.Time { return time.Now().Add(clientauth.DefaultBeamsTokenTTL + time.Minute) }
	if _, err := v.Verify("Bearer " + token); !errors.Is(err, beamsauth.ErrExpired) {
		t.Fatalf("a day later: %v, want ErrExpired", err)
	}
}
