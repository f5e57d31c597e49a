package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/heraldrt/herald/storage"
)

// Migrate runs `herald migrate [--db FILE|URL]`: it brings the database's
// schema up to this Herald's, as serve does at start, and says what it did —
// for an upgrade done as its own step (before starting new nodes on a
// shared PostgreSQL database, say). A database a newer Herald migrated is
// refused, as by serve.
func Migrate(env Env, args []string) error {
	dbPath, rest := extractDB(args, env.Getenv)
	fs := flag.NewFlagSet("herald migrate", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: herald migrate [--db <SQLite file or postgres:// URL>]")
	}
	fs.SetOutput(env.Stderr)
	if err := fs.Parse(rest); err != nil {
		return ErrUsage
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return ErrUsage
	}
	db, err := storage.Open(env.Ctx, dbPath)
	if err != nil {
		return fmt.Errorf("opening %s: %w", storage.Name(dbPath), err)
	}
	defer db.Close()
	s := db.Schema()
	if len(s.Applied) == 0 {
		fmt.Fprintf(env.Stdout, "%s is at schema version %d: nothing to apply\n", storage.Name(dbPath), s.Version)
		return nil
	}
	applied := make([]string, len(s.Applied))
	for i, v := range s.Applied {
		applied[i] = strconv.Itoa(v)
	}
	fmt.Fprintf(env.Stdout, "%s is at schema version %d: applied %s\n", storage.Name(dbPath), s.Version, strings.Join(applied, ", "))
	return nil
}
