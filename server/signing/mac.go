package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
)

// macer computes HMAC-SHA256 with a reusable SHA-256 digest and message
// buffer. crypto/hmac.New allocates a keyed MAC per call (the MAC, two
// digests and both pads: five objects); the key is a per-app secret, so keyed
// MACs cannot be shared between requests of different apps, but a plain
// SHA-256 digest can. macer therefore applies RFC 2104 itself,
//
//	HMAC(K, m) = H((K' ^ opad) || H((K' ^ ipad) || m))
//
// with K' the key, or its SHA-256 when longer than a block, zero-padded to
// one block. TestMACMatchesCryptoHMAC checks it against crypto/hmac.
type macer struct {
	digest hash.Hash
	buf    []byte // the message, built by the caller with append
	// Scratch for sum. Fields rather than locals: slices of them go through
	// the hash.Hash interface, which would move locals to the heap.
	key   [sha256.BlockSize]byte
	pad   [sha256.BlockSize]byte
	inner [sha256.Size]byte
	mac   [sha256.Size]byte
}

// maxPooledBuf bounds the message buffer kept in the pool, so one large
// webhook body does not pin its size in memory.
const maxPooledBuf = 16 * 1024

var macers = sync.Pool{New: func() any { return &macer{digest: sha256.New(), buf: make([]byte, 0, 256)} }}

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

// sum returns HMAC-SHA256(secret, m.buf). The result lives in m: it is
// valid until the next sum or release.
func (m *macer) sum(secret string) []byte {
	d := m.digest
	m.key = [sha256.BlockSize]byte{}
	if len(secret) > sha256.BlockSize {
		// A long key is hashed first. Rare (Herald's secrets are shorter),
		// so the string conversion is allowed to allocate.
		d.Reset()
		d.Write([]byte(secret))
		d.Sum(m.key[:0])
	} else {
		copy(m.key[:], secret)
	}

	for i, k := range m.key {
		m.pad[i] = k ^ 0x36 // ipad
	}
	d.Reset()
	d.Write(m.pad[:])
	d.Write(m.buf)
	d.Sum(m.inner[:0])

	for i, k := range m.key {
		m.pad[i] = k ^ 0x5c // opad
	}
	d.Reset()
	d.Write(m.pad[:])
	d.Write(m.inner[:])
	return d.Sum(m.mac[:0])
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
