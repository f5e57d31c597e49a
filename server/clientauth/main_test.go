package clientauth_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The Herald the examples and tests of this package call: the server binary,
// built from this checkout and run on a free loopback port with a Channels
// app, a Push instance and the admin API, started by TestMain.
//
// A process rather than an in-process node on purpose: a test that imports
// the server makes `go mod tidy` of every module importing clientauth (other
// teams', tools/load) load the whole server's dependencies, since tidy reads
// the tests of the packages a module imports.
var heraldURL string // "http://127.0.0.1:<port>"

const (
	appID      = "42"
	appKey     = "my-key"
	appSecret  = "my-secret"
	instanceID = "5d2c1b0a-9e8f-4a7b-8c6d-5e4f3a2b1c0d"
	secretKey  = "PUBLISH-SECRET-0123456789ABCDEF"
	adminToken = "admin-token-0123456789"
)

// How long the server may take to start, and to stop after SIGTERM before it
// is killed: bounds for a broken build, not expectations.
const (
	startLimit = time.Minute
	stopLimit  = 15 * time.Second
)

func TestMain(m *testing.M) {
	// Examples cannot take a *testing.T, so the server is started here,
	// once, for the whole package.
	code, err := runWithHerald(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientauth tests:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// moduleRoot is the checkout's root, two folders up from this package.
func moduleRoot() (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	if mod, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.HasPrefix(mod, []byte("module github.com/heraldrt/herald\n")) {
		return "", fmt.Errorf("%s is not Herald's module root (%v)", root, err)
	}
	return root, nil
}

func runWithHerald(m *testing.M) (code int, err error) {
	root, err := moduleRoot()
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "clientauth-test-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)

	bin := filepath.Join(dir, "herald")
	build := exec.Command("go", "build", "-o", bin, "./server")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("building the server: %v\n%s", err, out)
	}
	srv := exec.Command(bin, "serve")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HERALD_") { // the developer's own settings stay out
			srv.Env = append(srv.Env, kv)
		}
	}
	srv.Env = append(srv.Env, "HERALD_ADDR=127.0.0.1:0", "HERALD_DB="+filepath.Join(dir, "herald.db"),
		"HERALD_LOG_FORMAT=json", "HERALD_LOG_LEVEL=info",
		"HERALD_APP_ID="+appID, "HERALD_APP_KEY="+appKey, "HERALD_APP_SECRET="+appSecret,
		"HERALD_INSTANCE_ID="+instanceID, "HERALD_INSTANCE_SECRET_KEY="+secretKey,
		"HERALD_ADMIN_TOKEN="+adminToken)
	logs, err := srv.StderrPipe()
	if err != nil {
		return 0, err
	}
	if err := srv.Start(); err != nil {
		return 0, fmt.Errorf("starting the server: %w", err)
	}
	defer func() {
		if stopErr := stop(srv); stopErr != nil && err == nil {
			err = stopErr
		}
	}()

	addr, err := listeningAddr(logs, startLimit)
	if err != nil {
		return 0, err
	}
	heraldURL = "http://" + addr
	return m.Run(), nil
}

// listeningAddr reads the server's JSON log until its "listening" line and
// returns the address in it; the rest of the log is drained in the
// background so the server never blocks on a full pipe.
func listeningAddr(logs io.Reader, limit time.Duration) (string, error) {
	found := make(chan string, 1)
	var seen bytes.Buffer // the log up to the address, for the error
	go func() {
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" && line.Addr != "" {
				found <- line.Addr
				break
			}
			seen.Write(sc.Bytes())
			seen.WriteByte('\n')
		}
		close(found)
		_, _ = io.Copy(io.Discard, logs)
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			return "", fmt.Errorf("the server exited before listening:\n%s", seen.String())
		}
		return addr, nil
	case <-time.After(limit):
		return "", fmt.Errorf("the server did not log its address within %v", limit)
	}
}

// stop shuts the server down as an operator would (SIGTERM), and kills it
// when it does not exit in time.
func stop(srv *exec.Cmd) error {
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping the server: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("the server exited with %v after SIGTERM", err)
		}
		return err
	case <-time.After(stopLimit):
		_ = srv.Process.Kill()
		<-done
		return fmt.Errorf("the server did not stop within %v of SIGTERM", stopLimit)
	}
}
