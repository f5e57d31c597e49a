package upgrade

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// maxAnswerBytes bounds the body of an answer that is not an upgrade (an
// error body); the handlers here write a few hundred bytes at most.
const maxAnswerBytes = 64 << 10

// errAnswerTooLarge is returned by Write beyond maxAnswerBytes.
var errAnswerTooLarge = errors.New("upgrade: answer body over 64 KiB")

// responseWriter is the http.ResponseWriter of a request served here. An
// upgrade hijacks the connection; any other answer (a refusal) is collected
// and written, with Connection: close, once the handler returns.
type responseWriter struct {
	conn     net.Conn
	head     head
	header   http.Header
	status   int // 0 until WriteHeader
	body     []byte
	hijacked bool
}

func newResponseWriter(c net.Conn, h head) *responseWriter {
	return &responseWriter{conn: c, head: h, header: make(http.Header, 4)}
}

// Header implements http.ResponseWriter.
func (w *responseWriter) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter; the first status counts.
func (w *responseWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

// Write implements http.ResponseWriter.
func (w *responseWriter) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	w.WriteHeader(http.StatusOK)
	if len(w.body)+len(p) > maxAnswerBytes {
		return 0, errAnswerTooLarge
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// Flush implements http.Flusher: answers leave when the handler returns.
func (w *responseWriter) Flush() {}

// SetReadDeadline and SetWriteDeadline serve http.ResponseController.
func (w *responseWriter) SetReadDeadline(t time.Time) error  { return w.conn.SetReadDeadline(t) }
func (w *responseWriter) SetWriteDeadline(t time.Time) error { return w.conn.SetWriteDeadline(t) }

// HijackWithHead hands the connection over after a 101 (the WebSocket
// handshake) without writing the response head: the new owner sends head
// before its first bytes, so that both leave in one write. pending holds
// what the client sent after its request; it and head are valid until the
// handler returns.
func (w *responseWriter) HijackWithHead() (c net.Conn, pending, responseHead []byte, err error) {
	if w.hijacked {
		return nil, nil, nil, http.ErrHijacked
	}
	if w.status != http.StatusSwitchingProtocols {
		return nil, nil, nil, errors.New("upgrade: hijacking without a 101 response")
	}
	if err := w.conn.SetDeadline(time.Time{}); err != nil {
		return nil, nil, nil, err
	}
	w.hijacked = true
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	_ = w.header.Write(&b) // a bytes.Buffer does not fail
	b.WriteString("\r\n")
	return w.conn, w.head.rest, b.Bytes(), nil
}

// Hijack implements http.Hijacker for owners that do not take the head: it
// is written first.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, pending, responseHead, err := w.HijackWithHead()
	if err != nil {
		return nil, nil, err
	}
	if _, err := c.Write(responseHead); err != nil {
		c.Close()
		return nil, nil, err
	}
	// pending lives in a pooled buffer that outlives neither this request
	// nor the copy.
	r := io.MultiReader(bytes.NewReader(bytes.Clone(pending)), c)
	return c, bufio.NewReadWriter(bufio.NewReader(r), bufio.NewWriter(c)), nil
}

// finish writes the answer of a request that was not hijacked and closes
// the connection, then gives the head's buffer back.
func (w *responseWriter) finish(timeout time.Duration) {
	defer w.head.release()
	if w.hijacked {
		return
	}
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	h := w.header
	if len(w.body) > 0 && h.Get("Content-Type") == "" {
		h.Set("Content-Type", http.DetectContentType(w.body))
	}
	h.Set("Content-Length", strconv.Itoa(len(w.body)))
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("Connection", "close")
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	_ = h.Write(&b)
	b.WriteString("\r\n")
	b.Write(w.body)
	_ = w.conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := w.conn.Write(b.Bytes()); err == nil {
		// A FIN after the answer, so that the client reads it before the
		// connection goes.
		if cw, ok := w.conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
	w.conn.Close()
}

// abandon drops the connection of a request whose serving panicked, unless
// it was handed over already.
func (w *responseWriter) abandon() {
	defer w.head.release()
	if !w.hijacked {
		w.conn.Close()
	}
}
