package storage

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldrt/herald/storage/testdb"
	"github.com/heraldrt/herald/storage/testpg"
)

// What the database says when it cannot serve, whatever was asked, is
// ErrUnavailable; what it says of a request is not.
func TestIsUnavailable(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("write: %w", &pgconn.PgError{Code: code}) }
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"ReadOnlyTransaction", pg("25006"), true},
		{"AdminShutdown", pg("57P01"), true},
		{"CrashShutdown", pg("57P02"), true},
		{"CannotConnectNow", pg("57P03"), true},
		{"ConnectionFailure", pg("08006"), true},
		{"ConnectionDoesNotExist", pg("08003"), true},
		{"TooManyConnections", pg("53300"), true},
		{"Connect", &pgconn.ConnectError{}, true},
		{"Dial", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"Reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"EOF", fmt.Errorf("receive message failed: %w", io.ErrUnexpectedEOF), true},
		{"BadConn", driver.ErrBadConn, true},
		{"ConnDone", sql.ErrConnDone, true},
		{"DeadlineExceeded", context.DeadlineExceeded, true},

		{"Canceled", fmt.Errorf("%w", context.Canceled), false},
		{"UniqueViolation", pg("23505"), false},
		{"InvalidJSON", pg("22P02"), false},
		{"NoRows", sql.ErrNoRows, false},
		{"NotFound", ErrNotFound, false},
		{"Other", errors.New("something else"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := unavailable(tt.err)
			if got := errors.Is(err, ErrUnavailable); got != tt.want {
				t.Fatalf("errors.Is(unavailable(%v), ErrUnavailable) = %v, want %v", tt.err, got, tt.want)
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("unavailable(%v) lost the error it wraps", tt.err)
			}
		})
	}
}

// proxy forwards TCP connections to target until down, which closes them
// all and refuses new ones until up: a database server that went away and
// came back, as far as its clients can tell.
type proxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	p := &proxy{t: t, target: target}
	p.up()
	t.Cleanup(p.down)
	return p
}

func (p *proxy) up() {
	addr := p.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
}

func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Through a PostgreSQL server that goes away (its connections cut, new ones
// refused) a write, the readiness check, a one-statement read and a read
// transaction (db.read, whose BeginTx is what fails) fail with
// ErrUnavailable, and succeed again once it is back, on the same DB; a
// server that only answers read-only (a standby, or a primary demoted
// behind its address) is ErrUnavailable too, for writes and for the
// readiness check, while it still reads.
func TestUnavailablePostgreSQL(t *testing.T) {
	dsn := testpg.Start(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, u.Host)
	u.Host = p.addr
	db := testdb.Open(t, Open, u.String())
	ctx := t.Context()
	if _, err := db.CreateInstance(ctx, testInstance(instanceID)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateApp(ctx, testApp("1", "key1")); err != nil {
		t.Fatal(err)
	}
	register := func() error {
		_, _, err := db.RegisterDevice(ctx, Device{InstanceID: instanceID, Platform: PlatformFCM, Token: "t"})
		return err
	}
	checkErr(t, "Ready", db.Ready(ctx), nil)

	p.down()
	checkErr(t, "RegisterDevice with the server gone", register(), ErrUnavailable)
	checkErr(t, "Ready with the server gone", db.Ready(ctx), ErrUnavailable)
	_, err = db.GetInstance(ctx, instanceID)
	checkErr(t, "GetInstance with the server gone", err, ErrUnavailable)
	_, err = db.GetApp(ctx, "1")
	checkErr(t, "GetApp (a read transaction) with the server gone", err, ErrUnavailable)
	p.up()
	checkErr(t, "Ready once back", db.Ready(ctx), nil)
	checkErr(t, "RegisterDevice once back", register(), nil)
	_, err = db.GetApp(ctx, "1")
	checkErr(t, "GetApp once back", err, nil)

	// Read-only: every new session of the database is, and the old ones
	// are ended.
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := u.Path[1:]
	if _, err := admin.ExecContext(ctx, `ALTER DATABASE `+name+` SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name); err != nil {
		t.Fatal(err)
	}
	err = register()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "25006" {
		err = register() // the first may have met a session ended
	}
	checkErr(t, "RegisterDevice on a read-only server", err, ErrUnavailable)
	if !errors.As(err, &pe) || pe.Code != "25006" {
		t.Fatalf("RegisterDevice on a read-only server: %v, want SQLSTATE 25006", err)
	}
	checkErr(t, "Ready on a read-only server", db.Ready(ctx), ErrUnavailable)
	_, err = db.GetInstance(ctx, instanceID)
	checkErr(t, "GetInstance on a read-only server", err, nil)
}

// A PostgreSQL URL without connect_timeout gets DefaultConnectTimeout's, so
// that a dead server's dropped packets cannot hold requests for minutes;
// one that sets it keeps its own, and the rest of the URL is kept.
func TestConnectTimeout(t *testing.T) {
	for _, tt := range []struct{ dsn, want string }{
		{"postgres://u:p@a:5432,b:5433/herald?target_session_attrs=read-write",
			"postgres://u:p@a:5432,b:5433/herald?connect_timeout=5&target_session_attrs=read-write"},
		{"postgres://u@a/herald?connect_timeout=2&sslmode=verify-full", "postgres://u@a/herald?connect_timeout=2&sslmode=verify-full"},
	} {
		if got := withConnectTimeout(tt.dsn); got != tt.want {
			t.Errorf("withConnectTimeout(%s) = %s, want %s", tt.dsn, got, tt.want)
		}
	}
}
