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

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"golang.org/x/oauth2/jwt"

	"github.com/heraldrt/herald/server/internal/text"
	"github.com/heraldrt/herald/storage"
)

// DefaultFCMURL is Google's FCM endpoint.
const DefaultFCMURL = "https://fcm.googleapis.com"

const (
	fcmScope          = "https://www.googleapis.com/auth/firebase.messaging"
	tokenRefreshEarly = 5 * time.Minute // renew an access token this long before it expires
)

// serviceAccount is the part of a Google service account key file Herald
// reads itself; golang.org/x/oauth2/google reads the rest.
type serviceAccount struct {
	ProjectID   string `json:"project_id"`
	PrivateKey  string `json:"private_key"`
	ClientEmail string `json:"client_email"`
}

// FCM sends through the Firebase Cloud Messaging HTTP v1 API, authorized by
// an OAuth2 access token from golang.org/x/oauth2: the service account's
// JWT-bearer grant at its token_uri (google.JWTConfigFromJSON), reused
// until tokenRefreshEarly before it expires, and replaced at once when FCM
// refuses it.
type FCM struct {
	sendURL string
	client  *http.Client
	now     func() time.Time

	jwt      *jwt.Config
	tokenCtx context.Context // carries the HTTP client of token requests

	mu     sync.Mutex
	tokens oauth2.TokenSource // reusing
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
	// Checked here so that a bad key fails the sender at once, not each
	// token request.
	block, _ := pem.Decode([]byte(sa.PrivateKey))
	if block == nil {
		return nil, errors.New("fcm: private_key is not PEM")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
			return nil, fmt.Errorf("fcm: parsing private_key: %w", err)
		}
	} else if _, ok := k.(*rsa.PrivateKey); !ok {
		return nil, errors.New("fcm: private_key is not an RSA key")
	}
	conf, err := google.JWTConfigFromJSON([]byte(cfg.ServiceAccountJSON), fcmScope) // token_uri, or Google's
	if err != nil {
		return nil, fmt.Errorf("fcm: %w", err)
	}
	base := strings.TrimRight(cfg.URL, "/")
	if base == "" {
		base = DefaultFCMURL
	}
	transport := gatewayTransport(rootsTLS(roots))
	// A token request does not take the send's context (oauth2.TokenSource
	// has none); its client's timeout bounds it instead.
	tokenCtx := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Transport: transport, Timeout: 10 * time.Second})
	return &FCM{
		sendURL:  base + "/v1/projects/" + url.PathEscape(sa.ProjectID) + "/messages:send",
		client:   &http.Client{Transport: transport, Timeout: 30 * time.Second},
		now:      time.Now,
		jwt:      conf,
		tokenCtx: tokenCtx,
		tokens:   oauth2.ReuseTokenSourceWithExpiry(nil, conf.TokenSource(tokenCtx), tokenRefreshEarly),
	}, nil
}

// accessToken returns the current OAuth2 access token, a new one when it is
// about to expire or when stale is the current (refused) one.
func (f *FCM) accessToken(stale string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tok, err := f.tokens.Token()
	if err == nil && stale != "" && tok.AccessToken == stale {
		// A fresh source has no token: it asks the token endpoint.
		if tok, err = f.jwt.TokenSource(f.tokenCtx).Token(); err == nil {
			f.tokens = oauth2.ReuseTokenSourceWithExpiry(tok, f.jwt.TokenSource(f.tokenCtx), tokenRefreshEarly)
		}
	}
	if err != nil {
		return "", fmt.Errorf("fcm: access token: %w", err)
	}
	return tok.AccessToken, nil
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
		token, err := f.accessToken(stale)
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
	msg := fmt.Sprintf("fcm: %d %s %s", status, code, text.Truncate(e.Error.Message, 200))
	if status == http.StatusNotFound || code == "UNREGISTERED" {
		return deadToken(msg)
	}
	return classifyStatus(status, msg, after)
}
