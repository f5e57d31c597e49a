// Command herald is one server for Pusher-compatible realtime channels and
// Beams-compatible push notifications, kept in one SQLite file.
//
//	herald [serve] [--addr ADDR] [--db FILE]   serve (the default)
//	herald apps <command> ...                  manage Channels apps
//	herald instances <command> ...             manage Push instances
//	herald backup [--db FILE] <target>         consistent copy of the database, online
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	// A FROM scratch image has no CA bundle: when the system has none,
	// crypto/x509 falls back to this copy of Mozilla's roots, so TLS to
	// APNs, FCM and Web Push endpoints works there too. A system bundle
	// (or SSL_CERT_FILE / SSL_CERT_DIR) still wins.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/heraldrt/herald/server/cli"
	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/node"
)

// shutdownGrace is how long in-flight requests get after SIGINT or SIGTERM.
const shutdownGrace = 10 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cmd := "serve"
	if len(args) > 0 && (args[0] == "serve" || args[0] == "apps" || args[0] == "instances" || args[0] == "backup" || args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		cmd, args = args[0], args[1:]
	}
	env := cli.Env{Ctx: ctx, Stdout: stdout, Stderr: stderr, Getenv: config.Getenv}
	var err error
	switch cmd {
	case "serve":
		err = serve(ctx, args, stderr)
	case "apps":
		err = cli.Apps(env, args)
	case "instances":
		err = cli.Instances(env, args)
	case "backup":
		err = cli.Backup(env, args)
	default:
		fmt.Fprintln(stdout, "usage: herald [serve] [--addr ADDR] [--db FILE] | herald apps ... | herald instances ... | herald backup <file>")
		return 0
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, cli.ErrUsage) || errors.Is(err, flag.ErrHelp):
		return 2
	default:
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 1
	}
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := config.Load(args, config.Getenv, stderr)
	if err != nil {
		return err
	}
	log, err := config.Logger(cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // stderr may not support sync

	n, err := node.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		n.Shutdown(context.Background())
		return err
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()

	select {
	case err = <-served:
	case <-ctx.Done():
		log.Info("shutting down")
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if serr := n.Shutdown(shutdownCtx); serr != nil {
		err = errors.Join(err, serr)
	}
	if err == nil {
		log.Info("stopped")
	}
	return err
}
