package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin/binding"
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
// limit bytes is errBodyTooLarge; a read error is returned as it is. The
// caller releases the body once the request is answered.
//
// The buffer grows as bytes arrive, never ahead of them: the declared
// Content-Length is not trusted to size it. These bodies are read before
// anything is authenticated (the Channels API needs them for body_md5), and
// sizing the buffer from the header let any client hold 256 KiB per
// connection by announcing a body and sending none: 1,000 idle connections
// held 277 MB. Now a connection holds what it sent, at most twice over
// (append's growth), or a pooled buffer (at most maxPooledBody).
func readBody(r io.Reader, limit int) (*requestBody, error) {
	b := requestBodies.Get().(*requestBody)
	buf := b.buf[:0]
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

// bodyReadError is the answer to a request body that could not be read: 413
// when it is longer than limit (errBodyTooLarge or http.MaxBytesReader's
// error), otherwise 400, which is also what a client that stops sending gets
// once the server's read timeout ends the read.
func bodyReadError(err error, limit int64) *Error {
	var tooLarge *http.MaxBytesError
	if errors.Is(err, errBodyTooLarge) || errors.As(err, &tooLarge) {
		return newError(http.StatusRequestEntityTooLarge, KindBodyTooLarge, "The request body is larger than %d bytes.", limit)
	}
	return badRequest(KindUnreadableBody, "The request body could not be read.")
}

// errTrailingData is decodeJSON's answer to a body that holds more than one
// JSON value: `{"name":"e"} garbage` or `{}{}`.
var errTrailingData = errors.New("the body holds something after its JSON value")

// strictJSON is gin's JSON binding with one difference: the body must be
// exactly one JSON value (whitespace around it allowed). gin's own binding
// decodes the first value with json.Decoder and ignores whatever follows, so
// `{"name":"e"} garbage` was accepted. NewEngine installs it as binding.JSON,
// which every generated strict handler decodes its body with
// (ShouldBindJSON), so every API refuses such bodies in one place; the
// trigger's fast decoder (decodeTriggerEvent) follows the same rule.
type strictJSON struct{}

var _ binding.BindingBody = strictJSON{}

// Name is the binding's name, as gin's JSON binding's.
func (strictJSON) Name() string { return "json" }

// Bind decodes the request's body into obj.
func (strictJSON) Bind(req *http.Request, obj any) error {
	if req == nil || req.Body == nil {
		return errors.New("invalid request")
	}
	return decodeJSON(req.Body, obj)
}

// BindBody decodes body into obj.
func (strictJSON) BindBody(body []byte, obj any) error {
	return decodeJSON(bytes.NewReader(body), obj)
}

// decodeJSON decodes the one JSON value r holds into obj, as gin's binding
// does (then its struct validator, when one is set), and fails with
// errTrailingData when anything but whitespace follows the value. An empty
// body is io.EOF, as before: the generated handlers of optional bodies rely
// on it.
func decodeJSON(r io.Reader, obj any) error {
	dec := json.NewDecoder(r)
	if err := dec.Decode(obj); err != nil {
		return err
	}
	// Token skips whitespace; anything else there, even a valid second
	// value, is not the single value the API takes. A failing read is
	// reported as it is.
	var syntaxErr *json.SyntaxError
	switch _, err := dec.Token(); {
	case err == nil, errors.As(err, &syntaxErr):
		return errTrailingData
	case !errors.Is(err, io.EOF):
		return err
	}
	if binding.Validator != nil {
		return binding.Validator.ValidateStruct(obj)
	}
	return nil
}
