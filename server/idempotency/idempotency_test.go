package idempotency_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/idempotency/idempotencytest"
)

func TestMemory(t *testing.T) {
	idempotencytest.Run(t, func(t *testing.T, opts idempotency.Options) idempotency.Store {
		return idempotency.NewMemory(opts)
	})
}

func TestGuard(t *testing.T) {
	ctx := context.Background()
	g := idempotency.NewGuard(idempotency.NewMemory(idempotency.Options{}), idempotency.Options{})
	fp, other := idempotency.Sum([]byte("POST"), []byte("body")), idempotency.Sum([]byte("POST"), []byte("other"))

	out, c, _, err := g.Begin(ctx, "app", "k", fp)
	if err != nil || out != idempotency.Proceed {
		t.Fatalf("first request: %v, %v; want Proceed", out, err)
	}
	if out, _, _, _ := g.Begin(ctx, "app", "k", fp); out != idempotency.InFlight {
		t.Fatalf("repeat in flight: %v, want InFlight", out)
	}
	if out, _, _, _ := g.Begin(ctx, "app", "k", other); out != idempotency.Mismatch {
		t.Fatalf("other body in flight: %v, want Mismatch", out)
	}
	// A failed answer is not kept: the key is free again.
	if err := g.Finish(ctx, c, idempotency.Response{Status: 503, Body: []byte(`{"error":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	out, c, _, _ = g.Begin(ctx, "app", "k", other)
	if out != idempotency.Proceed {
		t.Fatalf("after a failed answer: %v, want Proceed", out)
	}
	if err := g.Finish(ctx, c, idempotency.Response{Status: 200, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	out, _, res, _ := g.Begin(ctx, "app", "k", other)
	if out != idempotency.Replay || res.Status != 200 || string(res.Body) != "{}" {
		t.Fatalf("repeat after success: %v %d %q, want Replay 200 {}", out, res.Status, res.Body)
	}
	if out, _, _, _ := g.Begin(ctx, "app", "k", fp); out != idempotency.Mismatch {
		t.Fatalf("other body after success: %v, want Mismatch", out)
	}
	if out, _, _, _ := g.Begin(ctx, "other-app", "k", fp); out != idempotency.Proceed {
		t.Fatalf("same key, other scope: %v, want Proceed", out)
	}
}

func TestSumSeparatesParts(t *testing.T) {
	if idempotency.Sum([]byte("ab"), []byte("c")) == idempotency.Sum([]byte("a"), []byte("bc")) {
		t.Fatal("parts split differently hash the same")
	}
}

func TestMemorySweep(t *testing.T) {
	ctx := context.Background()
	m := idempotency.NewMemory(idempotency.Options{})
	t0 := time.Now()
	for _, scope := range []string{"a", "b"} {
		c := idempotency.Claim{Scope: scope, Key: "k", Token: "t", Expires: t0.Add(time.Hour)}
		if _, err := m.Begin(ctx, c, idempotency.Sum(), t0); err != nil {
			t.Fatal(err)
		}
		if err := m.Complete(ctx, c, idempotency.Response{Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	m.Sweep(t0.Add(time.Hour - time.Second))
	if m.Len() != 2 {
		t.Fatalf("%d keys after a sweep before they expire, want 2", m.Len())
	}
	m.Sweep(t0.Add(time.Hour))
	if m.Len() != 0 {
		t.Fatalf("%d keys after a sweep once they expired, want 0", m.Len())
	}
}

func TestValidKey(t *testing.T) {
	for key, want := range map[string]bool{
		"":                        false,
		"8e03978e-40d5-43e8-bc93": true,
		strings.Repeat("k", 255):  true,
		strings.Repeat("k", 256):  false,
		"tab\there":               false,
		"é":                       false,
		"with space ~":            true,
	} {
		if got := idempotency.ValidKey(key); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", key, got, want)
		}
	}
}

// ctxStore is a store that does I/O, as far as a Guard can tell: it keeps
// keys in a Memory and records the context each write was given.
type ctxStore struct {
	*idempotency.Memory
	errs      []error
	deadlines []bool
}

func (s *ctxStore) record(ctx context.Context) {
	_, ok := ctx.Deadline()
	s.errs, s.deadlines = append(s.errs, ctx.Err()), append(s.deadlines, ok)
}

func (s *ctxStore) Complete(ctx context.Context, c idempotency.Claim, res idempotency.Response) error {
	s.record(ctx)
	return s.Memory.Complete(ctx, c, res)
}

func (s *ctxStore) Release(ctx context.Context, c idempotency.Claim) error {
	s.record(ctx)
	return s.Memory.Release(ctx, c)
}

// A request whose client hung up still ends its claim on a store that does
// I/O: Finish writes on a context the request's cancellation does not
// reach, with a deadline of its own, for the kept answer and the release
// alike.
func TestFinishOutlivesTheRequest(t *testing.T) {
	store := &ctxStore{Memory: idempotency.NewMemory(idempotency.Options{})}
	g := idempotency.NewGuard(store, idempotency.Options{})
	fp := idempotency.Sum([]byte("POST"), []byte("body"))
	for i, status := range []int{200, 503} {
		ctx, cancel := context.WithCancel(context.Background())
		out, c, _, err := g.Begin(ctx, "app", "k"+string(rune('a'+i)), fp)
		if err != nil || out != idempotency.Proceed {
			t.Fatalf("Begin: %v, %v", out, err)
		}
		cancel() // the client hangs up before the answer is kept
		if err := g.Finish(ctx, c, idempotency.Response{Status: status, Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if store.errs[i] != nil || !store.deadlines[i] {
			t.Fatalf("status %d: the store's write saw ctx error %v, deadline %v; want none, and a deadline", status, store.errs[i], store.deadlines[i])
		}
	}
	if out, _, res, _ := g.Begin(context.Background(), "app", "ka", fp); out != idempotency.Replay || res.Status != 200 {
		t.Fatalf("repeat after the hang-up: %v %d, want the kept 200", out, res.Status)
	}
}

// SumRequest is Sum of the request's parts: the fingerprints the stores
// keep are the same whichever computed them.
func TestSumRequestIsSumOfItsParts(t *testing.T) {
	body := []byte(strings.Repeat("b", 70<<10)) // past the pooled buffers' size too
	for _, b := range [][]byte{nil, []byte(`{"name":"e"}`), body} {
		got := idempotency.SumRequest("POST", "/apps/1/events", "auth_key=k", b)
		if want := idempotency.Sum([]byte("POST"), []byte("/apps/1/events"), []byte("auth_key=k"), b); got != want {
			t.Fatalf("body of %d bytes: SumRequest %s, Sum %s", len(b), got, want)
		}
	}
	if idempotency.SumRequest("POST", "/a", "", nil) == idempotency.SumRequest("POST", "/", "a", nil) {
		t.Fatal("a byte moved from the path to the query gives the same fingerprint")
	}
}

// The fingerprint's encoding is what the Redis and database stores keep:
// a change would refuse a retry across an upgrade.
func TestSumEncodingIsStable(t *testing.T) {
	const want = "f4b3b23ce9bdd8f17948fa73f65525099a9c0f9530c669c586c19e2dfdabea28" // as computed before the pooled buffer
	if got := idempotency.Sum([]byte("POST"), []byte("body")).String(); got != want {
		t.Fatalf("Sum(POST, body) = %s, want %s", got, want)
	}
}

// Only a 2xx answer is kept for replays; any other (a 3xx too) frees its
// key.
func TestOnlySuccessfulAnswersAreKept(t *testing.T) {
	ctx := context.Background()
	g := idempotency.NewGuard(idempotency.NewMemory(idempotency.Options{}), idempotency.Options{})
	fp := idempotency.Sum([]byte("POST"), []byte("body"))
	for _, tc := range []struct {
		status int
		want   idempotency.Outcome
	}{{199, idempotency.Proceed}, {200, idempotency.Replay}, {299, idempotency.Replay}, {300, idempotency.Proceed}, {500, idempotency.Proceed}} {
		key := "k" + strconv.Itoa(tc.status)
		_, c, _, _ := g.Begin(ctx, "app", key, fp)
		if err := g.Finish(ctx, c, idempotency.Response{Status: tc.status, Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if out, _, _, _ := g.Begin(ctx, "app", key, fp); out != tc.want {
			t.Errorf("after a %d answer, a repeat: %v, want %v", tc.status, out, tc.want)
		}
	}
}

// The bounds the README promises when nothing is set: keys kept 24 h,
// 10,000 and 32 MiB of them per app or instance, a claim held 1 minute.
func TestDefaults(t *testing.T) {
	want := idempotency.Options{TTL: 24 * time.Hour, MaxKeys: 10000, MaxBytes: 32 << 20, Lock: time.Minute}
	if got := (idempotency.Options{}).WithDefaults(); got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
}

// A claim counts against the scope's bytes as it begins, before any answer
// is kept: one past the bound forgets the oldest key then. (The database
// store bounds only the answers it keeps.)
func TestMemoryClaimPastTheBytesForgetsTheOldest(t *testing.T) {
	ctx := context.Background()
	m := idempotency.NewMemory(idempotency.Options{MaxKeys: 100, MaxBytes: 3 * idempotency.KeyCost("k0", 0)})
	t0 := time.UnixMilli(1_800_000_000_000)
	fp := idempotency.Sum([]byte("POST"), []byte("body"))
	for i := range 4 {
		c := idempotency.Claim{Scope: "app", Key: "k" + strconv.Itoa(i), Token: "a", Expires: t0.Add(time.Hour)}
		if e, err := m.Begin(ctx, c, fp, t0); e != nil || err != nil {
			t.Fatalf("Begin(%s): %+v, %v; want a new claim", c.Key, e, err)
		}
	}
	if m.Len() != 3 || m.Evicted() != 1 {
		t.Fatalf("four claims where three fit: %d kept, %d forgotten; want 3 and 1", m.Len(), m.Evicted())
	}
	c := idempotency.Claim{Scope: "app", Key: "k0", Token: "b", Expires: t0.Add(time.Hour)}
	if e, err := m.Begin(ctx, c, fp, t0); e != nil || err != nil {
		t.Fatalf("Begin(k0) again: %+v, %v; want it forgotten, a new claim", e, err)
	}
}
