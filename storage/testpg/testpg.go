// Package testpg gives tests a real PostgreSQL database: a fresh, empty
// database per test on one server per test process, which Main starts in a
// temporary folder on 127.0.0.1 and a free port (initdb, then postgres, as
// the postgres user when the tests run as root) and stops by its PID when
// the tests end. HERALD_TEST_POSTGRES_URL names a server to use instead.
//
// Where the PostgreSQL binaries are not installed the test is skipped with
// one line saying so, except under CI=true, where that fails it: CI must
// never pass by skipping.
package testpg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// server is the process's PostgreSQL server, started on first use.
var (
	once    sync.Once
	srv     *server
	srvErr  error
	missing bool // the binaries are not installed
	counter atomic.Int64
)

type server struct {
	port   int
	url    string // of the server's postgres database, as the superuser
	dir    string // the data folder we made, "" for HERALD_TEST_POSTGRES_URL
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has ended
}

// Main runs the tests of a package that uses Start, then stops the server:
// call it from the package's TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if srv != nil {
		srv.stop()
	}
	os.Exit(code)
}

// Start returns the URL of a new, empty database for t, dropped when t
// ends, or skips t (fails it under CI=true) when PostgreSQL is not
// installed.
func Start(t testing.TB) string {
	t.Helper()
	once.Do(func() { srv, srvErr = startServer() })
	if missing {
		skipMissing(t)
	}
	if srvErr != nil {
		t.Fatalf("starting PostgreSQL: %v", srvErr)
	}
	name := fmt.Sprintf("herald_t%d_%d", os.Getpid(), counter.Add(1))
	createDatabase(t, srv.url, name)
	t.Cleanup(func() {
		admin, err := sql.Open("pgx", srv.url)
		if err != nil {
			return
		}
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, _ := url.Parse(srv.url)
	u.Path = "/" + name
	return u.String()
}

// createDatabase creates the database name on the server at serverURL.
func createDatabase(t testing.TB, serverURL, name string) {
	t.Helper()
	admin, err := sql.Open("pgx", serverURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" TEMPLATE template0 ENCODING 'UTF8'"); err != nil {
		t.Fatalf("creating the test database: %v", err)
	}
}

// skipMissing skips t because the PostgreSQL binaries are not installed,
// or fails it under CI=true.
func skipMissing(t testing.TB) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal("PostgreSQL is not installed; CI must install it (Debian package postgresql)")
	}
	t.Skip("PostgreSQL is not installed (Debian package postgresql): skipping the PostgreSQL test")
}

// PID is the process id of the server Start's databases are on (0 when it
// is one named by HERALD_TEST_POSTGRES_URL, or none started yet): its
// sessions run in child processes, which benchmarks count in its CPU time.
func PID() int {
	if srv == nil || srv.cmd == nil {
		return 0
	}
	return srv.cmd.Process.Pid
}

func startServer() (*server, error) {
	if u := os.Getenv("HERALD_TEST_POSTGRES_URL"); u != "" {
		return &server{url: u}, nil
	}
	initdb, pgBin, err := binaries()
	if err != nil {
		missing = true
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := serverDir(cred)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := initData(initdb, data, cred); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{dir: dir}
	if err := s.startOnFreePort(pgBin, data, cred); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// runAs is the user the PostgreSQL programs run as: nil for the test's own,
// except when the tests run as root, which initdb and postgres refuse: the
// postgres user (or nobody) then.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	return unprivileged()
}

// serverDir makes a new temporary folder for a server, owned by cred's user.
func serverDir(cred *syscall.Credential) (string, error) {
	dir, err := os.MkdirTemp("", "herald-pg-")
	if err != nil {
		return "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// initData makes a new data folder (initdb) owned by cred's user.
func initData(initdb, data string, cred *syscall.Credential) error {
	// A linguistic collation (ICU's English, where 'a' sorts before 'Z'),
	// as operators' databases often have: the schema must not depend on
	// the database's locale. Plain initdb where ICU is missing.
	var out []byte
	var err error
	for _, locale := range [][]string{{"--locale-provider=icu", "--icu-locale=en-US"}, nil} {
		os.RemoveAll(data)
		cmd := exec.Command(initdb, append([]string{"-D", data, "-U", "herald", "--auth=trust", "--encoding=UTF8", "--no-sync", "--no-instructions"}, locale...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err = cmd.CombinedOutput(); err == nil {
			return nil
		}
	}
	return fmt.Errorf("initdb: %v\n%s", err, out)
}

// startOnFreePort starts the server of data on a free port, trying again
// on another when the port was taken meanwhile; settings are added to
// start's.
func (s *server) startOnFreePort(pgBin, data string, cred *syscall.Credential, settings ...string) error {
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		if err = s.start(pgBin, data, port, cred, settings...); err == nil {
			return nil
		}
		if attempt == 4 {
			return err
		}
	}
}

// start runs postgres on port, tuned for tests (no fsync: a test database
// need not survive a crash), with settings ("name=value") after those, and
// waits until it answers.
func (s *server) start(pgBin, data string, port int, cred *syscall.Credential, settings ...string) error {
	logFile := filepath.Join(s.dir, "postgres.log")
	log, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer log.Close()
	if cred != nil {
		os.Chown(logFile, int(cred.Uid), int(cred.Gid))
	}
	args := []string{"-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", s.dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200"}
	for _, setting := range settings {
		args = append(args, "-c", setting) // the last of a name wins
	}
	cmd := exec.Command(pgBin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so a signal to the test's group leaves it be
	// until stop; killed with the test process if that dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	kill := func() {
		cmd.Process.Kill()
		<-exited
	}
	s.port = port
	s.url = fmt.Sprintf("postgres://herald@127.0.0.1:%d/postgres?sslmode=disable", port)
	db, err := sql.Open("pgx", s.url)
	if err != nil {
		kill()
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			s.cmd, s.exited = cmd, exited
			return nil
		}
		select {
		case <-exited:
		case <-time.After(50 * time.Millisecond):
			if time.Now().Before(deadline) {
				continue
			}
			kill()
		}
		out, _ := os.ReadFile(logFile)
		return fmt.Errorf("postgres did not answer on port %d: %v\n%s", port, err, out)
	}
}

// stop ends the server (a fast shutdown: SIGINT) and removes its folder.
func (s *server) stop() {
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
		}
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// binaries finds initdb and postgres: on the PATH, or where Debian puts
// them (/usr/lib/postgresql/<version>/bin, the newest first).
func binaries() (initdb, postgres string, err error) {
	if i, err := exec.LookPath("initdb"); err == nil {
		if p, err := exec.LookPath("postgres"); err == nil {
			return i, p, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		i, p := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
		if isFile(i) && isFile(p) {
			return i, p, nil
		}
	}
	return "", "", errors.New("initdb and postgres not found")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// unprivileged is the user PostgreSQL runs as when the tests run as root.
func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root, and there is no postgres or nobody user to run PostgreSQL as")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
