package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/storage"
)

// useEnv makes run see only vars as its environment until the test ends.
// Tests that call it must not run in parallel: config.Getenv is global.
func useEnv(t *testing.T, vars map[string]string) {
	t.Helper()
	orig := config.Getenv
	config.Getenv = func(name string) string { return vars[name] }
	t.Cleanup(func() { config.Getenv = orig })
}

// herald calls run with args and returns its exit code and output.
func herald(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunHelp(t *testing.T) {
	useEnv(t, nil)
	for _, tt := range []struct{ name, arg string }{{"OKHelp", "help"}, {"OKDashH", "-h"}, {"OKDashDashHelp", "--help"}} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := herald(tt.arg)
			if code != 0 {
				t.Fatalf("exit code %d, want 0", code)
			}
			if !strings.HasPrefix(stdout, "usage: herald [serve]") || stderr != "" {
				t.Fatalf("got stdout %q, stderr %q, want the usage on stdout", stdout, stderr)
			}
		})
	}
}

func TestRunManagementCommands(t *testing.T) {
	useEnv(t, nil)
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
		{name: "ErrAppsCreateBadWebhook", args: []string{"apps", "create", "--webhook", "https://x,events=nope"}, withDB: true, wantCode: 1, wantStderr: `herald: webhook "https://x,events=nope": unknown event kind "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.withDB {
				args = append(args, "--db", filepath.Join(t.TempDir(), "herald.db"))
			}
			code, stdout, stderr := herald(args...)
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
	useEnv(t, map[string]string{"HERALD_DB": path})
	if code, _, stderr := herald("apps", "create", "--id", "42", "--key", "k42", "--secret", "s42"); code != 0 {
		t.Fatalf("create: exit code %d: %s", code, stderr)
	}
	code, stdout, _ := herald("apps", "list")
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
			useEnv(t, tt.env)
			code, stdout, stderr := herald(tt.args...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantStderr) {
				t.Fatalf("got exit code %d, stderr %q, want %d and %q", code, stderr, tt.wantCode, tt.wantStderr)
			}
			if stdout != "" {
				t.Fatalf("serve wrote to stdout: %q", stdout)
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
	useEnv(t, map[string]string{"HERALD_LOG_LEVEL": "error", "HERALD_DB": path})
	code, _, stderr := herald("--addr", "127.0.0.1:99999")
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
	useEnv(t, map[string]string{"HERALD_LOG_LEVEL": "error", "HERALD_ADDR": addr})

	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, stderr := herald("serve", "--db", path)
		done <- result{code, stdout, stderr}
	}()

	// Once /healthz answers, run has installed its signal handler, so the
	// signal below stops the server rather than the test process.
	deadline := time.Now().Add(10 * time.Second)
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

	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("got exit code %d, stderr %q, want 0 and nothing", r.code, r.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after SIGTERM")
	}
	checkBootstrapped(t, path)
}
