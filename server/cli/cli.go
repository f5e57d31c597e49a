// Package cli implements the `herald apps` and `herald instances` management
// commands, which edit the database file directly. A running server notices
// the change within a second.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/storage"
)

// Env is what a command runs with.
type Env struct {
	Ctx    context.Context
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// command is one subcommand: its usage line and what it does with the
// arguments after its name.
type command struct {
	usage string
	run   func(env Env, db *storage.DB, args []string) error
}

// ErrUsage means the arguments were wrong; the usage has been printed.
var ErrUsage = errors.New("usage")

// run dispatches args (the words after "apps" or "instances") to a command,
// opening the database named by --db or HERALD_DB first.
func run(env Env, group string, commands map[string]command, order []string, args []string) error {
	usage := func() {
		fmt.Fprintf(env.Stderr, "usage: herald %s <command> [--db FILE] ...\n\ncommands:\n", group)
		for _, name := range order {
			fmt.Fprintf(env.Stderr, "  %-14s %s\n", name, commands[name].usage)
		}
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage()
		if len(args) == 0 {
			return ErrUsage
		}
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.Stderr, "herald %s: unknown command %q\n\n", group, args[0])
		usage()
		return ErrUsage
	}
	dbPath, rest := extractDB(args[1:], env.Getenv)
	db, err := storage.Open(env.Ctx, dbPath)
	if err != nil {
		return fmt.Errorf("opening %s: %w", storage.Name(dbPath), err)
	}
	defer db.Close()
	return cmd.run(env, db, rest)
}

// extractDB takes --db FILE (or --db=FILE) out of args; the default is
// HERALD_DB, then ./herald.db.
func extractDB(args []string, getenv func(string) string) (string, []string) {
	path := getenv("HERALD_DB")
	if path == "" {
		path = config.DefaultDB
	}
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case (a == "--db" || a == "-db") && i+1 < len(args):
			path = args[i+1]
			i++
		case strings.HasPrefix(a, "--db=") || strings.HasPrefix(a, "-db="):
			path = a[strings.Index(a, "=")+1:]
		default:
			rest = append(rest, a)
		}
	}
	return path, rest
}

// parseFlags parses args with fs, then requires exactly nPos positional
// arguments, which it returns.
func parseFlags(env Env, fs *flag.FlagSet, args []string, positional ...string) ([]string, error) {
	fs.SetOutput(env.Stderr)
	// Allow the positional argument first (apps update 123 --flag ...).
	var pos []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") && len(pos) < len(positional) {
		pos, args = append(pos, args[0]), args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return nil, ErrUsage
	}
	pos = append(pos, fs.Args()...)
	if len(pos) != len(positional) {
		fmt.Fprintf(env.Stderr, "expected %d argument(s): %s\n", len(positional), strings.Join(positional, " "))
		return nil, ErrUsage
	}
	return pos, nil
}

// setFlags returns the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func notFound(kind, id string, err error) error {
	if errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("no %s with id %q", kind, id)
	}
	if errors.Is(err, storage.ErrConflict) {
		return fmt.Errorf("%s %q: id or key already taken", kind, id)
	}
	return err
}
