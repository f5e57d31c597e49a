package push

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"

	"github.com/heraldrt/herald/storage"
)

// DefaultVAPIDSubject is the VAPID `sub` claim of an instance without a
// configured subject.
const DefaultVAPIDSubject = "mailto:push@localhost"

// aes128gcm overhead of a single record: salt (16), record size (4), key
// length (1), the sender's public key (65), the padding delimiter (1) and
// the AEAD tag (16).
const webPushOverhead = 16 + 4 + 1 + 65 + 1 + 16

// WebPush sends Web Push messages (RFC 8030) encrypted with aes128gcm (RFC
// 8291) and authorized with the instance's VAPID key (RFC 8292), through
// github.com/SherClockHolmes/webpush-go.
type WebPush struct {
	public, private string
	subscriber      string // the VAPID subject as webpush-go wants it
	client          *http.Client
}

// NewWebPush builds the Web Push sender for an instance's VAPID keys.
func NewWebPush(cfg storage.VAPIDConfig) (*WebPush, error) {
	if cfg.PublicKey == "" || cfg.PrivateKey == "" {
		return nil, errNotConfigured
	}
	subject := cfg.Subject
	if subject == "" {
		subject = DefaultVAPIDSubject
	}
	// webpush-go adds "mailto:" to anything that is not an https: URI.
	subscriber := strings.TrimPrefix(subject, "mailto:")
	tr := &http.Transport{
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     5 * time.Minute,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	return &WebPush{public: cfg.PublicKey, private: cfg.PrivateKey, subscriber: subscriber,
		client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// DecodeWebToken reads a web device token: the base64 of the browser's
// PushSubscription JSON.
func DecodeWebToken(token string) (*webpush.Subscription, error) {
	raw, err := base64.StdEncoding.DecodeString(token)
	if err != nil {
		if raw, err = base64.RawStdEncoding.DecodeString(token); err != nil {
			return nil, errors.New("web token is not base64")
		}
	}
	var sub webpush.Subscription
	if err := json.Unmarshal(raw, &sub); err != nil || sub.Endpoint == "" || sub.Keys.Auth == "" || sub.Keys.P256dh == "" {
		return nil, errors.New("web token is not a PushSubscription with endpoint and keys")
	}
	return &sub, nil
}

// Send encrypts the message for the subscription and posts it to its endpoint.
func (w *WebPush) Send(ctx context.Context, d storage.Delivery, p *Prepared) Result {
	if p.Web == nil {
		return failed("the publish has no web payload")
	}
	sub, err := DecodeWebToken(d.Token)
	if err != nil {
		return deadToken(err.Error())
	}
	if len(p.WebBody)+webPushOverhead > int(webpush.MaxRecordSize) {
		return failed(fmt.Sprintf("web push message of %d bytes is over the 4 KiB limit", len(p.WebBody)))
	}
	resp, err := webpush.SendNotificationWithContext(ctx, slices.Clip(p.WebBody), sub, &webpush.Options{
		HTTPClient:      w.client,
		Subscriber:      w.subscriber,
		TTL:             p.Web.TTLSeconds,
		VAPIDPublicKey:  w.public,
		VAPIDPrivateKey: w.private,
		// One record just large enough: no padding beyond the delimiter.
		RecordSize: uint32(len(p.WebBody) + webPushOverhead),
		Urgency:    webpush.UrgencyHigh,
	})
	if err != nil {
		if ctx.Err() != nil || isNetError(err) {
			return retry("web push: "+err.Error(), 0)
		}
		return deadToken("web push: " + err.Error()) // keys the library cannot use
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	msg := fmt.Sprintf("web push: %d %s", resp.StatusCode, truncate(strings.TrimSpace(string(body)), 200))
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone {
		return deadToken(msg)
	}
	return classifyStatus(resp.StatusCode, msg, retryAfter(resp.Header.Get("Retry-After"), time.Now()))
}

// isNetError reports whether err came from sending the request rather than
// from preparing it.
func isNetError(err error) bool {
	var ue interface{ Timeout() bool }
	return errors.As(err, &ue) || strings.Contains(err.Error(), "dial") || strings.Contains(err.Error(), "connection")
}
