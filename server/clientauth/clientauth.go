// Package clientauth authenticates the requests of Herald's generated clients
// (gen/channelsclient, gen/deviceclient, gen/publishclient,
// gen/reportingclient, gen/adminclient). It is the only package a caller of
// those clients needs besides them, and it imports nothing of the server:
//
//   - ChannelsSigner signs Channels HTTP API requests (auth_key,
//     auth_timestamp, auth_version, body_md5, auth_signature);
//   - BearerToken sends "Authorization: Bearer <token>": the instance's secret
//     key on the Publish API, a user token on the Device API's user binding,
//     HERALD_ADMIN_TOKEN on the admin API;
//   - BeamsUserTokens mints the user tokens (JWT) that bind a device to a
//     user, as the Beams server SDKs' generateToken does.
//
// Each helper returns a RequestEditor, which every generated client takes as
// an option or per call:
//
//	c, err := channelsclient.NewClientWithResponses("http://127.0.0.1:8080",
//		channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner("my-key", "my-secret")))
//
// The Reporting API and most of the Device API are anonymous: their clients
// need no editor.
package clientauth

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
)

// RequestEditor edits an outgoing request before it is sent. It is an alias
// of the generated clients' RequestEditorFn types (func(ctx, req) error), so a
// RequestEditor passes to WithRequestEditorFn, or as a per-call editor, of
// every client without conversion.
type RequestEditor = func(ctx context.Context, req *http.Request) error

// authVersion is the auth_version of the Channels signing scheme.
const authVersion = "1.0"

// ChannelsSigner returns a RequestEditor that signs a Channels HTTP API request
// in place with the app's key and secret, at the time it is sent. It reads the
// body to sign its MD5 and puts it back, readable again through GetBody for
// redirects and retries.
func ChannelsSigner(key, secret string) RequestEditor {
	return func(_ context.Context, req *http.Request) error {
		var body []byte
		if req.Body != nil {
			var err error
			if body, err = io.ReadAll(req.Body); err != nil {
				return fmt.Errorf("clientauth: reading the request body to sign it: %w", err)
			}
			req.Body.Close()
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
		req.URL.RawQuery = SignQuery(req.Method, req.URL.EscapedPath(), req.URL.Query(), body, key, secret, time.Now())
		return nil
	}
}

// SignQuery returns the query string of a signed Channels request: query plus
// auth_key, auth_timestamp (now), auth_version, body_md5 (when body is
// non-empty) and auth_signature, the hex HMAC-SHA256 with secret of
//
//	METHOD "\n" PATH "\n" QUERY
//
// where QUERY is every parameter but auth_signature, keys lower-cased and
// sorted, written key=value without URL escaping and joined by "&". Signing
// parameters already in query, in any case, are replaced. Herald's
// server/signing.Verify is the other side.
func SignQuery(method, path string, query url.Values, body []byte, key, secret string, now time.Time) string {
	q := url.Values{}
	for k, vs := range query {
		// The signing parameters are the signer's: the verifier reads keys
		// case-insensitively, so a caller's Auth_Key would shadow ours.
		if isSigningParam(k) {
			continue
		}
		q[k] = append([]string(nil), vs...)
	}
	q.Set("auth_key", key)
	q.Set("auth_timestamp", strconv.FormatInt(now.Unix(), 10))
	q.Set("auth_version", authVersion)
	if len(body) > 0 {
		sum := md5.Sum(body)
		q.Set("body_md5", hex.EncodeToString(sum[:]))
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(stringToSign(method, path, q)))
	q.Set("auth_signature", hex.EncodeToString(mac.Sum(nil)))
	return q.Encode()
}

// stringToSign is the message SignQuery signs for q (which holds no
// auth_signature yet).
func stringToSign(method, path string, q url.Values) string {
	type pair struct{ key, value string }
	var pairs []pair
	// Keys in q.Encode's order, then a stable sort on the lower-cased key:
	// the order the verifier sees after parsing the encoded query, so keys
	// differing only in case, and repeated values, line up on both sides.
	for _, k := range slices.Sorted(maps.Keys(q)) {
		for _, v := range q[k] {
			pairs = append(pairs, pair{strings.ToLower(k), v})
		}
	}
	slices.SortStableFunc(pairs, func(a, b pair) int { return strings.Compare(a.key, b.key) })
	var b strings.Builder
	b.WriteString(strings.ToUpper(method))
	b.WriteByte('\n')
	b.WriteString(path)
	b.WriteByte('\n')
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.key)
		b.WriteByte('=')
		b.WriteString(p.value)
	}
	return b.String()
}

