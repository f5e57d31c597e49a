package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	pusher "github.com/pusher/pusher-http-go/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/testcert"
	"github.com/heraldrt/herald/server/internal/wait"
)

// servedSerial connects to addr trusting ca only and returns the serial
// number of the certificate the server presents.
func servedSerial(addr string, ca *testcert.CA) (int64, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// tlsNode serves a node with TLS from a certificate of ca (serial 1) and
// returns it, its host:port and the certificate files.
func tlsNode(t *testing.T, ca *testcert.CA, log *zap.Logger, o Options) (n *Node, addr, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.Issue(t, 1, certFile, keyFile)
	n, addr = serveNodeLog(t, config.Config{
		DB:          filepath.Join(dir, "herald.db"),
		AppID:       "77",
		AppKey:      "go-sdk-key",
		AppSecret:   "go-sdk-secret",
		TLSCertFile: certFile,
		TLSKeyFile:  keyFile,
	}, log, o)
	return n, addr, certFile, keyFile
}

// Built-in TLS: the HTTP APIs answer over https, pusher clients connect over
// wss, and an event triggered by the real Go server SDK over https reaches
// the wss client; plain HTTP on the same port is refused.
func TestTLSServesHTTPSAndWSS(t *testing.T) {
	ca := testcert.NewCA(t)
	_, addr, _, _ := tlsNode(t, ca, zap.NewNop(), Options{})
	// HTTP/2 for the APIs, as ServeTLS offers it; the WebSocket client
	// speaks HTTP/1.1, as browsers and pusher-js do for WebSockets.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}, ForceAttemptHTTP2: true}}
	wsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}

	for _, path := range []string{"/healthz", "/readyz"} {
		res, err := client.Get("https://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 {
			t.Fatalf("GET %s over https: %s %d %s, want 200 over HTTP/2", path, res.Proto, res.StatusCode, body)
		}
	}
	res, err := http.Get("http://" + addr + "/healthz")
	if err == nil {
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP on the TLS port: status %d, want 400", res.StatusCode)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "wss://"+addr+"/app/go-sdk-key?protocol=7", &websocket.DialOptions{HTTPClient: wsClient})
	if err != nil {
		t.Fatalf("wss: %v", err)
	}
	defer ws.CloseNow()
	read := func() map[string]any {
		t.Helper()
		_, msg, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var frame map[string]any
		if err := json.Unmarshal(msg, &frame); err != nil {
			t.Fatal(err)
		}
		return frame
	}
	if f := read(); f["event"] != "pusher:connection_established" {
		t.Fatalf("first frame %v, want pusher:connection_established", f)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:subscribe","data":{"channel":"news"}}`)); err != nil {
		t.Fatal(err)
	}
	if f := read(); f["event"] != "pusher_internal:subscription_succeeded" {
		t.Fatalf("frame %v, want the subscription to succeed", f)
	}
	sdk := pusher.Client{AppID: "77", Key: "go-sdk-key", Secret: "go-sdk-secret", Host: addr, Secure: true, HTTPClient: client}
	if err := sdk.Trigger("news", "greeting", map[string]string{"hello": "tls"}); err != nil {
		t.Fatalf("trigger over https: %v", err)
	}
	f := read()
	if f["event"] == "pusher_internal:subscription_count" { // subscription_count is on for the default app
		f = read()
	}
	if f["event"] != "greeting" || f["data"] != `{"hello":"tls"}` {
		t.Fatalf("frame %v, want the greeting", f)
	}
}

// A renewed certificate is served once its files change, without a signal.
func TestTLSReloadsWhenTheFilesChange(t *testing.T) {
	ca := testcert.NewCA(t)
	_, addr, certFile, keyFile := tlsNode(t, ca, zap.NewNop(), Options{CertPoll: 10 * time.Millisecond})
	if serial, err := servedSerial(addr, ca); err != nil || serial != 1 {
		t.Fatalf("served serial %d (%v), want 1", serial, err)
	}
	ca.Issue(t, 2, certFile, keyFile)
	wait.NoError(t, func() error {
		serial, err := servedSerial(addr, ca)
		if err == nil && serial != 2 {
			err = errors.New("still the old certificate")
		}
		return err
	})
}

// ReloadTLS (SIGHUP) loads the files on demand; a pair that does not load
// leaves the previous certificate in service, logged.
func TestTLSReloadKeepsTheOldCertificateOnFailure(t *testing.T) {
	ca := testcert.NewCA(t)
	core, logs := observer.New(zapcore.InfoLevel)
	// The files are checked only on demand here.
	n, addr, certFile, keyFile := tlsNode(t, ca, zap.New(core), Options{CertPoll: time.Hour})

	testcert.ReplaceFile(t, certFile, []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"))
	err := n.ReloadTLS()
	if err == nil || !strings.Contains(err.Error(), certFile) {
		t.Fatalf("ReloadTLS of a broken file: got %v, want an error naming %s", err, certFile)
	}
	if serial, err := servedSerial(addr, ca); err != nil || serial != 1 {
		t.Fatalf("after a failed reload: serial %d (%v), want the old 1", serial, err)
	}
	if got := logs.FilterMessage("TLS certificate not reloaded; keeping the previous one").Len(); got != 1 {
		t.Fatalf("got %d failed-reload log lines, want 1: %v", got, logs.All())
	}

	ca.Issue(t, 3, certFile, keyFile)
	if err := n.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if serial, err := servedSerial(addr, ca); err != nil || serial != 3 {
		t.Fatalf("after a reload: serial %d (%v), want 3", serial, err)
	}
}

func TestTLSStartErrors(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testcert.NewCA(t).Issue(t, 1, cert, key)
	other := filepath.Join(dir, "other")
	testcert.NewCA(t).Issue(t, 1, other+"-cert.pem", other+"-key.pem")
	tests := []struct {
		name, cert, key, wantErr string
	}{
		{"ErrMissingCert", filepath.Join(dir, "none.pem"), key, "none.pem: no such file or directory"},
		{"ErrKeyOfAnotherCert", cert, other + "-key.pem", "private key does not match public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(context.Background(), config.Config{DB: filepath.Join(t.TempDir(), "herald.db"), TLSCertFile: tt.cert, TLSKeyFile: tt.key}, zap.NewNop(), Options{})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New: got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestReloadTLSWithoutTLS(t *testing.T) {
	n, _ := startNode(t)
	if err := n.ReloadTLS(); !errors.Is(err, ErrNoTLS) {
		t.Fatalf("ReloadTLS: got %v, want ErrNoTLS", err)
	}
}
