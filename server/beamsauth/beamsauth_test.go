package beamsauth

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const (
	instanceID      = "0b7e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
	otherInstanceID = "9f7e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
	secretKey       = "beams-secret-key"
	extraIssuer     = "https://auth.example.com"
)

// now is the verifiers' clock: far from the real time, so a check that read
// time.Now instead of Verifier.Now would refuse every token.
var now = time.Date(2020, 3, 1, 12, 0, 0, 0, time.UTC)

// claims returns valid claims for user alice of the instance, changed by edit.
func claims(edit func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{
		"sub": "alice",
		"iss": Issuer(instanceID),
		"iat": now.Unix(),
		"exp": now.Add(time.Hour).Unix(),
	}
	if edit != nil {
		edit(c)
	}
	return c
}

func sign(t *testing.T, method jwt.SigningMethod, c jwt.MapClaims, key any) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hs256 signs c as the customer's server does: HS256 with the secret key.
func hs256(t *testing.T, c jwt.MapClaims) string {
	t.Helper()
	return sign(t, jwt.SigningMethodHS256, c, []byte(secretKey))
}

func TestIssuer(t *testing.T) {
	if got, want := Issuer(instanceID), "https://"+instanceID+".pushnotifications.pusher.com"; got != want {
		t.Fatalf("Issuer = %q, want %q", got, want)
	}
}

