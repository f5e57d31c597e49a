package testkit

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// CPU and ProcessCPU count the time spent on the CPU, each to within a
// little of the other for this process: busy until CPU has grown by 50 ms,
// ProcessCPU grows by as much. A process that is not there has used none.
func TestCPU(t *testing.T) {
	self0, proc0 := CPU(), ProcessCPU(os.Getpid())
	for CPU()-self0 < 50*time.Millisecond {
	}
	self, proc := CPU()-self0, ProcessCPU(os.Getpid())-proc0
	if proc < self/2 || proc > 2*self {
		t.Fatalf("CPU grew %v, ProcessCPU %v: want about the same", self, proc)
	}

	if got := ProcessCPU(-1); got != 0 {
		t.Fatalf("no such process: %v, want 0", got)
	}
}

// recorder is a testing.TB whose Fatal and Fatalf record the failure and
// end the goroutine, as they end a test.
type recorder struct {
	testing.TB
	failure string
}

func (r *recorder) Fatal(args ...any) { r.failure = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Helper() {}

// failure runs check on a recorder and returns how it failed ("" if not).
func failure(t *testing.T, check func(testing.TB)) string {
	r := &recorder{TB: t}
	var wg sync.WaitGroup
	wg.Go(func() { check(r) })
	wg.Wait()
	return r.failure
}

// CheckVAPID passes a pair that belongs together and fails each kind of
// wrong one, saying which key is wrong.
func TestCheckVAPID(t *testing.T) {
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	pub, priv := b64(key.PublicKey().Bytes()), b64(key.Bytes())
	notOnCurve := append([]byte{4}, make([]byte, 64)...)
	for _, c := range []struct {
		name, public, private, want string
	}{
		{"a pair", pub, priv, ""},
		{"padded", pub + "=", priv, "public"},
		{"compressed", b64(append([]byte{2}, key.PublicKey().Bytes()[1:33]...)), priv, "public"},
		{"not a point", b64(notOnCurve), priv, "P-256 point"},
		{"short private", pub, b64(key.Bytes()[1:]), "private"},
		{"another's private", pub, b64(other.Bytes()), "does not belong"},
	} {
		got := failure(t, func(tb testing.TB) { CheckVAPID(tb, c.public, c.private) })
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: failed %q, want %q", c.name, got, c.want)
		}
	}
}
