package upgrade

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// headBufferSize is the most of a request head read here. WebSocket
// handshakes from browsers and SDKs take a few hundred bytes to two KiB
// (cookies make the difference); a longer head goes to net/http, whose own
// limit (http.Server.MaxHeaderBytes) then applies.
const headBufferSize = 4096

var headBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, headBufferSize)
	return &b
}}

// parsers are the readers http.ReadRequest parses a complete head from.
// bufio.NewReader would allocate its 4 KiB buffer for every request.
var parsers = sync.Pool{New: func() any {
	p := &parser{}
	p.br = bufio.NewReaderSize(&p.src, headBufferSize)
	return p
}}

type parser struct {
	src bytes.Reader
	br  *bufio.Reader
}

// head is what readHead found at the start of a connection.
type head struct {
	deadline time.Time     // when the connection's head must be complete: HeaderTimeout from accept
	buf      *[]byte       // every byte read so far, from headBuffers
	req      *http.Request // the upgrade request to serve here; nil to hand the connection over
	rest     []byte        // bytes after the head (the client's first frames), within buf
}

// errHeadTooSlow is a head that did not come in HeaderTimeout; the
// connection is closed, as net/http does.
var errHeadTooSlow = errors.New("upgrade: no complete request head in time")

// readHead reads c's first request head, within opts.HeaderTimeout of
// accepted, and judges it. It reads no more than it must to tell: a head that cannot be an
// upgrade for here is given up on as soon as its first bytes show it, and is
// returned with req nil for net/http to read again. Either way the head's
// deadline stays set on c: a hand-over keeps it (replayConn), and an upgrade
// served here lifts it when it hijacks (HijackWithHead) or ends with its
// refusal. An error means the connection is done.
func readHead(c net.Conn, accepted time.Time, opts Options) (head, error) {
	h := head{deadline: accepted.Add(opts.HeaderTimeout), buf: headBuffers.Get().(*[]byte)}
	if err := c.SetReadDeadline(h.deadline); err != nil {
		return h, err
	}
	b := *h.buf
	for {
		n, err := c.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		*h.buf = b
		if n > 0 {
			if !hasPrefixSoFar(b, "GET ") || len(b) > 4 && !hasPrefixSoFar(b[4:], opts.PathPrefix) {
				return h, nil
			}
			if end := headEnd(b); end > 0 {
				h.req = parseUpgrade(b[:end], opts.PathPrefix, c)
				h.rest = b[end:]
				return h, nil
			}
			if len(b) == cap(b) {
				return h, nil // too long for here
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = errHeadTooSlow
			}
			return h, err
		}
	}
}

// release gives h's buffer back; nothing of it may be used after.
func (h *head) release() {
	if h.buf != nil {
		*h.buf = (*h.buf)[:0]
		headBuffers.Put(h.buf)
		h.buf = nil
	}
}

// hasPrefixSoFar reports whether b agrees with want as far as either goes.
func hasPrefixSoFar(b []byte, want string) bool {
	n := min(len(b), len(want))
	return string(b[:n]) == want[:n]
}

// headEnd is the length of the head at the start of b (through the empty
// line that ends it), or 0 while it is incomplete. Lines may end in a bare
// LF, which net/http accepts too.
func headEnd(b []byte) int {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		rest := b[i+1:]
		switch {
		case len(rest) >= 1 && rest[0] == '\n':
			return i + 2
		case len(rest) >= 2 && rest[0] == '\r' && rest[1] == '\n':
			return i + 3
		}
		j := bytes.IndexByte(rest, '\n')
		if j < 0 {
			return 0
		}
		i += 1 + j
	}
	return 0
}

// parseUpgrade parses a complete head with net/http's parser and returns the
// request when it is one to serve here: a GET over HTTP/1.1 with no body,
// Upgrade: websocket, a valid Host (the parser refuses two), and header
// names and values net/http accepts. Anything else, malformed or merely unusual, returns nil:
// net/http answers it, as it always has. The request is what net/http's
// server would hand a handler: the Host header moved to Host, RemoteAddr the
// peer's.
func parseUpgrade(raw []byte, prefix string, c net.Conn) *http.Request {
	p := parsers.Get().(*parser)
	p.src.Reset(raw)
	p.br.Reset(&p.src)
	req, err := http.ReadRequest(p.br) // it moves the Host header to req.Host
	p.src.Reset(nil)
	parsers.Put(p)
	if err != nil || !servedHere(req, prefix) {
		return nil
	}
	req.RemoteAddr = c.RemoteAddr().String()
	return req
}

// servedHere applies the tests of parseUpgrade to a parsed request.
func servedHere(req *http.Request, prefix string) bool {
	if req.Method != http.MethodGet || req.ProtoMajor != 1 || req.ProtoMinor != 1 ||
		len(req.URL.Path) < len(prefix) || req.URL.Path[:len(prefix)] != prefix ||
		req.ContentLength != 0 || len(req.TransferEncoding) != 0 ||
		!httpguts.HeaderValuesContainsToken(req.Header["Upgrade"], "websocket") {
		return false
	}
	if req.Host == "" || !httpguts.ValidHostHeader(req.Host) {
		return false
	}
	for name, values := range req.Header {
		if !httpguts.ValidHeaderFieldName(name) {
			return false
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}
