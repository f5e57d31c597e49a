// Command herald is one server for Pusher-compatible realtime channels and
// Beams-compatible push notifications, kept in one SQLite file (or in
// PostgreSQL).
//
//	herald [serve] [--addr ADDR] [--db FILE] [--config FILE]   serve (the default)
//	herald apps <command> ...                                   manage Channels apps
//	herald instances <command> ...                              manage Push instances
//	herald backup [--db FILE] <target>                          consistent copy of the database, online
//	herald copy --from DB --to DB                               every table into another, empty database
//	herald migrate [--db FILE]                                  bring the database's schema up to this Herald's
//	herald healthcheck [--addr ADDR] [--config FILE]            exit 0 when the server is ready
//	herald version                                              version, commit, build date, Go version
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

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/cli"
	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/node"
)

// shutdownGrace is how long in-flight requests get after SIGINT or SIGTERM.
const shutdownGrace = 10 * time.Second

const usage = `usage: herald [serve] [--addr ADDR] [--db FILE] [--config FILE]
       herald <command> [arguments]

Commands:
  serve        serve every API on one port (the default)
  apps         manage Channels apps in the database (herald apps help)
  instances    manage Push instances in the database (herald instances help)
  backup       a consistent copy of the database, online: herald backup [--db FILE] <file>
  copy         every table into another, empty database: herald copy --from <file or URL> --to <file or URL>
  migrate      bring the database's schema up to this Herald's, as serve does at start: herald migrate [--db FILE or URL]
  healthcheck  ask the server of these settings for GET /readyz: exit 0 when ready, 1 otherwise
  version      the version, commit, build date and Go version (also --version)

`

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, node.Options{}, os.Stdout, os.Stderr))
}

// run runs the command of args in the environment getenv reads (os.Getenv,
// or a test's); a node it serves takes opts (main gives the zero value,
// tests tune it).
func run(args []string, getenv func(string) string, opts node.Options, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cmd := "serve"
	if len(args) > 0 {
		switch args[0] {
		case "serve", "apps", "instances", "backup", "copy", "migrate", "healthcheck", "version", "help":
			cmd, args = args[0], args[1:]
		case "-h", "--help", "-help":
			cmd, args = "help", args[1:]
		case "--version", "-version":
			cmd, args = "version", args[1:]
		}
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(ctx, args, getenv, opts, stderr)
	case "apps", "instances", "backup", "copy", "migrate":
		err = manage(ctx, cmd, args, getenv, stdout, stderr)
	case "healthcheck":
		err = healthcheck(ctx, args, getenv, stdout, stderr)
	case "version":
		writeVersion(stdout)
	default:
		fmt.Fprint(stdout, usage)
		config.WriteEnvHelp(stdout)
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

// manage runs a management command. They read HERALD_DB from the environment,
// or from the HERALD_CONFIG file as serve does.
func manage(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	getenv, err := config.WithFile(getenv, getenv("HERALD_CONFIG"))
	if err != nil {
		return err
	}
	env := cli.Env{Ctx: ctx, Stdout: stdout, Stderr: stderr, Getenv: getenv}
	switch cmd {
	case "apps":
		return cli.Apps(env, args)
	case "instances":
		return cli.Instances(env, args)
	case "copy":
		return cli.Copy(env, args)
	case "migrate":
		return cli.Migrate(env, args)
	default:
		return cli.Backup(env, args)
	}
}

// serve runs a node of the configuration of args and getenv, with the
// options opts, until ctx ends (SIGINT or SIGTERM) or it fails.
func serve(ctx context.Context, args []string, getenv func(string) string, opts node.Options, stderr io.Writer) error {
	cfg, err := config.Load(args, getenv, stderr)
	if err != nil {
		return err
	}
	log, err := config.Logger(cfg.LogFormat, cfg.LogLevel, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // stderr may not support sync
	v := buildVersion()
	log.Info("starting", zap.String("version", v.Version), zap.String("commit", v.Commit), zap.String("go", v.Go))
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}

	n, err := node.New(ctx, cfg, log, opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		n.Shutdown(context.Background())
		return err
	}
	// SIGHUP reloads the TLS certificate (systemctl reload); without TLS
	// it is only logged, never the default action, which would end the
	// process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()

	for loop := true; loop; {
		select {
		case err = <-served:
			loop = false
		case <-ctx.Done():
			log.Info("shutting down")
			loop = false
		case <-hup:
			// A failed reload is logged by the node, which keeps the
			// previous certificate.
			if err := n.ReloadTLS(); errors.Is(err, node.ErrNoTLS) {
				log.Info("SIGHUP: nothing to reload without TLS")
			}
		}
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
