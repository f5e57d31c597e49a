// Package wait is the one "eventually" helper of Herald's tests: poll a
// condition instead of sleeping for a fixed time.
package wait

import (
	"testing"
	"time"
)

// Limit is how long Until waits before failing. It is generous because a
// passing test returns as soon as its condition holds; only a failing one
// waits this long, and a shared CI machine can be slow.
const Limit = 60 * time.Second

// Until polls cond every few milliseconds until it holds, and fails t
// ("timed out waiting for <what>") when it has not held within Limit.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// NoError polls check until it returns nil, and fails t with the last error
// when it has not within Limit: for conditions whose failure is best told by
// what was seen last.
func NoError(t testing.TB, check func() error) {
	t.Helper()
	deadline := time.Now().Add(Limit)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
