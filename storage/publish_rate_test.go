package storage

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/heraldrt/herald/storage/testdb"
)

const otherInstanceID = "0c9a4f3e-2b1d-4e6f-8a7b-9c0d1e2f3a4b"

// bucketDB is a fresh database with the instances ids.
func bucketDB(t *testing.T, ids ...string) *DB {
	t.Helper()
	db := testdb.New(t, Open)
	for _, id := range ids {
		_, err := db.CreateInstance(t.Context(), testInstance(id))
		checkErr(t, "CreateInstance", err, nil)
	}
	return db
}

// takeN takes n tokens of instance id at now and returns how many it got.
func takeN(t *testing.T, db *DB, id string, now time.Time, n int, rate, burst float64) int {
	t.Helper()
	got := 0
	for range n {
		ok, err := db.TakePublishToken(t.Context(), id, now, rate, burst)
		checkErr(t, "TakePublishToken", err, nil)
		if ok {
			got++
		}
	}
	return got
}

func TestTakePublishToken(t *testing.T) {
	t0 := time.UnixMilli(1_800_000_000_000)

	t.Run("BurstThenRefusal", func(t *testing.T) {
		db := bucketDB(t, instanceID)
		check(t, "tokens of a new bucket taken at one instant", takeN(t, db, instanceID, t0, 150, 100, 100), 100)
		check(t, "tokens a millisecond before the next one", takeN(t, db, instanceID, t0.Add(9*time.Millisecond), 5, 100, 100), 0)
	})

	t.Run("RefillWithTime", func(t *testing.T) {
		db := bucketDB(t, instanceID)
		check(t, "burst", takeN(t, db, instanceID, t0, 100, 100, 100), 100)
		// 100 a second: one every 10 ms. Refusals take nothing and do not
		// move the bucket's time.
		check(t, "after 10 ms", takeN(t, db, instanceID, t0.Add(10*time.Millisecond), 3, 100, 100), 1)
		check(t, "after 35 ms", takeN(t, db, instanceID, t0.Add(35*time.Millisecond), 5, 100, 100), 2)
		check(t, "after 40 ms", takeN(t, db, instanceID, t0.Add(40*time.Millisecond), 5, 100, 100), 1)
		check(t, "after 250 ms", takeN(t, db, instanceID, t0.Add(250*time.Millisecond), 50, 100, 100), 21)
		// A bucket left alone fills up to its burst, no further.
		check(t, "after a minute", takeN(t, db, instanceID, t0.Add(time.Minute), 150, 100, 100), 100)
		// Other numbers: 2 a second, bursts of 3.
		_, err := db.CreateInstance(t.Context(), testInstance(otherInstanceID))
		checkErr(t, "CreateInstance", err, nil)
		check(t, "another bucket's burst", takeN(t, db, otherInstanceID, t0, 5, 2, 3), 3)
		check(t, "half a second later", takeN(t, db, otherInstanceID, t0.Add(500*time.Millisecond), 5, 2, 3), 1)
		check(t, "a second and a half later", takeN(t, db, otherInstanceID, t0.Add(1500*time.Millisecond), 5, 2, 3), 2)
	})

	t.Run("SeparateInstances", func(t *testing.T) {
		db := bucketDB(t, instanceID, otherInstanceID)
		check(t, "first instance", takeN(t, db, instanceID, t0, 120, 100, 100), 100)
		check(t, "second instance at the same instant", takeN(t, db, otherInstanceID, t0, 120, 100, 100), 100)
		check(t, "first instance again", takeN(t, db, instanceID, t0, 1, 100, 100), 0)
	})

	t.Run("ClockSkew", func(t *testing.T) {
		db := bucketDB(t, instanceID)
		check(t, "burst on node A", takeN(t, db, instanceID, t0, 100, 100, 100), 100)
		// Node B's clock is 500 ms behind: its requests find the bucket
		// empty, and leave its time where it was (set back, A would count
		// those 500 ms again: 52 tokens, not 2).
		check(t, "node B, behind", takeN(t, db, instanceID, t0.Add(-500*time.Millisecond), 5, 100, 100), 0)
		check(t, "node A, 20 ms later", takeN(t, db, instanceID, t0.Add(20*time.Millisecond), 5, 100, 100), 2)
		// Once B's clock is past the bucket's time it refills from there.
		check(t, "node B, 30 ms after the bucket's time", takeN(t, db, instanceID, t0.Add(50*time.Millisecond), 5, 100, 100), 3)

		// A clock that jumped an hour ahead leaves the bucket's time there;
		// the clocks behind start it afresh rather than wait an hour.
		check(t, "a node an hour ahead", takeN(t, db, instanceID, t0.Add(time.Hour), 100, 100, 100), 100)
		check(t, "within bucketClockSkew behind it", takeN(t, db, instanceID, t0.Add(time.Hour-bucketClockSkew), 5, 100, 100), 0)
		check(t, "an hour behind it", takeN(t, db, instanceID, t0.Add(time.Second), 150, 100, 100), 100)
	})

	t.Run("Concurrent", func(t *testing.T) {
		db := bucketDB(t, instanceID, otherInstanceID)
		// Many takers at once, as requests on several nodes would be, on a
		// bucket that does not exist yet: exactly the burst is taken, per
		// instance.
		const takers, each = 40, 10
		var got [2]atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 2*takers*each)
		for i := range 2 * takers {
			id := []string{instanceID, otherInstanceID}[i%2]
			wg.Go(func() {
				for range each {
					ok, err := db.TakePublishToken(t.Context(), id, t0, 100, 100)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						got[i%2].Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		check(t, "tokens taken from the first bucket", got[0].Load(), int64(100))
		check(t, "tokens taken from the second bucket", got[1].Load(), int64(100))
	})

	t.Run("DeletedWithItsInstance", func(t *testing.T) {
		db := bucketDB(t, instanceID, otherInstanceID)
		check(t, "burst", takeN(t, db, instanceID, t0, 100, 100, 100), 100)
		check(t, "other burst", takeN(t, db, otherInstanceID, t0, 1, 100, 100), 1)
		checkErr(t, "DeleteInstance", db.DeleteInstance(t.Context(), instanceID), nil)
		check(t, "buckets left", bucketIDs(t, db), []string{otherInstanceID})
		_, err := db.CreateInstance(t.Context(), testInstance(instanceID))
		checkErr(t, "CreateInstance again", err, nil)
		check(t, "the instance made again has a full bucket", takeN(t, db, instanceID, t0, 150, 100, 100), 100)
	})

	t.Run("OutsideTheWriteLock", func(t *testing.T) {
		if !testdb.OnPostgres() {
			t.Skip("SQLite has one writer connection: every write waits for the one before")
		}
		db := bucketDB(t, instanceID)
		// Another write holds the advisory write lock (as the publish a
		// node is storing would): a take does not wait for it.
		held, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- db.write(t.Context(), func(*tx) error {
				close(held)
				<-release
				return nil
			})
		}()
		<-held
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		ok, err := db.TakePublishToken(ctx, instanceID, t0, 100, 100)
		close(release)
		checkErr(t, "TakePublishToken while the write lock is held", err, nil)
		check(t, "token", ok, true)
		checkErr(t, "the write holding the lock", <-done, nil)
	})

	t.Run("ErrUnknownInstance", func(t *testing.T) {
		db := bucketDB(t)
		ok, err := db.TakePublishToken(t.Context(), instanceID, t0, 100, 100)
		if err == nil || ok {
			t.Fatalf("a token of an instance that does not exist: %v, %v; want an error", ok, err)
		}
	})

	t.Run("ErrNoBucket", func(t *testing.T) {
		db := bucketDB(t, instanceID)
		for _, c := range []struct{ rate, burst float64 }{{0, 100}, {-1, 100}, {100, 0.5}, {100, -1}, {inf, 100}, {100, inf}, {nan, 100}, {100, nan}} {
			if ok, err := db.TakePublishToken(t.Context(), instanceID, t0, c.rate, c.burst); err == nil || ok {
				t.Errorf("rate %g, burst %g: %v, %v; want an error", c.rate, c.burst, ok, err)
			}
		}
		check(t, "buckets", bucketIDs(t, db), []string(nil))
		// The least burst makes a bucket: one token at a time.
		check(t, "takes with a burst of 1", takeN(t, db, instanceID, t0, 3, 100, 1), 1)
	})
}

var inf, nan = math.Inf(1), math.NaN()

// bucketIDs are the instances with a row in publish_rate_buckets, in order.
func bucketIDs(t *testing.T, db *DB) []string {
	t.Helper()
	rows, err := db.reader.QueryContext(t.Context(), "SELECT instance_id FROM publish_rate_buckets ORDER BY instance_id")
	checkErr(t, "select buckets", err, nil)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		checkErr(t, "scan", rows.Scan(&id), nil)
		ids = append(ids, id)
	}
	checkErr(t, "rows", rows.Err(), nil)
	return ids
}

// An instance id is only ever an argument: quotes, question marks (the
// placeholders the dialect rewrites), comment marks and any UTF-8 are the
// id, and its bucket is its own.
func FuzzTakePublishToken(f *testing.F) {
	for _, s := range []string{"a", "'", `"`, "?", "?1", "$1", "a'); DROP TABLE instances; --", "/* x", "ü€😀", " ", "%", "\\", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	db := testdb.New(f, Open)
	if _, err := db.CreateInstance(f.Context(), testInstance(instanceID)); err != nil {
		f.Fatal(err)
	}
	t0 := time.UnixMilli(1_800_000_000_000)
	f.Fuzz(func(t *testing.T, id string) {
		if id == instanceID || !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
			return // PostgreSQL's text holds neither
		}
		ctx := t.Context()
		if err := db.DeleteInstance(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatalf("DeleteInstance(%q): %v", id, err)
		}
		if _, err := db.CreateInstance(ctx, testInstance(id)); err != nil {
			t.Fatalf("CreateInstance(%q): %v", id, err)
		}
		var got []bool
		for range 3 {
			ok, err := db.TakePublishToken(ctx, id, t0, 1, 2)
			if err != nil {
				t.Fatalf("TakePublishToken(%q): %v", id, err)
			}
			got = append(got, ok)
		}
		if !slices.Equal(got, []bool{true, true, false}) {
			t.Fatalf("instance %q: takes %v, want a burst of 2", id, got)
		}
		// The bucket is the id's, and the only one: the others went with
		// their instances, and the constant instance never had one.
		if ids := bucketIDs(t, db); !slices.Equal(ids, []string{id}) {
			t.Fatalf("after taking from %q the buckets are those of %q", id, ids)
		}
		if err := db.DeleteInstance(ctx, id); err != nil {
			t.Fatalf("DeleteInstance(%q): %v", id, err)
		}
	})
}
