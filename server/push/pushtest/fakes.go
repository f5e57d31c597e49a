package pushtest

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// APNs is a fake Apple push gateway: TLS with HTTP/2 on loopback.
type APNs struct {
	*Inbox
	Server *httptest.Server
	URL    string // the base URL to configure (HERALD_APNS_URL)
	CAPEM  string // the certificate to trust (HERALD_APNS_CA_FILE)
	KeyPEM string // the .p8 key Herald signs with
	KeyID  string
	TeamID string
	Light  bool // skip the token check (benchmarks)

	pub         *ecdsa.PublicKey
	dead        deadSet
	unavailable failSet
}

// NewAPNs starts a fake APNs gateway with a fresh signing key.
func NewAPNs() (*APNs, error) {
	keyPEM, pub, err := NewAPNsKey()
	if err != nil {
		return nil, err
	}
	f := &APNs{Inbox: newInbox(), KeyPEM: keyPEM, KeyID: "KEYID12345", TeamID: "TEAMID6789", pub: pub}
	f.Server, f.CAPEM = startTLS(f.serve)
	f.URL = f.Server.URL
	return f, nil
}

// startTLS starts a loopback server speaking TLS with HTTP/2, as the real
// gateways do, and returns it with the certificate to trust. Every fake
// has the same certificate (httptest's), so one CA file covers them all.
func startTLS(h http.HandlerFunc) (*httptest.Server, string) {
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	return srv, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
}

// Dead makes the fake answer 410 Unregistered for the tokens.
func (f *APNs) Dead(tokens ...string) { f.dead.add(tokens...) }

// Unavailable makes the fake answer the next n requests for each of the
// tokens with 503 ServiceUnavailable, a transient failure, before whatever
// it would answer otherwise (Dead included).
func (f *APNs) Unavailable(n int, tokens ...string) { f.unavailable.add(n, tokens...) }

// Close stops the server.
func (f *APNs) Close() { f.Server.Close() }

