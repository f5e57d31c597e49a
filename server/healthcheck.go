package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/heraldrt/herald/server/config"
)

// healthcheckTimeout bounds the whole probe, above the server's own
// readiness timeout so a slow check is reported by the server.
const healthcheckTimeout = 5 * time.Second

// healthcheck asks the server of these settings (the same flags, variables
// and file as serve) for GET /readyz and returns nil when it answers 200.
// The container image's HEALTHCHECK runs it: a FROM scratch image has no
// shell or curl.
func healthcheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := config.LoadCommand("healthcheck", args, getenv, stderr)
	if err != nil {
		return err
	}
	url, err := readyURL(cfg)
	if err != nil {
		return err
	}
	client := &http.Client{
		Timeout: healthcheckTimeout,
		Transport: &http.Transport{
			Proxy: nil, // loopback: never through HTTP_PROXY
			// The certificate names the server's public host, not the
			// loopback address probed here. The probe only reads a status
			// and sends nothing secret, so it does not verify.
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
			DisableKeepAlives: true,
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: GET %s: %d %s", url, res.StatusCode, strings.TrimSpace(string(body)))
	}
	fmt.Fprintf(stdout, "%s\n", strings.TrimSpace(string(body)))
	return nil
}

// readyURL is the /readyz URL of the server listening on cfg.Addr: an
// unspecified host (all interfaces) is asked on loopback.
func readyURL(cfg config.Config) (string, error) {
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return "", fmt.Errorf("HERALD_ADDR %q: %w", cfg.Addr, err)
	}
	if port == "0" {
		return "", fmt.Errorf("HERALD_ADDR %q has port 0: the server's port is not known", cfg.Addr)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	scheme := "http"
	if cfg.TLSCertFile != "" {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/readyz", nil
}
