package clientrate

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// A bucket left until it is full again is forgotten; one still refilling is
// kept; and no more than the cap are held at once.
func TestBucketsForgetIdleKeys(t *testing.T) {
	b := New(10, 20) // refills in 2 s
	start := time.Unix(1_800_000_000, 0)
	for i := range 100 {
		b.Allow(fmt.Sprint("idle-", i), start)
	}
	for range 20 {
		b.Allow("busy", start.Add(1500*time.Millisecond))
	}
	if got := b.Len(); got != 101 {
		t.Fatalf("%d buckets, want 101", got)
	}
	// 2 s on, the idle buckets are full and go; busy's is not (it has 5 of 20).
	b.Allow("new", start.Add(2*time.Second))
	if got := b.Len(); got != 2 {
		t.Fatalf("%d buckets after the refill time, want busy and new", got)
	}
	if tokens := b.keys["busy"].TokensAt(start.Add(2 * time.Second)); tokens != 5 {
		t.Fatalf("busy's bucket holds %v tokens, want the 5 it refilled, not a new full one", tokens)
	}

	capped := New(10, 20)
	capped.SetMaxKeys(3)
	for i := range 10 {
		if !capped.Allow(fmt.Sprint("k", i), start) {
			t.Fatalf("the first request of key %d refused", i)
		}
		if got := capped.Len(); got > 3 {
			t.Fatalf("%d buckets, more than the cap of 3", got)
		}
	}
	if New(1, 1).maxKeys != MaxKeys {
		t.Fatal("the default cap is not MaxKeys")
	}
}

// Sweeps happen at most once per refill time: buckets full again are kept
// until a refill time has passed since the last sweep; the cap holds between
// sweeps; and Take's wait comes from the bucket's refill.
func TestBucketsSweepOncePerRefill(t *testing.T) {
	b := New(2, 2) // burst 2, full again 1 s after emptied
	if b.burst != 2 || b.refill != time.Second {
		t.Fatalf("burst %d, refill %v; want 2 and 1s", b.burst, b.refill)
	}
	t0 := time.Unix(1000, 0)
	for i := range 100 {
		b.Take(Key(fmt.Sprintf("192.0.2.%d", i)), t0)
	}
	if got := b.Len(); got != 100 {
		t.Fatalf("tracked %d, want 100", got)
	}
	// 0.9 s later the buckets are not full yet: kept.
	b.Take(Key("198.51.100.1"), t0.Add(900*time.Millisecond))
	if got := b.Len(); got != 101 {
		t.Fatalf("tracked %d after 0.9 s, want 101", got)
	}
	// The next sweep, a refill time after the first, finds the first 100 full.
	if ok, _ := b.Take(Key("198.51.100.2"), t0.Add(1100*time.Millisecond)); !ok {
		t.Fatal("a new address refused")
	}
	if got := b.Len(); got != 2 {
		t.Fatalf("tracked %d after the sweep, want 2", got)
	}

	b.SetMaxKeys(10)
	for i := range 50 {
		b.Take(Key(fmt.Sprintf("203.0.113.%d", i)), t0.Add(1200*time.Millisecond))
	}
	if got := b.Len(); got > 10 {
		t.Fatalf("tracked %d, want at most 10", got)
	}
	// The wait comes from the bucket's refill.
	b.Take(Key("192.0.2.200"), t0.Add(1300*time.Millisecond))
	b.Take(Key("192.0.2.200"), t0.Add(1300*time.Millisecond))
	ok, wait := b.Take(Key("192.0.2.200"), t0.Add(1300*time.Millisecond))
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("third take: %v, wait %v; want refused, 500ms", ok, wait)
	}
}

