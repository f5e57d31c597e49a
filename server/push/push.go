// Package push delivers Push publishes through the gateways: APNs (HTTP/2,
// token authentication), FCM (HTTP v1, service-account OAuth2) and Web Push
// (VAPID, aes128gcm), each behind the Sender interface, and the Dispatcher
// that resolves stored publishes into deliveries and sends them with bounded
// concurrency, retries and restart safety.
package push

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"time"

	"github.com/heraldrt/herald/server/netguard"
	"github.com/heraldrt/herald/storage"
)

// Sender sends one notification through a gateway.
type Sender interface {
	// Send delivers the prepared publish to the delivery's device. It never
	// panics on a gateway answer; every outcome is in the Result.
	Send(ctx context.Context, d storage.Delivery, p *Prepared) Result
}

// Result is the outcome of one attempt.
type Result struct {
	Outcome    storage.DeliveryOutcome
	RetryAfter time.Duration // a gateway's Retry-After, for DeliveryRetry
	Reason     string        // why it failed, for the log
}

func sent() Result { return Result{Outcome: storage.DeliverySent} }

func failed(reason string) Result { return Result{Outcome: storage.DeliveryFailed, Reason: reason} }

func deadToken(reason string) Result {
	return Result{Outcome: storage.DeliveryDeadToken, Reason: reason}
}

func retry(reason string, after time.Duration) Result {
	return Result{Outcome: storage.DeliveryRetry, Reason: reason, RetryAfter: after}
}

// classifyStatus is the common reading of a gateway's HTTP status: 2xx sent,
// 429 and 5xx retried, anything else failed. Gateways refine it.
func classifyStatus(status int, reason string, after time.Duration) Result {
	switch {
	case status >= 200 && status < 300:
		return sent()
	case status == 429 || status >= 500:
		return retry(reason, after)
	default:
		return failed(reason)
	}
}

// gatewayTransport is the HTTP transport of a gateway sender. Gateways
// speak HTTP/2 over TLS: one connection multiplexes every concurrent send,
// and only one is dialled at a time (otherwise each worker's first send
// dials and handshakes its own, all but one thrown away). A plain http://
// gateway (tests, development) speaks HTTP/1.1 and gets a connection per
// busy worker.
func gatewayTransport(tlsConf *tls.Config) http.RoundTripper {
	h2, plain := gatewayTransports(tlsConf)
	return schemeTransport{tls: h2, plain: plain}
}

// guardedTransport is gatewayTransport for URLs strangers supplied (Web
// Push endpoints): both transports dial through the guard.
func guardedTransport(tlsConf *tls.Config, guard *netguard.Policy) http.RoundTripper {
	h2, plain := gatewayTransports(tlsConf)
	return schemeTransport{tls: guard.Transport(h2), plain: guard.Transport(plain)}
}

// gatewayTransports are the https and the plain http transport of a sender.
func gatewayTransports(tlsConf *tls.Config) (h2, plain *http.Transport) {
	h2 = &http.Transport{
		TLSClientConfig:     tlsConf,
		ForceAttemptHTTP2:   true,
		MaxConnsPerHost:     1, // for HTTP/2: new connections dialled at a time
		IdleConnTimeout:     5 * time.Minute,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	plain = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: 5 * time.Minute}
	return h2, plain
}

// schemeTransport sends https requests through one transport and the others
// through another.
type schemeTransport struct{ tls, plain http.RoundTripper }

func (t schemeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "https" {
		return t.tls.RoundTrip(r)
	}
	return t.plain.RoundTrip(r)
}

// rootsTLS is the TLS configuration of a sender trusting roots (nil: the
// system's authorities).
func rootsTLS(roots *x509.CertPool) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
}
