package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
	"sync/atomic"
)

// macer is a pooled message buffer with room for its HMAC-SHA256, so that
// signing and verifying allocate nothing per request.
type macer struct {
	buf []byte // the message, built by the caller with append
	// mac holds the result of sum: a field rather than a local, as a slice
	// of it goes through the hash.Hash interface.
	mac [sha256.Size]byte
}

// maxPooledBuf bounds the message buffer kept in the pool, so one large
// webhook body does not pin its size in memory.
const maxPooledBuf = 16 * 1024

var macers = sync.Pool{New: func() any { return &macer{buf: make([]byte, 0, 256)} }}

func getMacer() *macer { return macers.Get().(*macer) }

// release returns m to the pool; m and what sum returned must not be used
// afterwards.
func (m *macer) release() {
	if cap(m.buf) > maxPooledBuf {
		m.buf = make([]byte, 0, 256)
	}
	m.buf = m.buf[:0]
	macers.Put(m)
}

// keyedMACs holds, per secret, a pool of crypto/hmac HMAC-SHA256 instances.
// hmac.New allocates five objects, and a keyed MAC can be reused (Reset)
// for its own key only; secrets are few (one per app), so one pool each
// makes a request's MAC free. Past maxSecrets (rotated secrets piling up)
// the cache starts over.
var (
	keyedMACs sync.Map // secret -> *sync.Pool of hash.Hash
	nSecrets  atomic.Int64
)

const maxSecrets = 4096

func macPool(secret string) *sync.Pool {
	if p, ok := keyedMACs.Load(secret); ok {
		return p.(*sync.Pool)
	}
	if nSecrets.Add(1) > maxSecrets {
		keyedMACs.Clear()
		nSecrets.Store(1)
	}
	key := []byte(secret)
	p, _ := keyedMACs.LoadOrStore(secret, &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }})
	return p.(*sync.Pool)
}

// sum returns HMAC-SHA256(secret, m.buf). The result lives in m: it is
// valid until the next sum or release.
func (m *macer) sum(secret string) []byte {
	pool := macPool(secret)
	h := pool.Get().(hash.Hash)
	h.Reset()
	h.Write(m.buf)
	out := h.Sum(m.mac[:0])
	pool.Put(h)
	return out
}

// HMACHex returns hex(HMAC-SHA256(secret, message)).
func HMACHex(secret, message string) string {
	m := getMacer()
	defer m.release()
	m.buf = append(m.buf, message...)
	return hex.EncodeToString(m.sum(secret))
}

// equalMAC reports whether sent is the hex HMAC-SHA256(secret, message).
func equalMAC(sent, secret, message string) bool {
	m := getMacer()
	defer m.release()
	m.buf = append(m.buf, message...)
	return equalHex(sent, m.sum(secret))
}

// equalHex compares a hex digest sent by a client with the expected MAC in
// constant time (hmac.Equal); a digest that is not hex, or of another length,
// never matches. It decodes into a stack buffer instead of calling
// hex.DecodeString, which would allocate for every request. Only the
// client's own input decides the early returns, never the expected MAC.
func equalHex(sent string, expected []byte) bool {
	var buf [sha256.Size]byte
	if len(expected) > len(buf) || len(sent) != 2*len(expected) {
		return false
	}
	got := buf[:len(expected)]
	for i := range got {
		hi, ok1 := unhex(sent[2*i])
		lo, ok2 := unhex(sent[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		got[i] = hi<<4 | lo
	}
	return hmac.Equal(got, expected)
}

// unhex decodes one hex digit, either case, as encoding/hex does.
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