// A bucket refills continuously: a burst of its size, then one token per
// 1/rate of a second, whatever second it falls in (the Publish API's limit
// per instance: 100 a second, bursts of 100).
func TestBucketsRefill(t *testing.T) {
	const limit = 100
	b := New(limit, limit)
	start := time.Unix(1_800_000_000, 900_000_000) // late in a second
	for i := range limit {
		if !b.Allow("a", start) {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	if b.Allow("a", start) {
		t.Fatal("a request past the burst allowed")
	}
	// The next second begins 100 ms later; 105 ms later there are 10.5
	// tokens, not a new budget of 100.
	later := start.Add(105 * time.Millisecond)
	for i := range 10 {
		if !b.Allow("a", later) {
			t.Fatalf("request %d after 105 ms refused", i+1)
		}
	}
	if b.Allow("a", later) {
		t.Fatal("the 11th request after 105 ms allowed")
	}
	if !b.Allow("b", start) {
		t.Fatal("another key shares the bucket")
	}
}

// Take's wait is the time to the next token; a refused Take takes nothing.
func TestBucketsWait(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	for _, tt := range []struct {
		rate  float64
		burst int
		want  time.Duration
	}{
		{50, 100, 20 * time.Millisecond},
		{0.4, 1, 2500 * time.Millisecond},
		{0.25, 1, 4 * time.Second},
		{0.01, 1, 100 * time.Second},
	} {
		b := New(tt.rate, tt.burst)
		for i := range tt.burst {
			if ok, wait := b.Take("k", t0); !ok || wait != 0 {
				t.Fatalf("rate %v: take %d: %v, wait %v", tt.rate, i+1, ok, wait)
			}
		}
		for range 2 { // the first refusal took nothing: the second waits as long
			if ok, wait := b.Take("k", t0); ok || wait != tt.want {
				t.Fatalf("rate %v: %v, wait %v; want refused, %v", tt.rate, ok, wait, tt.want)
			}
		}
	}
	// A bucket part refilled waits only for the rest of its token.
	b := New(1, 1)
	b.Take("k", t0)
	if ok, wait := b.Take("k", t0.Add(250*time.Millisecond)); ok || wait != 750*time.Millisecond {
		t.Fatalf("a quarter refilled: %v, wait %v; want refused, 750ms", ok, wait)
	}
}

// Tiny rates do not overflow time.Duration: the refill time and the wait
// stay positive, so sweeps stay rare and Retry-After stays sane.
func TestBucketsTinyRate(t *testing.T) {
	b := New(1e-300, 1)
	if b.refill <= 0 {
		t.Fatalf("refill %v, want positive", b.refill)
	}
	t0 := time.Unix(1_800_000_000, 0)
	if !b.Allow("k", t0) {
		t.Fatal("the first take refused")
	}
	ok, wait := b.Take("k", t0)
	if ok || wait <= 0 {
		t.Fatalf("second take: %v, wait %v; want refused with a positive wait", ok, wait)
	}
	if got, want := RetryAfter(wait), fmt.Sprint(int64(math.Ceil(time.Duration(math.MaxInt64>>1).Seconds()))); got != want {
		t.Fatalf("Retry-After %s, want %s", got, want)
	}
}

// Retry-After is the wait in whole seconds rounded up, at least 1.
func TestRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		wait time.Duration
		want string
	}{
		{0, "1"},
		{-time.Second, "1"},
		{20 * time.Millisecond, "1"},
		{time.Second, "1"},
		{time.Second + time.Nanosecond, "2"},
		{2500 * time.Millisecond, "3"},
		{4 * time.Second, "4"},
		{100 * time.Second, "100"},
	} {
		if got := RetryAfter(tt.wait); got != tt.want {
			t.Errorf("RetryAfter(%v) = %s, want %s", tt.wait, got, tt.want)
		}
	}
}

// A client's key is its IPv4 address (IPv4-mapped IPv6 included) or its
// IPv6 /64; anything unparsable is its own key.
func TestKey(t *testing.T) {
	for _, tt := range []struct{ ip, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"2001:db8::1", "2001:db8::/64"},
		{"2001:db8::ff", "2001:db8::/64"},
		{"2001:db8:0:1::1", "2001:db8:0:1::/64"},
		{"2001:DB8::1", "2001:db8::/64"},
		{"not an address", "not an address"},
		{"", ""},
	} {
		if got := Key(tt.ip); got != tt.want {
			t.Errorf("Key(%q) = %q, want %q", tt.ip, got, tt.want)
		}
	}
}

// Concurrent takes on shared and distinct keys never hand out more than the
// burst of a key (go test -race covers the locking).
func TestBucketsConcurrent(t *testing.T) {
	b := New(1, 50)
	t0 := time.Unix(1_800_000_000, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				if b.Allow("shared", t0) {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
				b.Allow(fmt.Sprint(g, "-", i), t0)
				_ = b.Len()
			}
		}()
	}
	wg.Wait()
	if allowed != 50 {
		t.Fatalf("%d takes allowed on one key, want the burst of 50", allowed)
	}
}
