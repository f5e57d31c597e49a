//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startHerald builds the server of this repository and starts it on a free
// loopback port with a temporary database and an app; it returns the
// address and the pid. env adds settings (HERALD_APP_HISTORY_EVENTS=100).
func startHerald(t *testing.T, env ...string) (addr string, pid int) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "herald")
	build := exec.Command("go", "build", "-o", bin, "./server")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the server: %v\n%s", err, out)
	}
	srv := exec.Command(bin, "serve")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HERALD_") {
			srv.Env = append(srv.Env, kv)
		}
	}
	srv.Env = append(srv.Env, "HERALD_ADDR=127.0.0.1:0", "HERALD_DB="+filepath.Join(dir, "herald.db"),
		"HERALD_APP_ID=smoke", "HERALD_APP_KEY=smoke-key", "HERALD_APP_SECRET=smoke-secret",
		"HERALD_LOG_LEVEL=info", "HERALD_LOG_FORMAT=json")
	srv.Env = append(srv.Env, env...)
	logs, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var tail bytes.Buffer
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`)
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			if m := re.FindSubmatch(sc.Bytes()); m != nil {
				found <- string(m[1])
				break
			}
			tail.Write(sc.Bytes())
			tail.WriteByte('\n')
		}
		_, _ = io.Copy(io.Discard, logs)
	}()
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = srv.Process.Kill()
			<-done
		}
	})
	select {
	case addr = <-found:
		return addr, srv.Process.Pid
	case <-time.After(30 * time.Second):
		t.Fatalf("the server did not log its address:\n%s", tail.String())
	}
	return "", 0
}

// runTool runs the tool with args as on the command line and returns the
// decoded JSON line besides the result.
func runTool(t *testing.T, args ...string) (*result, map[string]any) {
	t.Helper()
	var log bytes.Buffer
	cfg, err := parseFlags(args, &log)
	if err != nil {
		t.Fatalf("flags: %v\n%s", err, log.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := run(ctx, cfg, &log)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	res.writeTable(&log)
	var out bytes.Buffer
	if err := res.writeJSON(&out); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(out.Bytes(), []byte("\n")); n != 1 {
		t.Fatalf("want one JSON line, got %d", n)
	}
	var fields map[string]any
	if err := json.Unmarshal(out.Bytes(), &fields); err != nil {
		t.Fatalf("JSON line: %v\n%s", err, out.String())
	}
	t.Logf("\n%s%s", log.String(), out.String())
	return res, fields
}

// TestSmoke runs the tool briefly against a real server: a few hundred
// subscribers over three channels, three seconds of publishing, after an
// idle run. It keeps the tool from rotting; the figures are not judged.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	addr, pid := startHerald(t)
	common := []string{"-url", "ws://" + addr, "-key", "smoke-key", "-server-pid", strconv.Itoa(pid), "-settle", "200ms"}

	// Idle first, on a fresh server, so the connections grow its RSS
	// instead of reusing memory the publish run's connections left behind.
	t.Run("idle", func(t *testing.T) {
		const subs = 200
		res, _ := runTool(t, append(common, "-idle", "-subs", strconv.Itoa(subs), "-hold", "500ms")...)
		if res.Connected != subs || res.ClosedByServerTotal != 0 {
			t.Errorf("connected %d of %d, closed by server %v", res.Connected, subs, res.ClosedByServer)
		}
		if res.RSSPerConnKiB <= 0 || res.RSSAfterKiB <= res.RSSBeforeKiB {
			t.Errorf("RSS per connection %.2f KiB (before %d, after %d)", res.RSSPerConnKiB, res.RSSBeforeKiB, res.RSSAfterKiB)
		}
		// The server's CPU is read in clock ticks: a short connect phase may
		// show none, but it is measured (not -1) when the server is known.
		if res.ConnectServerUsPerConn < 0 {
			t.Errorf("server CPU per connection not measured: %.1f", res.ConnectServerUsPerConn)
		}
	})

	t.Run("publish", func(t *testing.T) {
		const subs, channels = 300, 3
		res, fields := runTool(t, append(common, "-app-id", "smoke", "-secret", "smoke-secret",
			"-subs", strconv.Itoa(subs), "-channels", strconv.Itoa(channels),
			"-rate", "60", "-publishers", "2", "-duration", "3s", "-payload", "64")...)
		for _, k := range []string{"connected", "connect_rate", "connect_server_us_per_conn", "rss_per_conn_kib", "publishes_per_s", "deliveries_per_s",
			"lost", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_max_ms", "tool_cpu_pct",
			"server_cpu_pct", "closed_by_server"} {
			if _, ok := fields[k]; !ok {
				t.Errorf("JSON line has no %q", k)
			}
		}
		checkDelivered(t, res, subs, channels, 100)
		if res.LatencySamples != uint64(res.Received) || res.LatencyP50Ms <= 0 || res.LatencyMaxMs < res.LatencyP99Ms {
			t.Errorf("latency: %d samples, p50 %.3f, p99 %.3f, max %.3f", res.LatencySamples, res.LatencyP50Ms, res.LatencyP99Ms, res.LatencyMaxMs)
		}
		if res.ServerCPUPct < 0 || res.ToolCPUPct < 0 {
			t.Errorf("CPU not measured: tool %.1f, server %.1f", res.ToolCPUPct, res.ServerCPUPct)
		}
	})

	t.Run("listeners and one publisher", func(t *testing.T) {
		const listeners, subs, events = 2, 50, 7
		ready := t.TempDir()
		results := make(chan *result, listeners)
		for i := range listeners {
			f := filepath.Join(ready, strconv.Itoa(i))
			cfg, err := parseFlags(append(common, "-subs", strconv.Itoa(subs), "-channel-prefix", "bcast-",
				"-listen", strconv.Itoa(events), "-ready-file", f, "-drain", "30s", "-quiet"), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				// Not runTool: t.Fatal belongs to the test's goroutine.
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				res, err := run(ctx, cfg, io.Discard)
				if err != nil {
					t.Errorf("listener: %v", err)
				}
				results <- res
			}()
		}
		deadline := time.Now().Add(60 * time.Second)
		for i := range listeners {
			for {
				if _, err := os.Stat(filepath.Join(ready, strconv.Itoa(i))); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("listener %d is not ready", i)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		pub, _ := runTool(t, append(common, "-app-id", "smoke", "-secret", "smoke-secret", "-subs", "0", "-channel-prefix", "bcast-",
			"-events", strconv.Itoa(events), "-rate", "100", "-duration", "10s")...)
		if pub.Publishes != events || pub.PublishErrors != 0 {
			t.Errorf("published %d of %d, %d errors", pub.Publishes, events, pub.PublishErrors)
		}
		for range listeners {
			res := <-results
			if res == nil {
				continue // reported by the listener
			}
			if res.Mode != "listen" || res.Expected != subs*events || res.Received != res.Expected || res.Lost != 0 || res.Duplicates != 0 {
				t.Errorf("listener (%s): received %d of %d, lost %d, duplicates %d", res.Mode, res.Received, res.Expected, res.Lost, res.Duplicates)
			}
		}
	})

	t.Run("finds the server by its port", func(t *testing.T) {
		_, port, _ := strings.Cut(addr, ":")
		p, _ := strconv.Atoi(port)
		if got, err := listenerPID(p); err != nil || got != pid {
			t.Errorf("listenerPID(%d) = %d, %v; want %d", p, got, err, pid)
		}
	})
}

// checkDelivered fails t unless the publish run res subscribed every one of
// subs, published at least minPublishes without an error and delivered
// each accepted event once to every subscriber of its channel.
func checkDelivered(t *testing.T, res *result, subs, channels int, minPublishes int64) {
	t.Helper()
	if res.Connected != subs || res.ConnectErrors != 0 {
		t.Errorf("connected %d of %d, %d errors: %v", res.Connected, subs, res.ConnectErrors, res.ConnectErrorSamples)
	}
	if res.Publishes < minPublishes || res.PublishErrors != 0 {
		t.Errorf("publishes %d ok, %d errors: %v", res.Publishes, res.PublishErrors, res.PublishErrorSamples)
	}
	if want := res.Publishes * int64(subs) / int64(channels); res.Expected != want {
		t.Errorf("expected %d deliveries, want %d", res.Expected, want)
	}
	if res.Lost != 0 || res.Received != res.Expected || res.Duplicates != 0 || res.Unexpected != 0 || res.BadFrames != 0 {
		t.Errorf("received %d of %d: lost %d, duplicates %d, unexpected %d, bad frames %d",
			res.Received, res.Expected, res.Lost, res.Duplicates, res.Unexpected, res.BadFrames)
	}
	if res.ClosedByServerTotal != 0 || len(res.PusherErrors) != 0 {
		t.Errorf("closed by server %v, errors %v", res.ClosedByServer, res.PusherErrors)
	}
}
