package cli

import (
	"flag"
	"fmt"

	"github.com/heraldrt/herald/storage"
)

// Backup runs `herald backup [--db FILE] <target>`: a consistent copy of the
// database, taken while a server may be running on it (VACUUM INTO).
func Backup(env Env, args []string) error {
	dbPath, rest := extractDB(args, env.Getenv)
	fs := flag.NewFlagSet("herald backup", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: herald backup [--db FILE] <target file>")
	}
	pos, err := parseFlags(env, fs, rest, "<target file>")
	if err != nil {
		return err
	}
	db, err := storage.Open(env.Ctx, dbPath)
	if err != nil {
		return fmt.Errorf("opening %s: %w", storage.Name(dbPath), err)
	}
	defer db.Close()
	if err := db.Backup(env.Ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "backed up %s to %s\n", storage.Name(dbPath), pos[0])
	return nil
}
