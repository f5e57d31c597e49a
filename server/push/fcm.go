package push

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldrt/herald/storage"
)

// DefaultFCMURL is Google's FCM endpoint.
const DefaultFCMURL = "https://fcm.googleapis.com"

const (
	fcmScope          = "https://www.googleapis.com/auth/firebase.messaging"
	defaultTokenURI   = "https://oauth2.googleapis.com/token"
	tokenRefreshEarly = 5 * time.Minute // renew an access token this long before it expires
)

// serviceAccount is the part of a Google service account key file FCM needs.
type serviceAccount struct {
	ProjectID    string `json:"project_id"`
	PrivateKey   string `json:"private_key"`
	PrivateKeyID string `json:"private_key_id"`
	ClientEmail  string `json:"client_email"`
	TokenURI     string `json:"token_uri"`
}

// FCM sends through the Firebase Cloud Messaging HTTP v1 API, authorized by
// an OAuth2 access token obtained with the service account's JWT-bearer grant
// from its token_uri and cached until shortly before it expires.
type FCM struct {
	sendURL string
	account serviceAccount
	key     *rsa.PrivateKey
	client  *http.Client
	now     func() time.Time

	mu      sync.Mutex
	token   string
	expires time.Time
}

// NewFCM builds the FCM sender for an instance's configuration. roots are
// the certificate authorities its TLS connections trust; nil means the
// system's (which SSL_CERT_FILE and SSL_CERT_DIR can replace).
func NewFCM(cfg storage.FCMConfig, roots *x509.CertPool) (*FCM, error) {
	if cfg.ServiceAccountJSON == "" {
		return nil, errNotConfigured
	}
	var sa serviceAccount
	if err := json.Unmarshal([]byte(cfg.ServiceAccountJSON), &sa); err != nil {
		return nil, fmt.Errorf("fcm: the service account is not JSON: %w", err)
	}
	if sa.ProjectID == "" || sa.ClientEmail == "" || sa.PrivateKey == "" {
		return nil, errors.New("fcm: the service account needs project_id, client_email and private_key")
	}
	if sa.TokenURI == "" {
		sa.TokenURI = defaultTokenURI
	}
	block, _ := pem.Decode([]byte(sa.PrivateKey))
	if block == nil {
		return nil, errors.New("fcm: private_key is not PEM")
	}
	var key *rsa.PrivateKey
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		if key, err = x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
			return nil, fmt.Errorf("fcm: parsing private_key: %w", err)
		}
	} else if rk, ok := k.(*rsa.PrivateKey); ok {
		key = rk
	} else {
		return nil, errors.New("fcm: private_key is not an RSA key")
	}
	base := strings.TrimRight(cfg.URL, "/")
	if base == "" {
		base = DefaultFCMURL
	}
	return &FCM{
		sendURL: base + "/v1/projects/" + url.PathEscape(sa.ProjectID) + "/messages:send",
		account: sa, key: key,
		client: &http.Client{Transport: gatewayTransport(rootsTLS(roots)), Timeout: 30 * time.Second}, now: time.Now,
	}, nil
}

// accessToken returns the cached OAuth2 access token, fetching a new one
// when it is about to expire or when stale is the cached (refused) one.
func (f *FCM) accessToken(ctx context.Context, stale string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if f.token != "" && now.Before(f.expires) && (stale == "" || stale != f.token) {
		return f.token, nil
	}
	claims := jwt.MapClaims{
		"iss": f.account.ClientEmail, "scope": fcmScope, "aud": f.account.TokenURI,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	if f.account.PrivateKeyID != "" {
		t.Header["kid"] = f.account.PrivateKeyID
	}
	assertion, err := t.SignedString(f.key)
	if err != nil {
		return "", fmt.Errorf("fcm: signing the assertion: %w", err)
	}
	form := url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:jwt-bearer"}, "assertion": {assertion}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.account.TokenURI, strings.NewReader(form.Encode()))
	if err != nil {
		return "", fmt.Errorf("fcm: token request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := f.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("fcm: token request: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("fcm: token endpoint answered %d: %s", resp.StatusCode, truncate(string(body), 200))
	}
	var tok struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &tok); err != nil || tok.AccessToken == "" {
		return "", errors.New("fcm: the token endpoint's answer has no access_token")
	}
	if tok.ExpiresIn <= 0 {
		tok.ExpiresIn = 3600
	}
	f.token = tok.AccessToken
	f.expires = now.Add(time.Duration(tok.ExpiresIn)*time.Second - tokenRefreshEarly)
	return f.token, nil
}

// Send posts the v1 message for the device's token.
func (f *FCM) Send(ctx context.Context, d storage.Delivery, p *Prepared) Result {
	if p.FCM == nil {
		return failed("the publish has no fcm payload")
	}
	body := p.FCMRequest(d.Token)
	stale := ""
	var res Result
	for range 2 { // a second time after a refused access token
		token, err := f.accessToken(ctx, stale)
		if err != nil {
			return retry(err.Error(), 0)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.sendURL, bytes.NewReader(body))
		if err != nil {
			return failed("fcm: " + err.Error())
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := f.client.Do(req)
		if err != nil {
			return retry("fcm: "+err.Error(), 0)
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 16*1024))
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && stale == "" {
			stale = token
			continue
		}
		res = classifyFCM(resp.StatusCode, raw, retryAfter(resp.Header.Get("Retry-After"), f.now()))
		break
	}
	return res
}

// classifyFCM reads an FCM v1 answer: 404 or the UNREGISTERED error code
// means the token is dead.
func classifyFCM(status int, body []byte, after time.Duration) Result {
	var e struct {
		Error struct {
			Status  string `json:"status"`
			Message string `json:"message"`
			Details []struct {
				ErrorCode string `json:"errorCode"`
			} `json:"details"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	code := e.Error.Status
	for _, d := range e.Error.Details {
		if d.ErrorCode != "" {
			code = d.ErrorCode
		}
	}
	msg := fmt.Sprintf("fcm: %d %s %s", status, code, truncate(e.Error.Message, 200))
	if status == http.StatusNotFound || code == "UNREGISTERED" {
		return deadToken(msg)
	}
	return classifyStatus(status, msg, after)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
