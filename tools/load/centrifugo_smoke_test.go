//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// smokeAPIKey is the HTTP API key of the Centrifugo the smoke tests start.
const smokeAPIKey = "smoke-api-key"

// centrifugoBin is the Centrifugo binary the smoke tests run, from
// HERALD_CENTRIFUGO_BIN (`GOBIN=<folder> go install
// github.com/centrifugal/centrifugo/v6@v6.9.1`, as .ci/run does). Without
// it they skip, and fail under CI=true.
func centrifugoBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HERALD_CENTRIFUGO_BIN")
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("HERALD_CENTRIFUGO_BIN is not set; CI must build Centrifugo (.ci/run)")
		}
		t.Skip("HERALD_CENTRIFUGO_BIN is not set: skipping the runs against Centrifugo")
	}
	return bin
}

// freeLoopbackPort is a port no one listens on now on 127.0.0.1.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startProcess starts name with args, its output in a log file of dir, and
// waits until ready reports true; it retries on a fresh port (the one it
// passes to args) when the process ended first, as when another took the
// port. It returns the port and the pid; the process is killed at cleanup.
func startProcess(t *testing.T, dir, name string, args func(port int) []string, ready func(port int) bool) (int, int) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	for attempt := 0; attempt < 5; attempt++ {
		port := freeLoopbackPort(t)
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		a := args(port)
		cmd := exec.Command(a[0], a[1:]...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		logf.Close()
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			select {
			case <-exited:
			default:
				if !ready(port) {
					continue
				}
				t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); <-exited })
				return port, cmd.Process.Pid
			}
			break
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
	out, _ := os.ReadFile(logPath)
	t.Fatalf("%s did not start:\n%s", name, out)
	return 0, 0
}

// startCentrifugo starts a Centrifugo node whose subscribers connect
// anonymously, with the HTTP API's key smokeAPIKey, the given engine
// (nil: memory) and options of channels without a namespace; it returns
// its address and pid.
func startCentrifugo(t *testing.T, bin, name string, engine, channel map[string]any) (string, int) {
	t.Helper()
	dir := t.TempDir()
	opts := map[string]any{"allow_subscribe_for_client": true, "allow_subscribe_for_anonymous": true}
	for k, v := range channel {
		opts[k] = v
	}
	config := func(port int) []string {
		c := map[string]any{
			"http_server": map[string]any{"address": "127.0.0.1", "port": port},
			"usage_stats": map[string]any{"disabled": true},
			"client":      map[string]any{"allow_anonymous_connect_without_token": true},
			"http_api":    map[string]any{"key": smokeAPIKey},
			"channel":     map[string]any{"without_namespace": opts},
		}
		if engine != nil {
			c["engine"] = engine
		}
		b, _ := json.Marshal(c)
		path := filepath.Join(dir, "config.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{bin, "--config", path}
	}
	ready := func(port int) bool {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/api/info", port), strings.NewReader("{}"))
		req.Header.Set("X-API-Key", smokeAPIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	port, pid := startProcess(t, dir, name, config, ready)
	return "127.0.0.1:" + strconv.Itoa(port), pid
}

// startRedis starts a redis-server without persistence; it returns its
// URL and pid. Skipped (failed under CI=true) without redis-server.
func startRedis(t *testing.T) (string, int) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed; CI must install it")
		}
		t.Skip("redis-server is not installed: skipping the run on Centrifugo's Redis engine")
	}
	dir := t.TempDir()
	args := func(port int) []string {
		return []string{bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir}
	}
	ready := func(port int) bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte("PING\r\n"))
		line, _ := bufio.NewReader(c).ReadString('\n')
		return line == "+PONG\r\n"
	}
	port, pid := startProcess(t, dir, "redis", args, ready)
	return "redis://127.0.0.1:" + strconv.Itoa(port), pid
}

// TestSmokeCentrifugo runs the tool with -protocol centrifugo for a second
// against a real Centrifugo: one node on its memory engine, and two nodes
// on its Redis engine with history and recovery on (publications then
// carry offsets), subscribers spread over both, publishes to the first.
// Every accepted publication must reach every subscriber of its channel.
func TestSmokeCentrifugo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	bin := centrifugoBin(t)
	for _, tc := range []struct {
		name  string
		nodes func(t *testing.T) (urls, pids []string)
	}{
		{"memory engine", func(t *testing.T) ([]string, []string) {
			addr, pid := startCentrifugo(t, bin, "centrifugo", nil, nil)
			return []string{"ws://" + addr}, []string{strconv.Itoa(pid)}
		}},
		{"redis engine, two nodes, history", func(t *testing.T) (urls, pids []string) {
			redisURL, redisPID := startRedis(t)
			engine := map[string]any{"type": "redis", "redis": map[string]any{"address": []string{redisURL}}}
			history := map[string]any{"history_size": 100, "history_ttl": "300s", "force_recovery": true}
			for i := range 2 {
				addr, pid := startCentrifugo(t, bin, "centrifugo"+strconv.Itoa(i), engine, history)
				urls, pids = append(urls, "ws://"+addr), append(pids, strconv.Itoa(pid))
			}
			return urls, append(pids, strconv.Itoa(redisPID))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			urls, pids := tc.nodes(t)
			const subs, channels = 60, 3
			res, _ := runTool(t, "-protocol", "centrifugo", "-url", strings.Join(urls, ","), "-api-key", smokeAPIKey,
				"-server-pid", strings.Join(pids, ","), "-settle", "100ms", "-subs", strconv.Itoa(subs), "-channels", strconv.Itoa(channels),
				"-rate", "0", "-publishers", "2", "-duration", "1s")
			checkDelivered(t, res, subs, channels, 1)
			if res.LatencySamples != uint64(res.Received) {
				t.Errorf("%d latencies of %d deliveries", res.LatencySamples, res.Received)
			}
		})
	}
}
