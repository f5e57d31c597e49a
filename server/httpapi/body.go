package httpapi

import (
	"errors"
	"io"
	"sync"
)

// requestBody is a request body read in full, ahead of the handlers, into a
// pooled buffer: authenticate needs the exact bytes for body_md5, the
// handlers then read the same bytes through it. It replaces io.ReadAll plus
// io.NopCloser(bytes.NewReader(...)), which cost three allocations and a
// fresh buffer per request on the signed trigger path.
type requestBody struct {
	buf []byte
	off int // how much Read has returned
}

// errBodyTooLarge is readBody's answer to a body longer than its limit.
var errBodyTooLarge = errors.New("request body too large")

// Pooled buffers start at 512 bytes (as io.ReadAll's) and are not kept above
// maxPooledBody, so a rare large batch does not pin its size in the pool.
const (
	initialBodyBuffer = 512
	maxPooledBody     = 64 * 1024
)

var requestBodies = sync.Pool{New: func() any { return &requestBody{buf: make([]byte, 0, initialBodyBuffer)} }}

// readBody reads r to its end into a pooled requestBody. A body of more than
// limit bytes is errBodyTooLarge; a read error is returned as it is. size is
// the declared Content-Length (-1 when unknown), used only to size the
// buffer. The caller releases the body once the request is answered.
func readBody(r io.Reader, size int64, limit int) (*requestBody, error) {
	b := requestBodies.Get().(*requestBody)
	buf := b.buf[:0]
	if size > 0 && size <= int64(limit) && int(size) >= cap(buf) {
		// One more byte than announced, so the read that sees EOF needs
		// no growth.
		buf = make([]byte, 0, size+1)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			b.buf = buf
			b.release()
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			b.buf = buf
			b.release()
			return nil, err
		}
	}
	b.buf, b.off = buf, 0
	return b, nil
}

// Read reads the body as an io.Reader.
func (b *requestBody) Read(p []byte) (int, error) {
	if b.off >= len(b.buf) {
		return 0, io.EOF
	}
	n := copy(p, b.buf[b.off:])
	b.off += n
	return n, nil
}

// Close does nothing: the buffer goes back to the pool with release.
func (b *requestBody) Close() error { return nil }

// bytes returns the whole body. It stays valid until release.
func (b *requestBody) bytes() []byte { return b.buf }

// unread returns the part of the body that Read has not returned yet, for a
// decoder that takes the bytes directly; it calls skipRest once it used them.
func (b *requestBody) unread() []byte { return b.buf[b.off:] }

// skipRest marks the whole body read.
func (b *requestBody) skipRest() { b.off = len(b.buf) }

// release returns b to the pool. Nothing may use b or its bytes afterwards:
// everything decoded from it must have been copied (encoding/json and
// decodeTriggerEvent copy every string they return).
func (b *requestBody) release() {
	if cap(b.buf) > maxPooledBody {
		b.buf = make([]byte, 0, initialBodyBuffer)
	}
	b.buf, b.off = b.buf[:0], 0
	requestBodies.Put(b)
}
