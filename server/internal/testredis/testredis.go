// Package testredis starts a real redis-server for tests: on 127.0.0.1, on a
// free port, in a temporary folder, without persistence, stopped (by its
// PID) when the test ends.
//
// Where redis-server is not installed the test is skipped with one line
// saying so, except under CI=true, where that fails it: CI must never pass
// by skipping.
package testredis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a running redis-server.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
}

// Start starts a redis-server for t, or skips t (fails it under CI=true)
// when the binary is missing.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server"} {
			if _, statErr := os.Stat(p); statErr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed; CI must install it (Debian package redis-server)")
		}
		t.Skip("redis-server is not installed (Debian package redis-server): skipping the cluster test")
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	for attempt := 0; ; attempt++ {
		s.port = freePort(t)
		if err := s.start(); err == nil {
			break
		} else if attempt == 4 {
			t.Fatalf("starting redis-server: %v", err)
		}
	}
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// PID is the server's process id (0 while stopped), for benchmarks that
// count its CPU time.
func (s *Server) PID() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop kills the server (SIGKILL: nothing is saved anyway) and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()
	s.cmd = nil
}

// Restart stops the server and starts a new, empty one on the same port,
// as a Redis restarted without persistence comes back.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // the port may linger a moment
	}
	s.t.Fatalf("restarting redis-server: %v", err)
}

func (s *Server) start() error {
	cmd := exec.Command(s.bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	// Its own process group, so a signal to the test's group leaves it be
	// until Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.cmd = cmd
			return nil
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server did not answer on %s: %v\n%s", s.Addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
