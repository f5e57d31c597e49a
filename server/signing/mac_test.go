package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/clientauth"
)

// hmacReference is HMAC-SHA256 as crypto/hmac computes it.
func hmacReference(secret, message string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(message))
	return hex.EncodeToString(m.Sum(nil))
}

func TestMACMatchesCryptoHMAC(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return string(b)
	}
	// Key lengths around the block size (64) and beyond, where the key is
	// hashed first; messages around block boundaries.
	for keyLen := 0; keyLen <= 150; keyLen++ {
		for _, msgLen := range []int{0, 1, 55, 56, 63, 64, 65, 119, 120, 200, 1000} {
			secret, message := random(keyLen), random(msgLen)
			if got, want := HMACHex(secret, message), hmacReference(secret, message); got != want {
				t.Fatalf("key %d bytes, message %d bytes: got %s, want %s", keyLen, msgLen, got, want)
			}
		}
	}
	// A message larger than the pooled buffer keeps is still right, and so
	// is the next one through the same pool.
	big := random(3 * maxPooledBuf)
	if got, want := HMACHex("k", big), hmacReference("k", big); got != want {
		t.Fatal("large message: wrong MAC")
	}
	if got, want := HMACHex("k", "small"), hmacReference("k", "small"); got != want {
		t.Fatal("after a large message: wrong MAC")
	}
}

// Past maxSecrets distinct secrets the keyed MAC cache starts over, and
// every MAC stays right across the reset.
func TestMACCacheStartsOver(t *testing.T) {
	for i := range maxSecrets + 10 {
		secret := "secret-" + strconv.Itoa(i)
		if got, want := HMACHex(secret, "m"), hmacReference(secret, "m"); got != want {
			t.Fatalf("secret %d: wrong MAC", i)
		}
	}
	if n := nSecrets.Load(); n > maxSecrets {
		t.Fatalf("%d secrets cached, want at most %d", n, maxSecrets)
	}
	if got, want := HMACHex("secret-1", "m"), hmacReference("secret-1", "m"); got != want {
		t.Fatal("a secret seen before the reset: wrong MAC")
	}
}

// The pooled MACs and buffers are shared between goroutines: run with
// -race, each goroutine with its own secret, interleaving HMACHex and Verify.
func TestMACConcurrentSecrets(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			secret := strings.Repeat(string(rune('a'+g)), 10+g*9) // 10 to 73 bytes
			for i := range 200 {
				message := strings.Repeat("m", i)
				if got, want := HMACHex(secret, message), hmacReference(secret, message); got != want {
					t.Errorf("goroutine %d: wrong MAC", g)
					return
				}
				body := []byte(message)
				raw := clientauth.SignQuery("POST", "/apps/1/events", url.Values{}, body, "key", secret, now)
				p, _ := ParseQuery(raw)
				if err := Verify(Request{Method: "POST", Path: "/apps/1/events", RawQuery: raw, Body: body}, p, secret, now); err != nil {
					t.Errorf("goroutine %d: own signature refused: %v", g, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestEqualHex(t *testing.T) {
	expected := sha256.Sum256([]byte("x"))
	lower := hex.EncodeToString(expected[:])
	tests := []struct {
		name string
		sent string
		want bool
	}{
		{"OKLower", lower, true},
		{"OKUpper", strings.ToUpper(lower), true},
		{"ErrEmpty", "", false},
		{"ErrOdd", lower[:63], false},
		{"ErrShort", lower[:62], false},
		{"ErrLong", lower + "00", false},
		{"ErrNotHex", "zz" + lower[2:], false},
		{"ErrNotHexLast", lower[:63] + "g", false},
		{"ErrOtherDigest", strings.Repeat("0", 64), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := equalHex(tt.sent, expected[:]); got != tt.want {
				t.Fatalf("equalHex(%q) = %v, want %v", tt.sent, got, tt.want)
			}
			// The same answer as decoding with encoding/hex and hmac.Equal.
			decoded, err := hex.DecodeString(tt.sent)
			if ref := err == nil && hmac.Equal(decoded, expected[:]); ref != tt.want {
				t.Fatalf("reference disagrees: %v", ref)
			}
		})
	}
}

func TestParseQueryGetFindsFirstOfRepeats(t *testing.T) {
	p, err := ParseQuery("z=0&a=1&B=2&a=3")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := p.Get("a"); !ok || v != "1" {
		t.Fatalf("Get(a) = %q, %v; want the first sent, 1", v, ok)
	}
	if v, ok := p.Get("b"); !ok || v != "2" {
		t.Fatalf("Get(b) = %q, %v; keys are lower-cased", v, ok)
	}
	if _, ok := p.Get("c"); ok {
		t.Fatal("Get(c) found a parameter that was not sent")
	}
}

func TestVerifyAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	now := time.Unix(1353088179, 0)
	raw := "auth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f&auth_signature=da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"
	p, err := ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Method: "POST", Path: "/apps/3/events", RawQuery: raw, Body: []byte(vectorBody)}
	allocs := testing.AllocsPerRun(100, func() {
		if err := Verify(req, p, vectorSecret, now); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("Verify allocates %.0f times per accepted request, want 0", allocs)
	}
}

// BenchmarkVerify measures parsing and checking the query of a signed
// trigger, the signing share of BenchmarkSignedTrigger (server/httpapi).
func BenchmarkVerify(b *testing.B) {
	now := time.Unix(1353088179, 0)
	raw := "auth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f&auth_signature=da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"
	req := Request{Method: "POST", Path: "/apps/3/events", RawQuery: raw, Body: []byte(vectorBody)}
	b.ReportAllocs()
	for b.Loop() {
		p, err := ParseQuery(raw)
		if err != nil {
			b.Fatal(err)
		}
		if err := Verify(req, p, vectorSecret, now); err != nil {
			b.Fatal(err)
		}
	}
}

func TestQueryUnescapeMatchesURL(t *testing.T) {
	for _, s := range []string{"", "plain", "a+b", "%41", "%4", "%zz", "a%2Bb", "+", "%", "caf%C3%A9", "ünïcode", "a b", "x=y&z"} {
		got, gotErr := queryUnescape(s)
		want, wantErr := url.QueryUnescape(s)
		if got != want || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("queryUnescape(%q) = %q, %v; url.QueryUnescape gives %q, %v", s, got, gotErr, want, wantErr)
		}
	}
}

// Requests of two apps taking turns both find their keyed MAC cached:
// verifying them allocates nothing.
func TestVerifyTwoSecretsAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	now := time.Unix(1_700_000_000, 0)
	type signed struct {
		req    Request
		p      Params
		secret string
	}
	var apps []signed
	for _, secret := range []string{"two-secrets-a", "two-secrets-b"} {
		raw := clientauth.SignQuery("GET", "/apps/3/channels", url.Values{}, nil, vectorKey, secret, now)
		p, err := ParseQuery(raw)
		if err != nil {
			t.Fatal(err)
		}
		apps = append(apps, signed{Request{Method: "GET", Path: "/apps/3/channels", RawQuery: raw}, p, secret})
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, a := range apps {
			if err := Verify(a.req, a.p, a.secret, now); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs > 0 {
		t.Fatalf("Verify allocates %.0f times per pair of requests of two apps, want 0", allocs)
	}
}
