package clientauth_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/node"
)

// The Herald the examples and tests of this package call: one in-process
// node on a free loopback port, with a Channels app, a Push instance and the
// admin API, started by TestMain.
var heraldURL string // "http://127.0.0.1:<port>"

const (
	appID       = "42"
	appKey      = "my-key"
	appSecret   = "my-secret"
	instanceID  = "5d2c1b0a-9e8f-4a7b-8c6d-5e4f3a2b1c0d"
	secretKey   = "PUBLISH-SECRET-0123456789ABCDEF"
	adminToken  = "admin-token-0123456789"
	shutdownMax = 10 * time.Second
)

// liveNode is the node of TestMain, for tests that look at its state.
var liveNode *node.Node

func TestMain(m *testing.M) {
	// Examples cannot take a *testing.T, so the node is started here, once,
	// for the whole package.
	code, err := runWithHerald(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientauth tests:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func runWithHerald(m *testing.M) (code int, err error) {
	dir, err := os.MkdirTemp("", "clientauth-test-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	n, err := node.New(context.Background(), config.Config{
		DB:                filepath.Join(dir, "herald.db"),
		AppID:             appID,
		AppKey:            appKey,
		AppSecret:         appSecret,
		InstanceID:        instanceID,
		InstanceSecretKey: secretKey,
		AdminToken:        adminToken,
	}, zap.NewNop())
	if err != nil {
		return 0, fmt.Errorf("starting Herald: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	heraldURL, liveNode = "http://"+ln.Addr().String(), n

	code = m.Run()

	ctx, cancel := context.WithTimeout(context.Background(), shutdownMax)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		return code, fmt.Errorf("shutting Herald down: %w", err)
	}
	if err := <-served; err != nil {
		return code, fmt.Errorf("serving: %w", err)
	}
	return code, nil
}
