// Package signing implements the server side of the Pusher Channels
// signatures: verifying the signed HTTP API requests (auth_key,
// auth_timestamp, auth_version, body_md5, auth_signature), and the socket
// authorization strings of private, presence and user sign-in. The client
// side of the HTTP API signature, for the generated clients, tests and tools,
// is server/clientauth (SignQuery, ChannelsSigner), which imports nothing of
// the server.
package signing

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxClockSkew is how far auth_timestamp may be from the server's clock.
const MaxClockSkew = 600 * time.Second

// AuthVersion is the only auth_version the API accepts.
const AuthVersion = "1.0"

// Failure kinds, used as the `error` field of the 401 body so a client can tell
// which check refused the request.
const (
	KindMissingParam = "missing_auth_param"
	KindBadVersion   = "invalid_auth_version"
	KindBadTimestamp = "invalid_auth_timestamp"
	KindBodyMD5      = "invalid_body_md5"
	KindBadSignature = "invalid_signature"
)

// Error is a verification failure. Kind is one of the Kind* constants.
type Error struct {
	Kind        string
	Description string
}

func (e *Error) Error() string { return e.Kind + ": " + e.Description }

func fail(kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Description: fmt.Sprintf(format, args...)}
}

// Request holds the parts of an HTTP API request that the signature covers.
type Request struct {
	Method   string
	Path     string // as sent (escaped form); see Verify for the unescaped fallback
	RawQuery string
	Body     []byte
}

// Params are the parsed query parameters of a request, keys lower-cased and
// sorted, repeated keys in the order they were sent. Signature checks need
// the sorted string, the handlers need lookups; both come from here.
type Params struct {
	pairs []pair
}

type pair struct{ key, value string }

// ParseQuery parses a raw query string. Keys are lower-cased, as the signing
// scheme demands; malformed escapes are an error.
func ParseQuery(raw string) (Params, error) {
	p := Params{pairs: make([]pair, 0, strings.Count(raw, "&")+1)}
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		key, err := queryUnescape(k)
		if err != nil {
			return Params{}, err
		}
		value, err := queryUnescape(v)
		if err != nil {
			return Params{}, err
		}
		p.pairs = append(p.pairs, pair{strings.ToLower(key), value})
	}
	// Sorted once here for the string to sign. Stable, so repeated keys
	// (channels[]=a&channels[]=b) keep their order and Get still finds the
	// first one sent.
	slices.SortStableFunc(p.pairs, func(a, b pair) int { return strings.Compare(a.key, b.key) })
	return p, nil
}

// queryUnescape is url.QueryUnescape, returning a string without escapes
// (most signing parameters) after two fast byte searches instead of its
// byte-by-byte scan.
func queryUnescape(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s, nil
	}
	return url.QueryUnescape(s)
}

// Get returns the first value of key (lower-case) and whether it was present.
func (p Params) Get(key string) (string, bool) {
	for _, kv := range p.pairs {
		if kv.key == key {
			return kv.value, true
		}
	}
	return "", false
}

// StringToSign is METHOD "\n" PATH "\n" QUERY, the QUERY being every parameter
// but auth_signature, sorted by key, written key=value unescaped, joined by "&".
func (p Params) StringToSign(method, path string) string {
	return string(p.appendStringToSign(nil, method, path))
}

// appendStringToSign appends StringToSign(method, path) to dst.
func (p Params) appendStringToSign(dst []byte, method, path string) []byte {
	dst = append(dst, strings.ToUpper(method)...)
	dst = append(dst, '\n')
	dst = append(dst, path...)
	dst = append(dst, '\n')
	first := true
	for _, kv := range p.pairs {
		if kv.key == "auth_signature" {
			continue
		}
		if !first {
			dst = append(dst, '&')
		}
		first = false
		dst = append(dst, kv.key...)
		dst = append(dst, '=')
		dst = append(dst, kv.value...)
	}
	return dst
}

// Key returns the auth_key of the request, or a missing-parameter failure. The
// caller looks up the application's secret by it before calling Verify.
func (p Params) Key() (string, *Error) {
	key, ok := p.Get("auth_key")
	if !ok || key == "" {
		return "", fail(KindMissingParam, "The auth_key query parameter is missing.")
	}
	return key, nil
}

// Verify checks a request against the application secret at time now: every
// signing parameter present, auth_version 1.0, auth_timestamp within
// MaxClockSkew, body_md5 matching the exact body, and the signature. The path
// is tried as sent and, when it differs, unescaped, because SDKs differ in
// whether they sign a channel name in the path escaped or not.
func Verify(req Request, p Params, secret string, now time.Time) *Error {
	for _, name := range [...]string{"auth_key", "auth_timestamp", "auth_version", "auth_signature"} {
		if v, ok := p.Get(name); !ok || v == "" {
			return fail(KindMissingParam, "The %s query parameter is missing.", name)
		}
	}
	if v, _ := p.Get("auth_version"); v != AuthVersion {
		return fail(KindBadVersion, "auth_version must be %s.", AuthVersion)
	}
	ts, _ := p.Get("auth_timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fail(KindBadTimestamp, "auth_timestamp must be an integer number of seconds since the Unix epoch.")
	}
	// Whole seconds on both sides, as the timestamp has no finer resolution.
	if skew := now.Unix() - sec; skew > int64(MaxClockSkew/time.Second) || skew < -int64(MaxClockSkew/time.Second) {
		return fail(KindBadTimestamp, "auth_timestamp is more than %d seconds away from the server's time (%d); check the client's clock.", int(MaxClockSkew.Seconds()), now.Unix())
	}
	md5sum, hasMD5 := p.Get("body_md5")
	if len(req.Body) > 0 && !hasMD5 {
		return fail(KindBodyMD5, "The body_md5 query parameter is required when the request has a body.")
	}
	if hasMD5 {
		sum := md5.Sum(req.Body)
		if !strings.EqualFold(md5sum, hex.EncodeToString(sum[:])) {
			return fail(KindBodyMD5, "body_md5 does not match the MD5 of the request body.")
		}
	}
	sig, _ := p.Get("auth_signature")
	m := getMacer()
	defer m.release()
	m.buf = p.appendStringToSign(m.buf, req.Method, req.Path)
	if equalHex(sig, m.sum(secret)) {
		return nil
	}
	if unescaped, err := url.PathUnescape(req.Path); err == nil && unescaped != req.Path {
		m.buf = p.appendStringToSign(m.buf[:0], req.Method, unescaped)
		if equalHex(sig, m.sum(secret)) {
			return nil
		}
	}
	return fail(KindBadSignature, "auth_signature does not match the request; sign METHOD\\nPATH\\nQUERY with the app secret.")
}

// WithoutAuth returns raw (a query string) without the signing parameters
// (auth_key, auth_timestamp, auth_version, auth_signature, body_md5). Once a
// request is verified they are spent; dropping them keeps later query parsing
// (done per parameter by generated binders) cheap.
func WithoutAuth(raw string) string {
	var b strings.Builder
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		key, _, _ := strings.Cut(part, "=")
		if key == "" || isSigningParam(key) {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(part)
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
