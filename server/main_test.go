package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/testcert"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/node"
	"github.com/heraldrt/herald/storage"
)

// herald calls run with args in the environment env (none of the test
// process's) and returns its exit code and output.
func herald(env map[string]string, args ...string) (code int, stdout, stderr string) {
	return heraldWith(node.Options{}, env, args...)
}

// heraldWith is herald with the options opts for a node it serves.
func heraldWith(opts node.Options, env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, func(name string) string { return env[name] }, opts, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunHelp(t *testing.T) {
	for _, tt := range []struct{ name, arg string }{{"OKHelp", "help"}, {"OKDashH", "-h"}, {"OKDashDashHelp", "--help"}} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := herald(nil, tt.arg)
			if code != 0 {
				t.Fatalf("exit code %d, want 0", code)
			}
			if !strings.HasPrefix(stdout, "usage: herald [serve]") || stderr != "" {
				t.Fatalf("got stdout %q, stderr %q, want the usage on stdout", stdout, stderr)
			}
			for _, want := range []string{"healthcheck", "version", "backup", "copy", "migrate"} {
				if !strings.Contains(stdout, "\n  "+want+" ") {
					t.Fatalf("the usage does not list the %s command:\n%s", want, stdout)
				}
			}
		})
	}
}

// `herald --help` and `herald serve --help` list every setting with its
// default (config.Vars, which Load takes its defaults from).
func TestRunHelpListsEverySetting(t *testing.T) {
	_, topHelp, _ := herald(nil, "--help")
	_, _, serveHelp := herald(nil, "serve", "--help")
	for name, help := range map[string]string{"herald --help": topHelp, "herald serve --help": serveHelp} {
		for _, v := range config.Vars {
			line := regexp.MustCompile(`(?m)^  ` + v.Name + ` +(\S+) `).FindStringSubmatch(help)
			if line == nil || line[1] != cmp.Or(v.Default, "-") {
				t.Errorf("%s: %s is not listed with its default %q:\n%s", name, v.Name, v.Default, help)
			}
		}
	}
}

func TestRunVersion(t *testing.T) {
	orig := [3]string{version, commit, date}
	t.Cleanup(func() { version, commit, date = orig[0], orig[1], orig[2] })
	goLine := "go:     " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	tests := []struct {
		name                  string
		args                  []string
		version, commit, date string // the -X values
		want                  string
	}{
		{
			name: "OKStamped", args: []string{"--version"}, version: "v1.4.0", commit: "0123abcd", date: "2026-01-02T03:04:05Z",
			want: "herald v1.4.0\ncommit: 0123abcd\nbuilt:  2026-01-02T03:04:05Z\n" + goLine,
		},
		{name: "OKUnstamped", args: []string{"version"}, want: "herald devel\ncommit: unknown\nbuilt:  unknown\n" + goLine},
		{name: "OKSingleDash", args: []string{"-version"}, version: "v2.0.0", want: "herald v2.0.0\ncommit: unknown\nbuilt:  unknown\n" + goLine},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			version, commit, date = tt.version, tt.commit, tt.date
			code, stdout, stderr := herald(nil, tt.args...)
			if code != 0 || stdout != tt.want || stderr != "" {
				t.Fatalf("got %d, stdout %q, stderr %q, want 0 and %q", code, stdout, stderr, tt.want)
			}
		})
	}
}