func apnsError(w http.ResponseWriter, status int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"reason":%q}`, reason)
}

func (f *APNs) serve(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.URL.Path, "/3/device/")
	if r.Method != http.MethodPost || !ok {
		apnsError(w, http.StatusNotFound, "BadPath")
		return
	}
	if r.ProtoMajor != 2 {
		f.problem("apns: request over %s, not HTTP/2", r.Proto)
	}
	if !f.Light {
		if err := f.checkToken(r.Header.Get("Authorization")); err != nil {
			f.problem("apns: %v", err)
			apnsError(w, http.StatusForbidden, "InvalidProviderToken")
			return
		}
	}
	if r.Header.Get("apns-topic") == "" {
		f.problem("apns: no apns-topic")
		apnsError(w, http.StatusBadRequest, "MissingTopic")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the sender went away mid-request (a killed process): nothing was delivered
	}
	if !json.Valid(body) {
		f.problem("apns: body is not JSON")
		apnsError(w, http.StatusBadRequest, "PayloadEmpty")
		return
	}
	if f.unavailable.take(token) {
		apnsError(w, http.StatusServiceUnavailable, "ServiceUnavailable")
		return
	}
	if f.dead.has(token) {
		apnsError(w, http.StatusGone, "Unregistered")
		return
	}
	h := map[string]string{}
	for _, k := range []string{"apns-topic", "apns-push-type", "apns-priority", "apns-expiration", "apns-collapse-id"} {
		if v := r.Header.Get(k); v != "" {
			h[k] = v
		}
	}
	f.add(Message{Platform: "apns", Token: token, Headers: h, Body: body})
	w.Header().Set("apns-id", "00000000-0000-4000-8000-000000000000")
	w.WriteHeader(http.StatusOK)
}

func (f *APNs) checkToken(auth string) error {
	raw, ok := strings.CutPrefix(auth, "bearer ")
	if !ok {
		return errors.New("authorization is not a bearer token")
	}
	var claims jwt.MapClaims
	t, err := jwt.ParseWithClaims(raw, &claims, func(t *jwt.Token) (any, error) { return f.pub, nil },
		jwt.WithValidMethods([]string{"ES256"}))
	if err != nil {
		return fmt.Errorf("provider token: %v", err)
	}
	if t.Header["kid"] != f.KeyID {
		return fmt.Errorf("provider token kid %v, want %s", t.Header["kid"], f.KeyID)
	}
	if claims["iss"] != f.TeamID {
		return fmt.Errorf("provider token iss %v, want %s", claims["iss"], f.TeamID)
	}
	iat, err := claims.GetIssuedAt()
	if err != nil || iat == nil || time.Since(iat.Time) > time.Hour {
		return errors.New("provider token iat missing or older than an hour")
	}
	return nil
}

// FCM is a fake Firebase gateway: the HTTP v1 send endpoint and an OAuth2
// token endpoint, over TLS with HTTP/2.
type FCM struct {
	*Inbox
	Server         *httptest.Server
	URL            string // the base URL (HERALD_FCM_URL)
	CAPEM          string // the certificate to trust (SSL_CERT_FILE for a herald process)
	Project        string
	ServiceAccount string // the key file Herald uses; its token_uri is this fake
	Light          bool   // skip the access token check (benchmarks)

	pub         *rsa.PublicKey
	tokens      sync.Map // issued access tokens
	TokenCalls  atomic.Int64
	dead        deadSet
	unavailable failSet
}

// NewFCM starts a fake FCM gateway with a fresh service account.
func NewFCM() (*FCM, error) {
	f := &FCM{Inbox: newInbox(), Project: "herald-test"}
	f.Server, f.CAPEM = startTLS(f.serve)
	f.URL = f.Server.URL
	sa, pub, err := NewServiceAccount(f.Project, f.URL+"/token")
	if err != nil {
		f.Server.Close()
		return nil, err
	}
	f.ServiceAccount, f.pub = sa, pub
	return f, nil
}

// Dead makes the fake answer 404 UNREGISTERED for the tokens.
func (f *FCM) Dead(tokens ...string) { f.dead.add(tokens...) }

// Unavailable makes the fake answer the next n sends to each of the tokens
// with 503 UNAVAILABLE, a transient failure, before whatever it would answer
// otherwise (Dead included).
func (f *FCM) Unavailable(n int, tokens ...string) { f.unavailable.add(n, tokens...) }

// Close stops the server.
func (f *FCM) Close() { f.Server.Close() }

func fcmError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%d,"message":%q,"status":%q,"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":%q}]}}`,
		status, msg, code, code)
}

func (f *FCM) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/token" {
		f.serveToken(w, r)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/projects/"+f.Project+"/messages:send" {
		fcmError(w, http.StatusNotFound, "NOT_FOUND", "no such endpoint "+r.URL.Path)
		return
	}
	if !f.Light {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if _, ok := f.tokens.Load(tok); !ok {
			f.problem("fcm: unknown access token %q", tok)
			fcmError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "bad access token")
			return
		}
	}
	var req struct {
		Message struct {
			Token string            `json:"token"`
			Data  map[string]string `json:"data"`
		} `json:"message"`
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the sender went away mid-request (a killed process): nothing was delivered
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Message.Token == "" {
		f.problem("fcm: body is not a v1 message with a token (data values must be strings): %v", err)
		fcmError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "bad message")
		return
	}
	if f.unavailable.take(req.Message.Token) {
		fcmError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "The service is currently unavailable.")
		return
	}
	if f.dead.has(req.Message.Token) {
		fcmError(w, http.StatusNotFound, "UNREGISTERED", "Requested entity was not found.")
		return
	}
	var msg struct {
		Message json.RawMessage `json:"message"`
	}
	_ = json.Unmarshal(body, &msg)
	f.add(Message{Platform: "fcm", Token: req.Message.Token, Body: msg.Message})
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"name":"projects/%s/messages/%d"}`, f.Project, time.Now().UnixNano())
}

func (f *FCM) serveToken(w http.ResponseWriter, r *http.Request) {
	f.TokenCalls.Add(1)
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		f.problem("fcm token: not a jwt-bearer grant")
		http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
		return
	}
	var claims jwt.MapClaims
	_, err := jwt.ParseWithClaims(r.PostForm.Get("assertion"), &claims, func(t *jwt.Token) (any, error) { return f.pub, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithAudience(f.URL+"/token"), jwt.WithExpirationRequired())
	if err == nil && (claims["iss"] != "herald@"+f.Project+".iam.gserviceaccount.com" ||
		!strings.Contains(fmt.Sprint(claims["scope"]), "https://www.googleapis.com/auth/firebase.messaging")) {
		err = fmt.Errorf("iss %v / scope %v", claims["iss"], claims["scope"])
	}
	if err != nil {
		f.problem("fcm token: bad assertion: %v", err)
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
		return
	}
	tok := "ya29.fake-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	f.tokens.Store(tok, true)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"access_token":%q,"expires_in":3599,"token_type":"Bearer"}`, tok)
}

