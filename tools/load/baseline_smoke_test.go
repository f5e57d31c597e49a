//go:build linux

package main

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// startBaseline builds the limit baseline (tools/baseline, its own module)
// and starts it on a free loopback port; it returns the address and the pid.
func startBaseline(t *testing.T) (addr string, pid int) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "herald-baseline")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "baseline")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the baseline: %v\n%s", err, out)
	}
	srv := exec.Command(bin, "-addr", "127.0.0.1:0")
	logs, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = srv.Process.Kill()
			<-done
		}
	})
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`)
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			if m := re.FindSubmatch(sc.Bytes()); m != nil {
				found <- string(m[1])
				break
			}
		}
		_, _ = io.Copy(io.Discard, logs)
	}()
	select {
	case addr = <-found:
		return addr, srv.Process.Pid
	case <-time.After(30 * time.Second):
		t.Fatal("the baseline did not print its address")
	}
	return "", 0
}

// TestSmokeBaseline drives the limit baseline with the tool as `make bench`
// does, briefly, so that neither rots: every accepted publish delivered.
func TestSmokeBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	addr, pid := startBaseline(t)
	const subs, channels = 200, 2
	res, _ := runTool(t, "-url", "ws://"+addr, "-key", "k", "-app-id", "1", "-secret", "unused",
		"-server-pid", strconv.Itoa(pid), "-settle", "200ms", "-subs", strconv.Itoa(subs),
		"-channels", strconv.Itoa(channels), "-rate", "0", "-publishers", "2", "-duration", "1s")
	if res.Connected != subs || res.Publishes == 0 || res.PublishErrors != 0 {
		t.Errorf("connected %d of %d, publishes %d ok and %d failed: %v", res.Connected, subs, res.Publishes, res.PublishErrors, res.PublishErrorSamples)
	}
	if res.Lost != 0 || res.Received != res.Expected || res.BadFrames != 0 || res.ClosedByServerTotal != 0 {
		t.Errorf("received %d of %d, bad frames %d, closed by server %v", res.Received, res.Expected, res.BadFrames, res.ClosedByServer)
	}
}