// isSigningParam reports whether key names one of the signing parameters,
// in any case (the verifier lower-cases keys).
func isSigningParam(key string) bool {
	switch strings.ToLower(key) {
	case "auth_key", "auth_timestamp", "auth_version", "auth_signature", "body_md5":
		return true
	}
	return false
}

// BearerToken returns a RequestEditor that sets "Authorization: Bearer
// <token>", replacing any Authorization header. The token is the instance's
// secret key for the Publish API, a token of BeamsUserTokens for the Device
// API's user binding (PUT …/user), and HERALD_ADMIN_TOKEN for the admin API.
func BearerToken(token string) RequestEditor {
	return func(_ context.Context, req *http.Request) error {
		if token == "" {
			// An empty token would be refused as missing, with a less
			// telling answer than this.
			return errors.New("clientauth: empty bearer token")
		}
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	}
}

// DefaultBeamsTokenTTL is how long a user token stays valid unless
// BeamsUserTokens.TTL says otherwise: 24 hours, as with the Beams server SDKs.
const DefaultBeamsTokenTTL = 24 * time.Hour

// MaxBeamsUserIDLength is the longest user id, in characters, that Herald and
// Beams accept.
const MaxBeamsUserIDLength = 164

// BeamsUserTokens mints user tokens for one Push instance: HS256 JWTs signed
// with the instance's secret key, with sub the user id, iss
// https://<InstanceID>.pushnotifications.pusher.com and exp TTL from now,
// the claims the Beams server SDKs' generateToken puts in. The customer's
// server hands one to a signed-in user's device, which binds itself to the
// user with it (SetDeviceUser of gen/deviceclient).
type BeamsUserTokens struct {
	InstanceID string
	SecretKey  string
	// TTL is how long a token stays valid; 0 means DefaultBeamsTokenTTL.
	TTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Generate returns a signed user token for userID, which must be 1 to
// MaxBeamsUserIDLength characters.
func (g BeamsUserTokens) Generate(userID string) (string, error) {
	switch n := utf8.RuneCountInString(userID); {
	case g.InstanceID == "":
		return "", errors.New("clientauth: BeamsUserTokens needs the instance id")
	case g.SecretKey == "":
		return "", errors.New("clientauth: BeamsUserTokens needs the instance's secret key")
	case g.TTL < 0:
		return "", fmt.Errorf("clientauth: negative token TTL %v", g.TTL)
	case n == 0:
		return "", errors.New("clientauth: empty user id")
	case n > MaxBeamsUserIDLength:
		return "", fmt.Errorf("clientauth: user id of %d characters, at most %d allowed", n, MaxBeamsUserIDLength)
	}
	ttl := g.TTL
	if ttl == 0 {
		ttl = DefaultBeamsTokenTTL
	}
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	token := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject: userID,
		// Every Beams SDK hard-codes this issuer, so Herald accepts it too.
		Issuer:    "https://" + g.InstanceID + ".pushnotifications.pusher.com",
		ExpiresAt: jwt.NewNumericDate(now().Add(ttl)),
	})
	signed, err := token.SignedString([]byte(g.SecretKey))
	if err != nil {
		return "", fmt.Errorf("clientauth: signing the user token: %w", err)
	}
	return signed, nil
}