// WebPush is a fake push service: one endpoint per subscriber at
// <URL>/push/<id>, over TLS with HTTP/2.
type WebPush struct {
	*Inbox
	Server *httptest.Server
	URL    string
	CAPEM  string // the certificate to trust (SSL_CERT_FILE for a herald process)
	Light  bool   // skip VAPID checks and decryption (benchmarks)

	// VAPIDPublicKey is the instance's key the VAPID header must carry
	// (base64url); empty skips that comparison.
	VAPIDPublicKey string

	mu          sync.Mutex
	subs        map[string]*WebSubscriber
	next        atomic.Int64
	dead        deadSet
	unavailable failSet
}

// NewWebPush starts a fake push service.
func NewWebPush() *WebPush {
	f := &WebPush{Inbox: newInbox(), subs: map[string]*WebSubscriber{}}
	f.Server, f.CAPEM = startTLS(f.serve)
	f.URL = f.Server.URL
	return f
}

// Close stops the server.
func (f *WebPush) Close() { f.Server.Close() }

// Subscribe creates a browser subscription on this push service.
func (f *WebPush) Subscribe() (*WebSubscriber, error) {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	auth := make([]byte, 16)
	rand.Read(auth) // never fails (Go 1.24 and later)
	id := "sub-" + strconv.FormatInt(f.next.Add(1), 10)
	s := &WebSubscriber{ID: id, Endpoint: f.URL + "/push/" + id, priv: priv, auth: auth}
	f.mu.Lock()
	f.subs[id] = s
	f.mu.Unlock()
	return s, nil
}

// Dead makes the fake answer 410 Gone for the subscriptions.
func (f *WebPush) Dead(subs ...*WebSubscriber) {
	for _, s := range subs {
		f.dead.add(s.ID)
	}
}

// Unavailable makes the fake answer the next n messages to each of the
// subscriptions with 503 Service Unavailable, a transient failure, before
// whatever it would answer otherwise (Dead included).
func (f *WebPush) Unavailable(n int, subs ...*WebSubscriber) {
	for _, s := range subs {
		f.unavailable.add(n, s.ID)
	}
}