func TestVerify(t *testing.T) {
	plain := Verifier{InstanceID: instanceID, SecretKey: secretKey, Now: func() time.Time { return now }}
	withExtra := plain
	withExtra.ExtraIssuer = extraIssuer

	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	// RS256 in the header, but an HMAC of the secret key as the signature:
	// the algorithm confusion a verifier that trusts the header falls for.
	confused := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(nil))
		signing, err := tok.SigningString()
		if err != nil {
			t.Fatal(err)
		}
		sig, err := jwt.SigningMethodHS256.Sign(signing, []byte(secretKey))
		if err != nil {
			t.Fatal(err)
		}
		return signing + "." + tok.EncodeSegment(sig)
	}()
	// alice's signature over a payload that names bob.
	tampered := func() string {
		alice := strings.Split(hs256(t, claims(nil)), ".")
		bob := strings.Split(hs256(t, claims(func(c jwt.MapClaims) { c["sub"] = "bob" })), ".")
		return alice[0] + "." + bob[1] + "." + alice[2]
	}()

	good := hs256(t, claims(nil))
	tests := []struct {
		name          string
		v             Verifier
		authorization string
		wantSub       string // when the token is accepted
		wantErr       error  // when it is refused
		wantClaim     string // the claim a MissingClaimError names
	}{
		// Issuers.
		{"OKOwnIssuer", plain, "Bearer " + good, "alice", nil, ""},
		{"OKOwnIssuerWithExtraConfigured", withExtra, "Bearer " + good, "alice", nil, ""},
		{"OKExtraIssuerWhenConfigured", withExtra, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["iss"] = extraIssuer })), "alice", nil, ""},
		{"ErrOtherInstanceIssuer", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["iss"] = Issuer(otherInstanceID) })), "", ErrInvalidIssuer, ""},
		{"ErrOtherInstanceIssuerWithExtraConfigured", withExtra, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["iss"] = Issuer(otherInstanceID) })), "", ErrInvalidIssuer, ""},
		{"ErrExtraIssuerNotConfigured", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["iss"] = extraIssuer })), "", ErrInvalidIssuer, ""},
		{"ErrOtherExtraIssuer", withExtra, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["iss"] = "https://auth.example.org" })), "", ErrInvalidIssuer, ""},
		{"ErrOwnIssuerWithSuffix", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["iss"] = Issuer(instanceID) + ".evil.example" })), "", ErrInvalidIssuer, ""},
		{"ErrOwnIssuerWithPath", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["iss"] = Issuer(instanceID) + "/x" })), "", ErrInvalidIssuer, ""},
		{"ErrOwnIssuerOverHTTP", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["iss"] = "http://" + instanceID + ".pushnotifications.pusher.com" })), "", ErrInvalidIssuer, ""},
		{"ErrBareHostIssuer", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["iss"] = "https://pushnotifications.pusher.com" })), "", ErrInvalidIssuer, ""},

		// Signature and algorithm.
		{"ErrWrongKey", plain, "Bearer " + sign(t, jwt.SigningMethodHS256, claims(nil), []byte("another-secret")), "", ErrMalformedToken, ""},
		{"ErrTamperedPayload", plain, "Bearer " + tampered, "", ErrMalformedToken, ""},
		{"ErrAlgNone", plain, "Bearer " + sign(t, jwt.SigningMethodNone, claims(nil), jwt.UnsafeAllowNoneSignatureType), "", ErrMalformedToken, ""},
		{"ErrAlgHS512", plain, "Bearer " + sign(t, jwt.SigningMethodHS512, claims(nil), []byte(secretKey)), "", ErrMalformedToken, ""},
		{"ErrAlgRS256", plain, "Bearer " + sign(t, jwt.SigningMethodRS256, claims(nil), rsaKey), "", ErrMalformedToken, ""},
		{"ErrAlgRS256WithHMACSignature", plain, "Bearer " + confused, "", ErrMalformedToken, ""},
		{"ErrNotAJWT", plain, "Bearer not.a.jwt", "", ErrMalformedToken, ""},
		{"ErrSubNotString", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["sub"] = 42 })), "", ErrMalformedToken, ""},

		// Time.
		{"ErrExpired", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Second).Unix() })), "", ErrExpired, ""},
		{"ErrExpiredLongAgo", withExtra, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-24 * time.Hour).Unix() })), "", ErrExpired, ""},
		{"ErrNotYetValid", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() })), "", ErrExpired, ""},
		{"OKValidFromNow", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(-time.Second).Unix() })), "alice", nil, ""},

		// Claims.
		{"ErrMissingExp", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { delete(c, "exp") })), "", ErrMissingClaim, "exp"},
		{"ErrMissingSub", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { delete(c, "sub") })), "", ErrMissingClaim, "sub"},
		{"ErrEmptySub", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["sub"] = "" })), "", ErrMissingClaim, "sub"},
		{"ErrMissingIss", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { delete(c, "iss") })), "", ErrMissingClaim, "iss"},
		{"OKSubAtMaxLength", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["sub"] = strings.Repeat("é", MaxUserIDLength) })), strings.Repeat("é", MaxUserIDLength), nil, ""},
		// PostgreSQL's text cannot hold NUL, wherever it is in the user id.
		{"ErrSubWithNUL", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["sub"] = "al\x00ice" })), "", ErrInvalidSubject, ""},
		{"ErrSubStartingWithNUL", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["sub"] = "\x00alice" })), "", ErrInvalidSubject, ""},
		{"ErrSubTooLong", plain, "Bearer " + hs256(t, claims(func(c jwt.MapClaims) { c["sub"] = strings.Repeat("u", MaxUserIDLength+1) })), "", ErrInvalidSubject, ""},

		// The header.
		{"OKSchemeOtherCase", plain, "bearer " + good, "alice", nil, ""},
		{"ErrNoHeader", plain, "", "", ErrMissingToken, ""},
		{"ErrSchemeOnly", plain, "Bearer", "", ErrMissingToken, ""},
		{"ErrSchemeAndSpace", plain, "Bearer  ", "", ErrMissingToken, ""},
		{"ErrBasicScheme", plain, "Basic " + good, "", ErrMissingToken, ""},
		{"ErrNoScheme", plain, good, "", ErrMissingToken, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := tc.v.Verify(tc.authorization)
			if tc.wantErr == nil {
				if err != nil || sub != tc.wantSub {
					t.Fatalf("Verify = %q, %v; want %q accepted", sub, err, tc.wantSub)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Verify = %q, %v; want %v", sub, err, tc.wantErr)
			}
			if sub != "" {
				t.Errorf("refused token returned user %q", sub)
			}
			for _, other := range []error{ErrMissingToken, ErrMalformedToken, ErrExpired, ErrMissingClaim, ErrInvalidSubject, ErrInvalidIssuer} {
				if other != tc.wantErr && errors.Is(err, other) {
					t.Errorf("error %v also matches %v", err, other)
				}
			}
			if tc.wantClaim != "" {
				var mc *MissingClaimError
				if !errors.As(err, &mc) || mc.Claim != tc.wantClaim {
					t.Fatalf("error %v, want a MissingClaimError for %q", err, tc.wantClaim)
				}
				if got, want := mc.Error(), "missing claim: "+tc.wantClaim; got != want {
					t.Fatalf("MissingClaimError says %q, want %q", got, want)
				}
			}
		})
	}
}

// TestVerifyDefaultClock checks that a Verifier without Now reads the real
// time: a token that expired a minute ago is refused, one valid for an hour
// is accepted.
func TestVerifyDefaultClock(t *testing.T) {
	v := Verifier{InstanceID: instanceID, SecretKey: secretKey}
	fresh := hs256(t, jwt.MapClaims{"sub": "alice", "iss": Issuer(instanceID), "exp": time.Now().Add(time.Hour).Unix()})
	if sub, err := v.Verify("Bearer " + fresh); err != nil || sub != "alice" {
		t.Fatalf("fresh token: %q, %v", sub, err)
	}
	stale := hs256(t, jwt.MapClaims{"sub": "alice", "iss": Issuer(instanceID), "exp": time.Now().Add(-time.Minute).Unix()})
	if _, err := v.Verify("Bearer " + stale); !errors.Is(err, ErrExpired) {
		t.Fatalf("stale token: %v, want %v", err, ErrExpired)
	}
}
