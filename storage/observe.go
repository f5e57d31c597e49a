package storage

import "time"

// ObserveTransactions installs fn, which is then told the kind ("read" or
// "write") and the duration of every transaction the storage methods run,
// waiting for the connection included (the writer is one connection, so a
// queue of writers shows up here). fn must be safe for concurrent use and
// quick.
func (db *DB) ObserveTransactions(fn func(kind string, d time.Duration)) {
	db.observe.Store(&fn)
}

// timed reports the time since start to the observer, if any.
func (db *DB) timed(kind string, start time.Time) {
	if fn := db.observe.Load(); fn != nil {
		(*fn)(kind, time.Since(start))
	}
}