// The management commands find the database through the HERALD_CONFIG file
// too.
func TestRunManagementReadsTheConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "from-file.db")
	file := filepath.Join(dir, "herald.toml")
	if err := os.WriteFile(file, []byte("HERALD_DB = \""+path+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HERALD_CONFIG": file}
	if code, _, stderr := herald(env, "apps", "create", "--id", "9", "--key", "k9", "--secret", "s9"); code != 0 {
		t.Fatalf("create: exit code %d: %s", code, stderr)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the file's HERALD_DB %s was not used: %v", path, err)
	}

	env = map[string]string{"HERALD_CONFIG": filepath.Join(dir, "none.toml")}
	if code, _, stderr := herald(env, "apps", "list"); code != 1 || !strings.Contains(stderr, "herald: configuration file: stat") {
		t.Fatalf("apps list with a missing file: %d %q, want 1 and the error", code, stderr)
	}
}

func TestRunManagementCommands(t *testing.T) {
	tests := []struct {
		name       string
		args       []string // --db <temp file> is appended when withDB
		withDB     bool
		wantCode   int
		wantStdout string // a part of stdout
		wantStderr string // a part of stderr
	}{
		{name: "ErrAppsNoArguments", args: []string{"apps"}, wantCode: 2, wantStderr: "usage: herald apps <command>"},
		{name: "ErrInstancesNoArguments", args: []string{"instances"}, wantCode: 2, wantStderr: "usage: herald instances <command>"},
		{name: "ErrAppsUnknownCommand", args: []string{"apps", "frobnicate"}, wantCode: 2, wantStderr: `unknown command "frobnicate"`},
		{name: "ErrAppsBadFlag", args: []string{"apps", "list", "--colour"}, withDB: true, wantCode: 2, wantStderr: "flag provided but not defined"},
		{name: "ErrAppsShowHelp", args: []string{"apps", "show", "--help"}, withDB: true, wantCode: 2, wantStderr: "-json"},
		{name: "OKAppsHelp", args: []string{"apps", "help"}, wantCode: 0, wantStderr: "rotate-secret"},
		{name: "OKAppsList", args: []string{"apps", "list"}, withDB: true, wantCode: 0, wantStdout: "ID  KEY  SECRET  ENABLED  WEBHOOKS"},
		{name: "OKInstancesList", args: []string{"instances", "list"}, withDB: true, wantCode: 0, wantStdout: "ID  SECRET KEY  ENABLED  APNS  FCM  WEB"},
		{name: "ErrAppsShowNoApp", args: []string{"apps", "show", "999"}, withDB: true, wantCode: 1, wantStderr: `herald: no app with id "999"`},
		{name: "OKMigrate", args: []string{"migrate"}, withDB: true, wantCode: 0, wantStdout: "herald.db is at schema version"},
		{name: "ErrMigrateArgument", args: []string{"migrate", "now"}, withDB: true, wantCode: 2, wantStderr: "usage: herald migrate"},
		{name: "ErrAppsCreateBadWebhook", args: []string{"apps", "create", "--webhook", "https://x,events=nope"}, withDB: true, wantCode: 1, wantStderr: `herald: webhook "https://x,events=nope": unknown event kind "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.withDB {
				args = append(args, "--db", filepath.Join(t.TempDir(), "herald.db"))
			}
			code, stdout, stderr := herald(nil, args...)
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.wantStdout) || !strings.Contains(stderr, tt.wantStderr) {
				t.Fatalf("got stdout %q, stderr %q, want them to contain %q and %q", stdout, stderr, tt.wantStdout, tt.wantStderr)
			}
		})
	}
}

func TestRunAppsCreateThenList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.db")
	env := map[string]string{"HERALD_DB": path}
	if code, _, stderr := herald(env, "apps", "create", "--id", "42", "--key", "k42", "--secret", "s42"); code != 0 {
		t.Fatalf("create: exit code %d: %s", code, stderr)
	}
	code, stdout, _ := herald(env, "apps", "list")
	if code != 0 {
		t.Fatalf("list: exit code %d", code)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[1]), " ") != "42 k42 s42 true 0" {
		t.Fatalf("list: got\n%s\nwant the header and app 42", stdout)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("HERALD_DB %s was not used: %v", path, err)
	}
}

func TestRunServeErrors(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		wantCode   int
		wantStderr string
	}{
		{name: "ErrHelp", args: []string{"serve", "--help"}, wantCode: 2, wantStderr: "HERALD_ADDR"},
		{name: "ErrArgument", args: []string{"serve", "extra"}, wantCode: 1, wantStderr: `herald: serve takes no arguments, got ["extra"]`},
		{name: "ErrUnknownWord", args: []string{"frobnicate"}, wantCode: 1, wantStderr: `herald: serve takes no arguments, got ["frobnicate"]`},
		{name: "ErrLogFormat", env: map[string]string{"HERALD_LOG_FORMAT": "xml"}, wantCode: 1, wantStderr: "herald: HERALD_LOG_FORMAT must be json or console"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := herald(tt.env, tt.args...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantStderr) {
				t.Fatalf("got exit code %d, stderr %q, want %d and %q", code, stderr, tt.wantCode, tt.wantStderr)
			}
			if stdout != "" {
				t.Fatalf("serve wrote to stdout: %q", stdout)
			}
		})
	}
}

// A setting refused at start is named in the error without the password or
// query it holds.
func TestRunServeErrorsShowNoSecret(t *testing.T) {
	db := filepath.Join(t.TempDir(), "herald.db")
	for _, tt := range []struct {
		name    string
		env     map[string]string
		setting string
	}{
		{"RedisURLUnparsable", map[string]string{"HERALD_DB": db, "HERALD_REDIS_URL": "redis://:hunter2%zz@127.0.0.1:1"}, "HERALD_REDIS_URL"},
		{"WebhookURLNotHTTP", map[string]string{"HERALD_DB": db, "HERALD_APP_ID": "1", "HERALD_APP_WEBHOOK_URL": "ftp://u:hunter2@example.test/h?token=hunter2"}, "HERALD_APP_WEBHOOK_URL"},
		{"PostgresURLUnparsable", map[string]string{"HERALD_DB": "postgres://u:hunter2%zz@127.0.0.1:1/herald"}, "opening database"},
		{"PostgresURLBadOption", map[string]string{"HERALD_DB": "postgres://u:hunter2@127.0.0.1:1/herald?sslmode=bogus&password=hunter2"}, "opening database"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.env["HERALD_ADDR"] = "127.0.0.1:0"
			code, _, stderr := herald(tt.env, "serve")
			if code != 1 || !strings.Contains(stderr, tt.setting) {
				t.Fatalf("exit code %d, stderr %q: want 1 and an error naming %s", code, stderr, tt.setting)
			}
			if strings.Contains(stderr, "hunter2") {
				t.Fatalf("the error shows the secret: %q", stderr)
			}
		})
	}
}

// checkBootstrapped checks that the database at path has one app and one
// instance.
func checkBootstrapped(t *testing.T, path string) {
	t.Helper()
	db, err := storage.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	apps, err := db.CountApps(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	instances, err := db.CountInstances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if apps != 1 || instances != 1 {
		t.Fatalf("got %d apps and %d instances, want one of each", apps, instances)
	}
}

func TestRunServeCannotListen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.db")
	env := map[string]string{"HERALD_LOG_LEVEL": "error", "HERALD_DB": path}
	code, _, stderr := herald(env, "--addr", "127.0.0.1:99999")
	if code != 1 || !strings.Contains(stderr, "herald: listen tcp") {
		t.Fatalf("got exit code %d, stderr %q, want 1 and the listen error", code, stderr)
	}
	// The database was prepared before listening, and closed after.
	checkBootstrapped(t, path)
}

func TestRunServeUntilSIGTERM(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	path := filepath.Join(t.TempDir(), "herald.db")
	env := map[string]string{"HERALD_LOG_LEVEL": "error", "HERALD_ADDR": addr}

	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, stderr := herald(env, "serve", "--db", path)
		done <- result{code, stdout, stderr}
	}()

	// Once /healthz answers, run has installed its signal handler, so the
	// signal below stops the server rather than the test process.
	deadline := time.Now().Add(wait.Limit) // a bound for a hang, generous for a busy machine
	for {
		res, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("healthz: status %d", res.StatusCode)
			}
			break
		}
		select {
		case r := <-done:
			t.Fatalf("run returned %d before serving: %s", r.code, r.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not answer on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// SIGHUP without TLS is logged, not the default action (which would
	// end this test's process).
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("got exit code %d, stderr %q, want 0 and nothing", r.code, r.stderr)
		}
	case <-time.After(wait.Limit):
		t.Fatal("run did not return after SIGTERM")
	}
	checkBootstrapped(t, path)
}

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// serveInBackground runs `herald serve` in the environment env, its node
// with the options opts, until the test stops it with stop, which sends
// SIGTERM and checks a clean exit. It returns once check passes (the server
// answers).
func serveInBackground(t *testing.T, env map[string]string, opts node.Options, check func() error) (stop func()) {
	t.Helper()
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := heraldWith(opts, env, "serve")
		done <- result{code, stderr}
	}()
	wait.NoError(t, func() error {
		select {
		case r := <-done:
			t.Fatalf("run returned %d before serving: %s", r.code, r.stderr)
		default:
		}
		return check()
	})
	return func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.code != 0 || r.stderr != "" {
			t.Fatalf("serve: exit code %d, stderr %q, want 0 and nothing", r.code, r.stderr)
		}
	}
}

func TestRunHealthcheck(t *testing.T) {
	addr := freeAddr(t)
	env := map[string]string{"HERALD_LOG_LEVEL": "error", "HERALD_ADDR": addr, "HERALD_DB": filepath.Join(t.TempDir(), "herald.db")}
	stop := serveInBackground(t, env, node.Options{}, func() error {
		if code, _, stderr := herald(env, "healthcheck"); code != 0 {
			return errors.New(stderr)
		}
		return nil
	})
	code, stdout, stderr := herald(env, "healthcheck")
	if code != 0 || !strings.Contains(stdout, `"database":"ok"`) || stderr != "" {
		t.Fatalf("healthcheck of a ready server: %d, stdout %q, stderr %q, want 0 and the checks", code, stdout, stderr)
	}
	stop()

	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"ErrNothingListens", nil, "herald: healthcheck: Get \"http://" + addr + "/readyz\""},
		{"ErrPortZero", []string{"--addr", "127.0.0.1:0"}, "herald: HERALD_ADDR \"127.0.0.1:0\" has port 0"},
		{"ErrAddrWithoutPort", []string{"--addr", "localhost"}, "herald: HERALD_ADDR \"localhost\": address localhost: missing port in address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := herald(env, append([]string{"healthcheck"}, tt.args...)...)
			if code != 1 || !strings.Contains(stderr, tt.wantStderr) {
				t.Fatalf("got %d, stderr %q, want 1 and %q", code, stderr, tt.wantStderr)
			}
		})
	}
}

func TestReadyURL(t *testing.T) {
	tests := []struct {
		addr, cert, want string
	}{
		{"0.0.0.0:8080", "", "http://127.0.0.1:8080/readyz"},
		{":8080", "", "http://127.0.0.1:8080/readyz"},
		{"[::]:8080", "cert.pem", "https://[::1]:8080/readyz"},
		{"10.1.2.3:443", "cert.pem", "https://10.1.2.3:443/readyz"},
	}
	for _, tt := range tests {
		got, err := readyURL(config.Config{Addr: tt.addr, TLSCertFile: tt.cert})
		if err != nil || got != tt.want {
			t.Errorf("readyURL(%s, tls %v): got %q (%v), want %q", tt.addr, tt.cert != "", got, err, tt.want)
		}
	}
}

// SIGHUP reloads the TLS certificate (the file watch is made slow here, so
// only the signal can be what reloads it); healthcheck probes over https.
func TestRunServeTLSReloadsOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca := testcert.NewCA(t)
	ca.Issue(t, 1, certFile, keyFile)
	addr := freeAddr(t)
	env := map[string]string{
		"HERALD_LOG_LEVEL": "error", "HERALD_ADDR": addr, "HERALD_DB": filepath.Join(dir, "herald.db"),
		"HERALD_TLS_CERT_FILE": certFile, "HERALD_TLS_KEY_FILE": keyFile,
	}
	serial := func() (int64, error) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool})
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
	}
	stop := serveInBackground(t, env, node.Options{CertPoll: time.Hour}, func() error { _, err := serial(); return err })
	defer stop()
	if code, _, stderr := herald(env, "healthcheck"); code != 0 {
		t.Fatalf("healthcheck over https: %d %s", code, stderr)
	}

	ca.Issue(t, 2, certFile, keyFile)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait.NoError(t, func() error {
		s, err := serial()
		if err == nil && s != 2 {
			err = fmt.Errorf("serving serial %d, want 2", s)
		}
		return err
	})
}
