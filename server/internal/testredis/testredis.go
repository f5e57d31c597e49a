// Package testredis starts a real redis-server for tests: on 127.0.0.1, on a
// free port, in a temporary folder, without persistence, stopped (by its
// PID) when the test ends.
//
// StartTLS starts one that speaks TLS only (rediss://), with certificate
// files the caller makes (server/internal/testcert): this package imports
// nothing of Herald's.
//
// Where redis-server is not installed the test is skipped with one line
// saying so, except under CI=true, where that fails it: CI must never pass
// by skipping.
package testredis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	t     testing.TB
	bin   string
	dir   string
	port  int
	cmd   *exec.Cmd
	files *TLS        // nil: plain TCP
	ping  *tls.Config // how start's client checks the server: trusts files.CAFile only
	extra []string    // more arguments of redis-server (StartWith)
	// sentinel is the configuration of a Sentinel (StartSentinel): it
	// starts in sentinel mode, from a file it may rewrite.
	sentinel string
	// busPort is the cluster bus port of a server in cluster mode
	// (StartClusterNode); 0 for one that is not.
	busPort int
}

// TLS names the PEM files of a server that speaks TLS: its certificate
// (for 127.0.0.1), its private key, and the CA that signed the certificate,
// which clients must trust. (testcert.ServerFiles makes them; its Files
// converts to TLS.)
type TLS struct {
	CertFile, KeyFile, CAFile string
}

// Start starts a redis-server for t, or skips t (fails it under CI=true)
// when the binary is missing.
func Start(t testing.TB) *Server {
	t.Helper()
	return startServer(t, nil)
}

// StartTLS is Start for a redis-server that accepts TLS connections only,
// with the certificate and key of files, and does not ask clients for
// certificates. URL is then a rediss:// URL, whose clients must trust
// files.CAFile (see CAFile).
func StartTLS(t testing.TB, files TLS) *Server {
	t.Helper()
	return startServer(t, &files)
}

// StartWith is Start with more arguments of redis-server: a replica of
// another server, say ("--replicaof", "127.0.0.1", port).
func StartWith(t testing.TB, args ...string) *Server {
	t.Helper()
	return startServer(t, nil, func(s *Server) { s.extra = args })
}

// StartSentinel starts a Sentinel (redis-server --sentinel) that monitors
// the primary at addr as master, with a quorum of one, taking it for down
// after a second without an answer and promoting a replica at once.
func StartSentinel(t testing.TB, master, addr string) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, nil, func(s *Server) {
		s.sentinel = fmt.Sprintf("sentinel monitor %s %s %s 1\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 5000\n"+
			"sentinel parallel-syncs %[1]s 1\n", master, host, port)
	})
}

func startServer(t testing.TB, files *TLS, tune ...func(*Server)) *Server {
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
	s := &Server{t: t, bin: bin, dir: t.TempDir(), files: files}
	for _, f := range tune {
		f(s)
	}
	if files != nil {
		pem, err := os.ReadFile(files.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			t.Fatalf("%s holds no PEM certificate", files.CAFile)
		}
		s.ping = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	for attempt := 0; ; attempt++ {
		s.port = freePort(t)
		if s.busPort != 0 {
			s.busPort = freePort(t)
		}
		if err := s.start(); err == nil {
			break
		} else if attempt == 4 {
			t.Fatalf("starting redis-server: %v", err)
		}
	}
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's redis:// URL, rediss:// when it speaks TLS.
func (s *Server) URL() string {
	scheme := "redis"
	if s.files != nil {
		scheme = "rediss"
	}
	return fmt.Sprintf("%s://127.0.0.1:%d/0", scheme, s.port)
}

// CAFile is the PEM file of the CA that signed the certificate of a server
// started by StartTLS, the one its clients must trust; empty for a plain
// server.
func (s *Server) CAFile() string {
	if s.files == nil {
		return ""
	}
	return s.files.CAFile
}

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
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port)}
	if s.files != nil {
		args = []string{"--bind", "127.0.0.1", "--port", "0", "--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", s.files.CertFile, "--tls-key-file", s.files.KeyFile,
			"--tls-ca-cert-file", s.files.CAFile, "--tls-auth-clients", "no"}
	}
	args = append(args, "--dir", s.dir, "--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	if s.sentinel != "" {
		conf := filepath.Join(s.dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(s.sentinel), 0o600); err != nil {
			return err
		}
		args = append([]string{conf, "--sentinel"}, args...)
	} else {
		args = append(args, "--save", "", "--appendonly", "no")
		if s.busPort != 0 {
			args = append(args, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(s.busPort),
				"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"), "--cluster-node-timeout", "2000")
		}
		args = append(args, s.extra...)
	}
	cmd := exec.Command(s.bin, args...)
	// Its own process group, so a signal to the test's group leaves it be
	// until Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, TLSConfig: s.ping})
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
