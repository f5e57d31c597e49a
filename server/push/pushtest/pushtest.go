// Package pushtest runs fake push gateways on loopback that speak the real
// wire formats and check what Herald sends: APNs over TLS and HTTP/2 with the
// ES256 provider token and the apns-* headers, FCM HTTP v1 behind an OAuth2
// token endpoint that checks the service account's signed assertion, and Web
// Push endpoints that check the VAPID token and decrypt aes128gcm with keys
// the fake owns. Tests, benchmarks and cmd/fakegateways use it.
package pushtest

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"sync"
	"sync/atomic"
)

// Message is one notification a fake gateway accepted.
type Message struct {
	Platform string            // apns, fcm or web
	Token    string            // the device token (web: the endpoint id)
	Headers  map[string]string // the gateway-specific headers that matter
	Body     json.RawMessage   // apns: the body; fcm: the v1 message; web: the decrypted plaintext
}

// Inbox collects what a fake accepted and the problems it found.
type Inbox struct {
	mu       sync.Mutex
	byToken  map[string][]Message
	problems []string
	count    atomic.Int64
	// Keep, when false, counts messages without storing them (benchmarks).
	Keep bool
}

func newInbox() *Inbox { return &Inbox{byToken: map[string][]Message{}, Keep: true} }

func (in *Inbox) add(m Message) {
	in.count.Add(1)
	if !in.Keep {
		return
	}
	in.mu.Lock()
	in.byToken[m.Token] = append(in.byToken[m.Token], m)
	in.mu.Unlock()
}

func (in *Inbox) problem(format string, args ...any) {
	in.mu.Lock()
	if len(in.problems) < 100 {
		in.problems = append(in.problems, fmt.Sprintf(format, args...))
	}
	in.mu.Unlock()
}

// Count is how many messages were accepted.
func (in *Inbox) Count() int { return int(in.count.Load()) }

// For returns the messages accepted for a token.
func (in *Inbox) For(token string) []Message {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Message(nil), in.byToken[token]...)
}

// Tokens returns how many messages each token got.
func (in *Inbox) Tokens() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string]int, len(in.byToken))
	for k, v := range in.byToken {
		out[k] = len(v)
	}
	return out
}

// Problems returns what the fake found wrong in requests (bad tokens,
// headers, signatures, undecryptable bodies); empty when all was right.
func (in *Inbox) Problems() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.problems...)
}

// deadSet is a set of tokens a fake answers as dead.
type deadSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func (d *deadSet) add(tokens ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]bool{}
	}
	for _, t := range tokens {
		d.m[t] = true
	}
}

func (d *deadSet) has(t string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m[t]
}

// failSet counts, per token, the requests a fake still answers with a
// transient failure.
type failSet struct {
	mu sync.Mutex
	m  map[string]int
}

func (f *failSet) add(n int, tokens ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]int{}
	}
	for _, t := range tokens {
		f.m[t] += n
	}
}

// take reports whether the request for t is to fail, counting it.
func (f *failSet) take(t string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m[t] <= 0 {
		return false
	}
	f.m[t]--
	return true
}

// NewAPNsKey returns a fresh .p8 signing key as PEM (PKCS #8) and its public key.
func NewAPNsKey() (string, *ecdsa.PublicKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", nil, err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), &k.PublicKey, nil
}

// NewServiceAccount returns a service account key file for project, whose
// token_uri is tokenURI, and its public key.
func NewServiceAccount(project, tokenURI string) (string, *rsa.PublicKey, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", nil, err
	}
	sa, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": project, "private_key_id": "test-key-1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "herald@" + project + ".iam.gserviceaccount.com", "token_uri": tokenURI,
	})
	return string(sa), &k.PublicKey, err
}

// WebSubscriber is a browser's push subscription: the keys the fake uses to
// decrypt, and the token a web device registers with.
type WebSubscriber struct {
	ID       string
	Endpoint string
	priv     *ecdh.PrivateKey
	auth     []byte
}

// Token is the web device token: base64 of the PushSubscription JSON.
func (s *WebSubscriber) Token() string { return s.TokenAt(s.Endpoint) }

// TokenAt is a web device token with the subscriber's keys and another
// endpoint: a device whose notifications go somewhere else (the tests of the
// address guard point it at internal listeners).
func (s *WebSubscriber) TokenAt(endpoint string) string {
	enc := base64.RawURLEncoding
	b, _ := json.Marshal(map[string]any{
		"endpoint": endpoint,
		"keys":     map[string]string{"p256dh": enc.EncodeToString(s.priv.PublicKey().Bytes()), "auth": enc.EncodeToString(s.auth)},
	})
	return base64.StdEncoding.EncodeToString(b)
}

func ecdhCurve() elliptic.Curve { return elliptic.P256() }
