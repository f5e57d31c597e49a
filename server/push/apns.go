package push

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldrt/herald/storage"
)

// DefaultAPNsURL is Apple's production gateway.
const DefaultAPNsURL = "https://api.push.apple.com"

// APNsTokenLifetime is how long a provider token is reused. Apple rejects
// tokens older than an hour and throttles refreshes more often than every 20
// minutes.
const APNsTokenLifetime = 40 * time.Minute

// APNs sends through Apple's HTTP/2 provider API with token (.p8, ES256)
// authentication. It is safe for concurrent use; its connection is shared by
// every send.
type APNs struct {
	url    string
	topic  string // fallback apns-topic when a device has no bundle identifier
	keyID  string
	teamID string
	key    *ecdsa.PrivateKey
	client *http.Client
	now    func() time.Time

	mu       sync.Mutex
	token    string
	issuedAt time.Time
}

// NewAPNs builds the APNs sender for an instance's configuration.
func NewAPNs(cfg storage.APNsConfig) (*APNs, error) {
	if cfg.KeyPEM == "" || cfg.KeyID == "" || cfg.TeamID == "" {
		return nil, errNotConfigured
	}
	key, err := parseP8(cfg.KeyPEM)
	if err != nil {
		return nil, err
	}
	base := strings.TrimRight(cfg.URL, "/")
	if base == "" {
		base = DefaultAPNsURL
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAPEM != "" {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM([]byte(cfg.CAPEM)) {
			return nil, errors.New("apns: the CA file holds no PEM certificate")
		}
		tlsConf.RootCAs = pool
	}
	return &APNs{
		url: base, topic: cfg.Topic, keyID: cfg.KeyID, teamID: cfg.TeamID, key: key,
		client: &http.Client{Transport: gatewayTransport(tlsConf), Timeout: 30 * time.Second}, now: time.Now,
	}, nil
}

// parseP8 reads an APNs signing key: a PEM "PRIVATE KEY" (PKCS #8) holding a
// P-256 key.
func parseP8(s string) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, errors.New("apns: the key is not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		if ec, err2 := x509.ParseECPrivateKey(block.Bytes); err2 == nil {
			return ec, nil
		}
		return nil, fmt.Errorf("apns: parsing the key: %w", err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("apns: the key is not an EC (P-256) key")
	}
	return ec, nil
}

// providerToken returns the cached provider JWT, minting a new one when it
// is older than APNsTokenLifetime or when stale (the token APNs refused) is
// the cached one.
func (a *APNs) providerToken(stale string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if a.token != "" && now.Sub(a.issuedAt) < APNsTokenLifetime && (stale == "" || stale != a.token) {
		return a.token, nil
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": a.teamID, "iat": now.Unix()})
	t.Header["kid"] = a.keyID
	signed, err := t.SignedString(a.key)
	if err != nil {
		return "", fmt.Errorf("apns: signing the provider token: %w", err)
	}
	a.token, a.issuedAt = signed, now
	return signed, nil
}

// Send posts the notification to <url>/3/device/<token>.
func (a *APNs) Send(ctx context.Context, d storage.Delivery, p *Prepared) Result {
	if p.APNs == nil {
		return failed("the publish has no apns payload")
	}
	topic := d.BundleIdentifier
	if topic == "" {
		topic = a.topic
	}
	if topic == "" {
		return failed("no apns-topic: the device has no bundle identifier and the instance no topic")
	}
	var res Result
	stale := ""
	for range 2 { // a second time after an expired provider token
		token, err := a.providerToken(stale)
		if err != nil {
			return failed(err.Error())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url+"/3/device/"+d.Token, bytes.NewReader(p.APNsBody))
		if err != nil {
			return failed("apns: " + err.Error())
		}
		h := req.Header
		h.Set("authorization", "bearer "+token)
		h.Set("apns-topic", topic)
		h.Set("apns-push-type", p.APNs.PushType)
		h.Set("apns-priority", p.APNs.Priority)
		h.Set("content-type", "application/json")
		if p.APNs.Expiration != "" {
			h.Set("apns-expiration", p.APNs.Expiration)
		}
		if p.APNs.CollapseID != "" {
			h.Set("apns-collapse-id", p.APNs.CollapseID)
		}
		resp, err := a.client.Do(req)
		if err != nil {
			return retry("apns: "+err.Error(), 0)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		var reason struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(body, &reason)
		res = classifyAPNs(resp.StatusCode, reason.Reason, retryAfter(resp.Header.Get("Retry-After"), a.now()))
		if resp.StatusCode == http.StatusForbidden && reason.Reason == "ExpiredProviderToken" {
			stale = token
			continue
		}
		break
	}
	return res
}

// classifyAPNs reads an APNs answer: 410 (Unregistered, ExpiredToken) and
// 400 BadDeviceToken mean the token is dead.
func classifyAPNs(status int, reason string, after time.Duration) Result {
	msg := fmt.Sprintf("apns: %d %s", status, reason)
	switch {
	case status == http.StatusGone, reason == "Unregistered", reason == "ExpiredToken", reason == "BadDeviceToken":
		return deadToken(msg)
	case status == http.StatusForbidden && reason == "ExpiredProviderToken":
		return retry(msg, 0)
	}
	return classifyStatus(status, msg, after)
}
