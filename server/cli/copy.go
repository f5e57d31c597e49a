package cli

import (
	"flag"
	"fmt"

	"github.com/heraldrt/herald/storage"
)

// Copy runs `herald copy --from DB --to DB`: every table of one database
// into another, empty one — a SQLite file into PostgreSQL as a deployment
// grows into a cluster, or back. Each side is a SQLite file or a
// postgres:// URL; the target is migrated first if new. No server should
// run on the source meanwhile.
func Copy(env Env, args []string) error {
	fs := flag.NewFlagSet("herald copy", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: herald copy --from <SQLite file or postgres:// URL> --to <SQLite file or postgres:// URL>")
	}
	from := fs.String("from", "", "the database to copy (a SQLite file or a postgres:// URL)")
	to := fs.String("to", "", "the empty database to copy into (a SQLite file, created if missing, or a postgres:// URL)")
	if _, err := parseFlags(env, fs, args); err != nil {
		return err
	}
	if *from == "" || *to == "" {
		fs.Usage()
		return ErrUsage
	}
	src, err := storage.Open(env.Ctx, *from)
	if err != nil {
		return fmt.Errorf("opening %s: %w", storage.Name(*from), err)
	}
	defer src.Close()
	dst, err := storage.Open(env.Ctx, *to)
	if err != nil {
		return fmt.Errorf("opening %s: %w", storage.Name(*to), err)
	}
	defer dst.Close()
	counts, err := storage.Copy(env.Ctx, src, dst)
	if err != nil {
		return err
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	fmt.Fprintf(env.Stdout, "copied %d rows from %s to %s (apps %d, instances %d, devices %d, publishes %d)\n", total,
		storage.Name(*from), storage.Name(*to), counts["apps"], counts["instances"], counts["devices"], counts["publishes"])
	return nil
}
