package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// bucketClockSkew is how far a bucket's time may be ahead of a caller's
// clock before TakePublishToken takes it for the mark of a clock that
// jumped ahead, rather than of a node whose clock is a little behind
// another's.
const bucketClockSkew = 10 * time.Second

// TakePublishToken takes a token from the Publish API rate limit bucket of
// the instance at now and reports whether there was one. The bucket gains
// rate tokens a second and holds at most burst (at least 1); an instance
// without one yet has a full bucket. The bucket is a row of
// publish_rate_buckets, so every node sharing the database takes from the
// same one: the limit holds over all of them together.
//
// It is one statement, atomic by itself, outside the write transactions: on
// PostgreSQL it does not take the advisory write lock that orders them
// (see inTx), so publishes on many nodes do not queue behind one another's
// writes; the row lock INSERT … ON CONFLICT DO UPDATE takes on the
// instance's row orders only the takes from that bucket, each seeing the
// tokens the one before left. A refused take changes nothing.
//
// The clock is the caller's: now is each node's own, in milliseconds. The
// bucket's time never goes back, so a node whose clock is behind the last
// taker's neither gains tokens for the same time twice nor loses any; it
// just sees the refill a little later. A bucket more than bucketClockSkew
// ahead of now was left by a clock that jumped ahead (then back): it starts
// afresh, full at now, rather than refilling only once every clock has
// caught up with the jump. (Clocks kept that far apart for good would
// undo the limit: each would start the bucket afresh after the other.)
//
// A token taken counts even if what it was taken for then fails.
func (db *DB) TakePublishToken(ctx context.Context, instanceID string, now time.Time, rate, burst float64) (bool, error) {
	if !(rate > 0) || math.IsInf(rate, 1) || !(burst >= 1) || math.IsInf(burst, 1) {
		return false, fmt.Errorf("take publish token: a rate of %g a second and a burst of %g make no bucket", rate, burst)
	}
	q := takeTokenSQL[db.d.postgres]
	var one int
	err := db.writer.QueryRowContext(ctx, q, instanceID, now.UnixMilli(), rate, burst, bucketClockSkew.Milliseconds()).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows): // the WHERE refused the update: no token
		return false, nil
	case err != nil:
		return false, fmt.Errorf("take publish token of instance %q: %w", instanceID, err)
	}
	return true, nil
}

// takeTokenSQL is TakePublishToken's statement in each dialect (by
// dialect.postgres), built once rather than on every request.
var takeTokenSQL = map[bool]string{false: buildTakeTokenSQL(sqliteDialect), true: buildTakeTokenSQL(&dialect{postgres: true})}

func buildTakeTokenSQL(d *dialect) string {
	// Each argument is cast where it is used: PostgreSQL deduces the type
	// of a parameter from its first use, and would make the rate or the
	// burst an integer next to an integer column. SQLite reads the type
	// names by affinity: REAL and INTEGER.
	var (
		nowMS   = "CAST(?2 AS BIGINT)"
		perSec  = "CAST(?3 AS DOUBLE PRECISION)"
		full    = "CAST(?4 AS DOUBLE PRECISION)"
		skewMS  = "CAST(?5 AS BIGINT)"
		jumped  = nowMS + " < b.updated_ms - " + skewMS
		elapsed = d.greatest("0", nowMS+" - b.updated_ms")
		// The tokens at now: those left plus the refill since the bucket's
		// time (none for a time before it), at most a full bucket; a full
		// one after a jump.
		refilled = "CASE WHEN " + jumped + " THEN " + full + " ELSE " +
			d.least(full, "b.tokens + "+elapsed+" * "+perSec+" / 1000") + " END"
	)
	return `INSERT INTO publish_rate_buckets AS b (instance_id, tokens, updated_ms)
		VALUES (?1, ` + full + ` - 1, ` + nowMS + `)
		ON CONFLICT (instance_id) DO UPDATE SET
			tokens = ` + refilled + ` - 1,
			updated_ms = CASE WHEN ` + jumped + ` THEN ` + nowMS + ` ELSE ` + d.greatest("b.updated_ms", nowMS) + ` END
		WHERE ` + refilled + ` >= 1
		RETURNING 1`
}
