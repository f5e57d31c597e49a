package testpg

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Pair is a PostgreSQL primary and a synchronous streaming replica of it,
// for failover tests: servers of the test's own (not Start's shared one),
// in temporary folders, stopped and removed when the test ends. A commit on
// the primary returns once the replica has it on disk
// (synchronous_standby_names, synchronous_commit=on), so whatever the
// primary acknowledged survives its death; KillPrimary and Promote make the
// failover.
type Pair struct {
	t                testing.TB
	primary, replica *server
	replicaData      string
	pgCtl            string
	cred             *syscall.Credential
}

// replicaName is the replica's application_name, which the primary's
// synchronous_standby_names waits for.
const replicaName = "herald_replica"

// StartPair starts a primary (initdb) and a replica of it (pg_basebackup)
// and waits until the replica streams synchronously. It skips t (fails it
// under CI=true) when PostgreSQL is not installed.
func StartPair(t testing.TB) *Pair {
	t.Helper()
	initdb, pgBin, err := binaries()
	if err != nil {
		skipMissing(t)
	}
	// pg_basebackup and pg_ctl are beside postgres: in its folder, not
	// that of a link to it on the PATH.
	if real, err := filepath.EvalSymlinks(pgBin); err == nil {
		pgBin = real
	}
	bin := filepath.Dir(pgBin)
	p := &Pair{t: t, pgCtl: filepath.Join(bin, "pg_ctl")}
	if p.cred, err = runAs(); err != nil {
		t.Fatal(err)
	}
	dir := func() string {
		d, err := serverDir(p.cred)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	p.primary = &server{dir: dir()}
	t.Cleanup(p.primary.stop)
	data := filepath.Join(p.primary.dir, "data")
	if err := initData(initdb, data, p.cred); err != nil {
		t.Fatal(err)
	}
	// Commits wait for the replica's flush: the pair is the failover test's
	// subject, not a fast test database.
	if err := p.primary.startOnFreePort(pgBin, data, p.cred, "synchronous_commit=on", "synchronous_standby_names="+replicaName); err != nil {
		t.Fatal(err)
	}

	p.replica = &server{dir: dir()}
	t.Cleanup(p.replica.stop)
	p.replicaData = filepath.Join(p.replica.dir, "data")
	backup := exec.Command(filepath.Join(bin, "pg_basebackup"), "-D", p.replicaData, "-h", "127.0.0.1", "-p", fmt.Sprint(p.primary.port),
		"-U", "herald", "-X", "stream", "-c", "fast", "--no-sync", "-R")
	backup.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	if out, err := backup.CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	conninfo := fmt.Sprintf("primary_conninfo=host=127.0.0.1 port=%d user=herald application_name=%s", p.primary.port, replicaName)
	if err := p.replica.startOnFreePort(pgBin, p.replicaData, p.cred, "synchronous_commit=on", conninfo); err != nil {
		t.Fatal(err)
	}
	p.waitSync()
	return p
}

// waitSync waits until the primary sees the replica streaming as its
// synchronous standby.
func (p *Pair) waitSync() {
	p.t.Helper()
	db, err := sql.Open("pgx", p.primary.url)
	if err != nil {
		p.t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(time.Minute) // against a hang, not a timing
	for {
		var state string
		err := db.QueryRow(`SELECT sync_state FROM pg_stat_replication WHERE application_name = $1`, replicaName).Scan(&state)
		if err == nil && state == "sync" {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the replica does not stream synchronously: %q %v", state, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Database creates a new database on the primary (and so on the replica)
// and returns its multi-host URL, which connects to whichever of the two
// takes writes (target_session_attrs=read-write): the primary, then the
// replica once promoted.
func (p *Pair) Database(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("herald_pair%d_%d", os.Getpid(), counter.Add(1))
	createDatabase(t, p.primary.url, name)
	q := url.Values{"sslmode": {"disable"}, "target_session_attrs": {"read-write"}}
	return fmt.Sprintf("postgres://herald@127.0.0.1:%d,127.0.0.1:%d/%s?%s", p.primary.port, p.replica.port, name, q.Encode())
}

// ReplicaURL is the URL of the database on the replica alone (its server,
// whatever its role).
func (p *Pair) ReplicaURL(database string) string {
	u, _ := url.Parse(p.replica.url)
	u.Path = "/" + database
	return u.String()
}

// KillPrimary kills the primary and every process of it (SIGKILL to its
// process group), as a machine dies: its connections break, and nothing
// listens on its port any more.
func (p *Pair) KillPrimary() {
	p.t.Helper()
	if err := syscall.Kill(-p.primary.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.primary.exited
}

// Promote makes the replica the primary (pg_ctl promote) and waits until it
// takes writes.
func (p *Pair) Promote() {
	p.t.Helper()
	cmd := exec.Command(p.pgCtl, "promote", "-w", "-t", "60", "-D", p.replicaData)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		p.t.Fatalf("pg_ctl promote: %v\n%s", err, out)
	}
}