func (f *WebPush) serve(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/push/")
	f.mu.Lock()
	sub := f.subs[id]
	f.mu.Unlock()
	if r.Method != http.MethodPost || !ok || sub == nil {
		http.Error(w, "no such subscription", http.StatusNotFound)
		return
	}
	if f.unavailable.take(id) {
		http.Error(w, "try again later", http.StatusServiceUnavailable)
		return
	}
	if f.dead.has(id) {
		http.Error(w, "subscription expired", http.StatusGone)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the sender went away mid-request (a killed process): nothing was delivered
	}
	ttl := r.Header.Get("TTL")
	if _, err := strconv.Atoi(ttl); err != nil {
		f.problem("web: TTL header %q is not a number", ttl)
		http.Error(w, "TTL required", http.StatusBadRequest)
		return
	}
	plain := body
	if !f.Light {
		if err := f.checkVAPID(r.Header.Get("Authorization"), sub.Endpoint); err != nil {
			f.problem("web: %v", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Content-Encoding") != "aes128gcm" {
			f.problem("web: Content-Encoding %q", r.Header.Get("Content-Encoding"))
		}
		var err error
		if plain, err = Decrypt(sub, body); err != nil {
			f.problem("web: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	f.add(Message{Platform: "web", Token: id, Headers: map[string]string{"TTL": ttl, "Urgency": r.Header.Get("Urgency")}, Body: plain})
	w.WriteHeader(http.StatusCreated)
}

// checkVAPID verifies "vapid t=<JWT>, k=<public key>" (RFC 8292).
func (f *WebPush) checkVAPID(h, endpoint string) error {
	rest, ok := strings.CutPrefix(h, "vapid ")
	if !ok {
		return fmt.Errorf("authorization %q is not a vapid one", h)
	}
	var t, k string
	for _, part := range strings.Split(rest, ",") {
		part = strings.TrimSpace(part)
		if v, ok := strings.CutPrefix(part, "t="); ok {
			t = v
		} else if v, ok := strings.CutPrefix(part, "k="); ok {
			k = v
		}
	}
	if f.VAPIDPublicKey != "" && k != strings.TrimRight(f.VAPIDPublicKey, "=") {
		return fmt.Errorf("vapid k=%s is not the instance key %s", k, f.VAPIDPublicKey)
	}
	raw, err := base64.RawURLEncoding.DecodeString(k)
	if err != nil {
		return fmt.Errorf("vapid k: %v", err)
	}
	pub, err := ecdh.P256().NewPublicKey(raw)
	if err != nil {
		return fmt.Errorf("vapid k: %v", err)
	}
	epub, err := ecdhToECDSA(pub)
	if err != nil {
		return err
	}
	u, _ := url.Parse(endpoint)
	var claims jwt.MapClaims
	_, err = jwt.ParseWithClaims(t, &claims, func(*jwt.Token) (any, error) { return epub, nil },
		jwt.WithValidMethods([]string{"ES256"}), jwt.WithAudience(u.Scheme+"://"+u.Host), jwt.WithExpirationRequired())
	if err != nil {
		return fmt.Errorf("vapid token: %v", err)
	}
	if sub, _ := claims["sub"].(string); !strings.HasPrefix(sub, "mailto:") && !strings.HasPrefix(sub, "https:") {
		return fmt.Errorf("vapid sub %q is not a mailto: or https: URI", sub)
	}
	return nil
}

func ecdhToECDSA(pub *ecdh.PublicKey) (*ecdsa.PublicKey, error) {
	return ecdsa.ParseUncompressedPublicKey(ecdhCurve(), pub.Bytes())
}

// Decrypt decrypts an aes128gcm (RFC 8188 / RFC 8291) message for sub.
func Decrypt(sub *WebSubscriber, body []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("aes128gcm: body shorter than its header")
	}
	salt, rs, idlen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if len(body) < 21+idlen || idlen != 65 {
		return nil, fmt.Errorf("aes128gcm: key id of %d bytes, want the 65-byte sender key", idlen)
	}
	asPub, err := ecdh.P256().NewPublicKey(body[21 : 21+idlen])
	if err != nil {
		return nil, fmt.Errorf("aes128gcm: sender key: %v", err)
	}
	records := body[21+idlen:]
	if len(records) > int(rs) {
		return nil, fmt.Errorf("aes128gcm: %d bytes of records with record size %d: want one record", len(records), rs)
	}
	secret, err := sub.priv.ECDH(asPub)
	if err != nil {
		return nil, err
	}
	info := append(append([]byte("WebPush: info\x00"), sub.priv.PublicKey().Bytes()...), asPub.Bytes()...)
	ikm, err := hkdf.Key(sha256.New, secret, sub.auth, string(info), 32)
	if err != nil {
		return nil, err
	}
	cek, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, err
	}
	nonce, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	plain, err := gcm.Open(nil, nonce, records, nil)
	if err != nil {
		return nil, fmt.Errorf("aes128gcm: %v", err)
	}
	// Strip the padding: zeros, then the last-record delimiter 2.
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 || plain[i] != 2 {
		return nil, errors.New("aes128gcm: no last-record delimiter")
	}
	return plain[:i], nil
}
