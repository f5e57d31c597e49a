// Package idempotencytest is the behaviour every idempotency.Store shares,
// as tests: the memory, Redis and database stores each run Run.
package idempotencytest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/idempotency"
)

// NewStore returns an empty store with opts' bounds; scopes not yet used
// by the test may be asked for (the database store needs its instances to
// exist: Run's scopes are "s1" and "s2").
type NewStore func(t *testing.T, opts idempotency.Options) idempotency.Store

// Scopes are the scopes Run uses.
var Scopes = []string{"s1", "s2"}

var (
	fp1 = idempotency.Sum([]byte("one"))
	fp2 = idempotency.Sum([]byte("two"))
	t0  = time.UnixMilli(1_800_000_000_000).UTC()
)

const (
	ttl  = time.Hour
	lock = time.Minute
)

func claim(scope, key, token string, at time.Time) idempotency.Claim {
	return idempotency.Claim{Scope: scope, Key: key, Token: token, Expires: at.Add(ttl)}
}

// Run runs the shared tests against stores from newStore.
func Run(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	opts := idempotency.Options{TTL: ttl, Lock: lock, MaxKeys: 3}

	t.Run("ClaimThenInFlight", func(t *testing.T) {
		s := newStore(t, opts)
		mustBegin(t, s, claim("s1", "k", "a", t0), fp1, t0, nil)
		mustBegin(t, s, claim("s1", "k", "b", t0), fp2, t0.Add(time.Second), &idempotency.Entry{Fingerprint: fp1})
		// Another scope's key of the same name is another key.
		mustBegin(t, s, claim("s2", "k", "c", t0), fp2, t0, nil)
	})

	t.Run("CompleteThenReplay", func(t *testing.T) {
		s := newStore(t, opts)
		c := claim("s1", "k", "a", t0)
		mustBegin(t, s, c, fp1, t0, nil)
		res := idempotency.Response{Status: 200, Body: []byte(`{"publishId":"p"}`)}
		if err := s.Complete(ctx, c, res); err != nil {
			t.Fatal(err)
		}
		mustBegin(t, s, claim("s1", "k", "b", t0), fp1, t0.Add(ttl-time.Second), &idempotency.Entry{Fingerprint: fp1, Done: true, Response: res})
		// A TTL after the first request the key is new again.
		mustBegin(t, s, claim("s1", "k", "b", t0.Add(ttl)), fp2, t0.Add(ttl), nil)
	})

	t.Run("ReleaseFreesTheKey", func(t *testing.T) {
		s := newStore(t, opts)
		c := claim("s1", "k", "a", t0)
		mustBegin(t, s, c, fp1, t0, nil)
		if err := s.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
		mustBegin(t, s, claim("s1", "k", "b", t0), fp2, t0.Add(time.Second), nil)
		// And its room: two more fill the scope's three, none forgotten.
		keys := []string{"k", "k1", "k2"}
		for _, k := range keys[1:] {
			mustBegin(t, s, claim("s1", k, "b", t0), fp2, t0.Add(time.Second), nil)
		}
		for _, k := range keys {
			mustBegin(t, s, claim("s1", k, "c", t0), fp1, t0.Add(2*time.Second), &idempotency.Entry{Fingerprint: fp2})
		}
	})

	t.Run("ClaimsThatFitTheBytesStay", func(t *testing.T) {
		// Three claims whose costs add up to the bound exactly are all
		// kept.
		o := opts
		o.MaxKeys, o.MaxBytes = 100, 3*idempotency.KeyCost("k0", 0)
		s := newStore(t, o)
		keys := []string{"k0", "k1", "k2"}
		for i, k := range keys {
			at := t0.Add(time.Duration(i) * time.Millisecond)
			mustBegin(t, s, claim("s1", k, "a", at), fp1, at, nil)
		}
		at := t0.Add(time.Second)
		for _, k := range keys {
			mustBegin(t, s, claim("s1", k, "b", at), fp2, at, &idempotency.Entry{Fingerprint: fp1})
		}
	})

	t.Run("StaleClaimChangesNothing", func(t *testing.T) {
		s := newStore(t, opts)
		a := claim("s1", "k", "a", t0)
		mustBegin(t, s, a, fp1, t0, nil)
		// a's claim lapses unfinished (its node died, say); b takes the key.
		later := t0.Add(lock + time.Second)
		b := claim("s1", "k", "b", later)
		mustBegin(t, s, b, fp2, later, nil)
		if err := s.Complete(ctx, a, idempotency.Response{Status: 200, Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		mustBegin(t, s, claim("s1", "k", "c", later), fp1, later.Add(time.Second), &idempotency.Entry{Fingerprint: fp2})
	})

	t.Run("OldestForgottenWhenFull", func(t *testing.T) {
		s := newStore(t, opts)
		for i := range 4 {
			at := t0.Add(time.Duration(i) * time.Millisecond)
			c := claim("s1", fmt.Sprint("k", i), "a", at)
			mustBegin(t, s, c, fp1, at, nil)
			if err := s.Complete(ctx, c, idempotency.Response{Status: 200, Body: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
		}
		// The other scope's room is its own.
		mustBegin(t, s, claim("s2", "k0", "a", t0), fp1, t0.Add(time.Second), nil)
		at := t0.Add(time.Second)
		mustBegin(t, s, claim("s1", "k3", "b", at), fp1, at, &idempotency.Entry{Fingerprint: fp1, Done: true, Response: idempotency.Response{Status: 200, Body: []byte("{}")}})
		mustBegin(t, s, claim("s1", "k0", "b", at), fp1, at, nil) // forgotten for k3
	})

	t.Run("OldestForgottenPastTheBytes", func(t *testing.T) {
		body := make([]byte, 1000)
		o := opts
		o.MaxKeys, o.MaxBytes = 100, 3*idempotency.KeyCost("k0", len(body))
		s := newStore(t, o)
		res := idempotency.Response{Status: 200, Body: body}
		complete := func(key string, at time.Time, res idempotency.Response) {
			t.Helper()
			c := claim("s1", key, "a", at)
			mustBegin(t, s, c, fp1, at, nil)
			if err := s.Complete(ctx, c, res); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 4 {
			complete(fmt.Sprint("k", i), t0.Add(time.Duration(i)*time.Millisecond), res)
		}
		// Three answers fit: the oldest of four went.
		at := t0.Add(time.Second)
		for _, k := range []string{"k1", "k2", "k3"} {
			mustBegin(t, s, claim("s1", k, "b", at), fp1, at, &idempotency.Entry{Fingerprint: fp1, Done: true, Response: res})
		}
		mustBegin(t, s, claim("s1", "k0", "b", at), fp1, at, nil)
		// An answer over the bound by itself is not kept, and takes the
		// others with it.
		complete("big", at.Add(time.Millisecond), idempotency.Response{Status: 200, Body: make([]byte, o.MaxBytes)})
		later := at.Add(time.Second)
		for _, k := range []string{"big", "k3"} {
			mustBegin(t, s, claim("s1", k, "c", later), fp1, later, nil)
		}
	})

	t.Run("OneOfManyClaims", func(t *testing.T) {
		s := newStore(t, opts)
		const n = 8
		var wg sync.WaitGroup
		won := make(chan string, n)
		for i := range n {
			wg.Go(func() {
				token := fmt.Sprint("t", i)
				e, err := s.Begin(ctx, claim("s1", "k", token, t0), fp1, t0)
				if err != nil {
					t.Error(err)
					return
				}
				if e == nil {
					won <- token
				}
			})
		}
		wg.Wait()
		close(won)
		if got := len(won); got != 1 {
			t.Fatalf("%d of %d concurrent claims of one key won, want 1", got, n)
		}
	})

	t.Run("Guard", func(t *testing.T) { runGuard(t, newStore) })
}

// runGuard runs the rules a Guard applies over stores from newStore, with
// the default bounds (the README's numbers), on a clock the test moves: a
// completed key is replayed for the whole TTL, well past the claim's lock;
// an unfinished claim holds for the lock, not longer; a failure frees its
// key.
func runGuard(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	res := idempotency.Response{Status: 200, Body: []byte(`{"ok":true}`)}
	start := func(t *testing.T) (*idempotency.Guard, *time.Time) {
		clock := t0
		opts := idempotency.Options{}
		return idempotency.NewGuard(newStore(t, opts), opts).WithClock(func() time.Time { return clock }), &clock
	}
	begin := func(t *testing.T, g *idempotency.Guard, want idempotency.Outcome) (idempotency.Claim, idempotency.Response) {
		t.Helper()
		out, c, r, err := g.Begin(ctx, "s1", "k", fp1)
		if err != nil || out != want {
			t.Fatalf("Begin: %v, %v; want %v", out, err, want)
		}
		return c, r
	}
	t.Run("DoneKeyReplaysForItsTTL", func(t *testing.T) {
		g, clock := start(t)
		c, _ := begin(t, g, idempotency.Proceed)
		if err := g.Finish(ctx, c, res); err != nil {
			t.Fatal(err)
		}
		for _, at := range []time.Duration{2 * time.Minute, idempotency.DefaultTTL - time.Millisecond} {
			*clock = t0.Add(at)
			if _, got := begin(t, g, idempotency.Replay); got.Status != res.Status || string(got.Body) != string(res.Body) {
				t.Fatalf("%v on: replayed %d %s, want %d %s", at, got.Status, got.Body, res.Status, res.Body)
			}
		}
		*clock = t0.Add(idempotency.DefaultTTL)
		begin(t, g, idempotency.Proceed)
	})
	t.Run("ClaimHoldsForTheLock", func(t *testing.T) {
		g, clock := start(t)
		begin(t, g, idempotency.Proceed)
		*clock = t0.Add(idempotency.DefaultLock - time.Millisecond)
		begin(t, g, idempotency.InFlight)
		*clock = t0.Add(idempotency.DefaultLock)
		begin(t, g, idempotency.Proceed)
	})
	t.Run("FailureFreesTheKey", func(t *testing.T) {
		g, _ := start(t)
		c, _ := begin(t, g, idempotency.Proceed)
		if err := g.Finish(ctx, c, idempotency.Response{Status: 500, Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		begin(t, g, idempotency.Proceed)
	})
}

// mustBegin calls Begin and checks its answer against want (nil: claimed).
func mustBegin(t *testing.T, s idempotency.Store, c idempotency.Claim, fp idempotency.Fingerprint, now time.Time, want *idempotency.Entry) {
	t.Helper()
	got, err := s.Begin(context.Background(), c, fp, now)
	if err != nil {
		t.Fatalf("Begin(%s/%s): %v", c.Scope, c.Key, err)
	}
	switch {
	case want == nil && got != nil:
		t.Fatalf("Begin(%s/%s) at %v found %+v, want a new claim", c.Scope, c.Key, now.Sub(t0), *got)
	case want != nil && got == nil:
		t.Fatalf("Begin(%s/%s) at %v claimed the key, want it held by %+v", c.Scope, c.Key, now.Sub(t0), *want)
	case want != nil && (got.Fingerprint != want.Fingerprint || got.Done != want.Done ||
		got.Response.Status != want.Response.Status || string(got.Response.Body) != string(want.Response.Body)):
		t.Fatalf("Begin(%s/%s) found %+v, want %+v", c.Scope, c.Key, *got, *want)
	}
}
