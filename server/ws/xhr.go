package ws

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/heraldrt/herald/server/hub"
)

// The HTTP fallback: pusher-js's xhr_streaming and xhr_polling transports,
// which it uses where a WebSocket cannot be opened. They speak the SockJS
// wire protocol under the client's httpPath (/pusher by default):
//
//	POST <httpPath>/app/<key>/<server>/<session>/xhr_streaming  receive, as a stream of lines
//	POST <httpPath>/app/<key>/<server>/<session>/xhr            receive, one answer a request
//	POST <httpPath>/app/<key>/<server>/<session>/xhr_send       send: a JSON array of strings
//
// pusher-js makes up <server>/<session> and opens the session with its first
// receiving request; every other one carries the same pair. The protocol
// over it is protocol 7, handled by the same peer as a WebSocket's.
//
// Written here rather than with a SockJS server library: the one for Go
// (igm/sockjs-go) mounts under a fixed prefix (the app key is in ours),
// buffers a session's messages without bound between requests and runs
// goroutines per session, where a session here must plug into the hub as
// its Writer so that the hub's bounded queue is the only buffer; and it
// ends a stream after 128 KiB, which pusher-js takes as a lost connection.
// The part pusher-js uses is small: four frame kinds and three endpoints.

// The transports of the fallback, as the last path segment names them.
const (
	transportStreaming = "xhr_streaming"
	transportPolling   = "xhr"
	transportSend      = "xhr_send"
)

// maxSessionIDPart bounds <server> and <session>: pusher-js sends at most 3
// digits and 8 characters.
const maxSessionIDPart = 64

// ServeFallback serves the HTTP fallback (POST, and OPTIONS for the CORS
// preflight browsers make before it) for the client at clientIP; the path
// ends in /app/<key>/<server>/<session>/<transport>. A request opening a
// session counts against Options.ConnectRateLimit, like a WebSocket upgrade.
func (s *Handler) ServeFallback(w http.ResponseWriter, r *http.Request, clientIP string) {
	h := w.Header()
	// Pusher has no origin policy (see upgrade); pusher-js sends no
	// credentials, so any origin may read the answers.
	h.Set("Access-Control-Allow-Origin", "*")
	if r.Method == http.MethodOptions {
		h.Set("Access-Control-Allow-Methods", "OPTIONS, POST")
		h.Set("Access-Control-Allow-Headers", "Content-Type")
		h.Set("Access-Control-Max-Age", "86400")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodPost {
		h.Set("Allow", "OPTIONS, POST")
		writeHTTPError(w, http.StatusMethodNotAllowed, kindMethodNotAllowed, r.Method+" is not allowed on the HTTP fallback; use POST.")
		return
	}
	key, id, transport, ok := fallbackPath(r.URL.Path)
	if !ok {
		writeHTTPError(w, http.StatusNotFound, kindNotFound, "No HTTP fallback endpoint at "+r.URL.Path+".")
		return
	}
	switch transport {
	case transportSend:
		s.xhrSend(w, r, id)
	case transportStreaming, transportPolling:
		s.xhrReceive(w, r, clientIP, key, id, transport == transportStreaming)
	default:
		writeHTTPError(w, http.StatusNotFound, kindNotFound, "Unknown HTTP fallback transport "+transport+": use xhr_streaming, xhr or xhr_send.")
	}
}

// fallbackPath splits …/app/<key>/<server>/<session>/<transport>; id is
// <key>/<server>/<session>.
func fallbackPath(path string) (key, id, transport string, ok bool) {
	i := strings.LastIndex(path, "/app/")
	if i < 0 {
		return "", "", "", false
	}
	parts := strings.Split(path[i+len("/app/"):], "/")
	if len(parts) != 4 || parts[0] == "" {
		return "", "", "", false
	}
	for _, p := range parts[1:3] {
		// SockJS forbids dots in them; the bound keeps the map's keys small.
		if p == "" || len(p) > maxSessionIDPart || strings.ContainsRune(p, '.') {
			return "", "", "", false
		}
	}
	return parts[0], parts[0] + "/" + parts[1] + "/" + parts[2], parts[3], true
}

// xhrSendLimit bounds an xhr_send body: one message of MaxMessageBytes as a
// JSON string, at worst every byte escaped as \u00XX, in its array.
func (s *Handler) xhrSendLimit() int64 { return 6*int64(s.opts.MaxMessageBytes) + 2 }

// xhrSend handles the client messages of an xhr_send request, in order,
// and answers 204; they are handled like a WebSocket's, one at a time per
// session.
func (s *Handler) xhrSend(w http.ResponseWriter, r *http.Request, id string) {
	x := s.xhrSession(id)
	if x == nil || x.ended() {
		writeHTTPError(w, http.StatusNotFound, kindNotFound, "No HTTP fallback session "+id+": open one with xhr_streaming or xhr.")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.xhrSendLimit()))
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			writeHTTPError(w, http.StatusRequestEntityTooLarge, kindBodyTooLarge, "The body is larger than "+itoa(int(s.xhrSendLimit()))+" bytes.")
		} else {
			writeHTTPError(w, http.StatusBadRequest, kindUnreadableBody, "The request body could not be read.")
		}
		return
	}
	msgs, err := parseSendBody(body)
	if err != nil {
		writeHTTPError(w, http.StatusBadRequest, kindInvalidBody, "Invalid xhr_send body: "+err.Error()+".")
		return
	}
	x.in.Lock()
	x.touch()
	for _, m := range msgs {
		if len(m) > s.opts.MaxMessageBytes {
			x.sendError(0, tooLargeMessage(s.opts.MaxMessageBytes))
			continue
		}
		if !x.handleSafely("HTTP fallback message", []byte(m)) {
			break
		}
	}
	x.in.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.WriteHeader(http.StatusNoContent)
}

// xhrReceive serves a receiving request: it opens the session when there is
// none, then attaches to it and answers with what waits. A stream stays
// until the client leaves, the session ends or Options.StreamLimitBytes have
// gone; a poll answers once there is something.
//
// A receiving request that announces a body is refused (400, Connection:
// close) before the server's deadlines are lifted: pusher-js sends none, and
// net/http would read a stalled one, with no deadline, before answering.
func (s *Handler) xhrReceive(w http.ResponseWriter, r *http.Request, clientIP, key, id string, streaming bool) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
		writeHTTPError(w, http.StatusBadRequest, kindUnexpectedBody, "A "+path.Base(r.URL.Path)+" request takes no body.")
		return
	}
	rc := http.NewResponseController(w)
	// The request lives on; each write has its own deadline (xhrWriter).
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "application/javascript; charset=UTF-8")
	h.Set("Cache-Control", "no-store, no-cache, no-transform, must-revalidate, max-age=0")
	h.Set("X-Accel-Buffering", "no") // nginx passes the stream on as it comes
	xw := &xhrWriter{w: w, rc: rc, timeout: s.opts.WriteTimeout}
	var out []byte
	if streaming {
		out = append(out, streamPrelude...)
	}
	x, recv, opened, refusal, err := s.attachOrOpen(w, r, clientIP, key, id)
	switch {
	case refusal != nil:
		s.stats.connRejected(refusal.Code)
		out = append(out, openFrame...)
		_ = xw.write(appendClose(out, *refusal))
		return
	case errors.Is(err, errReceiverBusy):
		_ = xw.write(append(out, anotherConnectionFrame...))
		return
	case x == nil || err != nil:
		return // answered already (429), the client left, or the session ended twice
	}
	defer x.detach(recv)
	if opened {
		out = append(out, openFrame...)
	}
	s.xhrServe(x, xw, r, out, streaming)
}

// attachOrOpen attaches the request to the session id: the one open, or a
// new one where there is none or it has ended (opened then reports that
// this request opened it, so its answer starts with the open frame). It
// tries twice: a session may end between the look-up and the attach, and
// then the next one is opened. A session that cannot be opened has x nil
// and refusal the close reason to send, or nil when the answer is written
// already (over the connect rate).
func (s *Handler) attachOrOpen(w http.ResponseWriter, r *http.Request, clientIP, key, id string) (x *xhrSession, recv *xhrReceiver, opened bool, refusal *hub.CloseReason, err error) {
	x = s.xhrSession(id)
	for range 2 {
		if x == nil || x.ended() {
			x, opened, refusal = s.openXHR(w, r, clientIP, key, id)
			if x == nil {
				return nil, nil, false, refusal, nil
			}
		}
		recv, err = x.attach(r.Context())
		if !errors.Is(err, errSessionEnded) {
			break
		}
	}
	return x, recv, opened, nil, err
}

// xhrServe writes to the attached receiver what the session takes, after
// what buf holds: frames as they come and heartbeats between them on a
// stream, the first non-empty answer on a poll.
func (s *Handler) xhrServe(x *xhrSession, xw *xhrWriter, r *http.Request, buf []byte, streaming bool) {
	heartbeat := time.NewTimer(s.opts.HeartbeatInterval)
	defer heartbeat.Stop()
	for {
		out, reason := x.take(buf)
		if len(out) > 0 {
			if err := xw.write(out); err != nil {
				return // the client comes back, or the session expires
			}
		}
		if reason != nil {
			x.finish() // the client has the close frame, or there is nobody to tell
			return
		}
		if !streaming && len(out) > 0 || streaming && xw.sent >= int64(s.opts.StreamLimitBytes) {
			return
		}
		buf = out[:0]
		if cap(buf) > 64<<10 {
			buf = nil // a burst's buffer is not kept for the session's life
		}
		if len(out) > 0 {
			// The writer's part is still held: what was queued since went
			// without a Wake, and is taken now.
			continue
		}
		select {
		case <-x.wake:
			if x.ended() {
				return
			}
		case <-heartbeat.C:
			if err := xw.write(heartbeatFrame); err != nil || !streaming {
				return
			}
			heartbeat.Reset(s.opts.HeartbeatInterval)
		case <-r.Context().Done():
			return
		}
	}
}

// openXHR opens the session id of the app whose key is key, or answers why
// not: refusal is the close reason to send, or nil when the answer is
// written already (over the connect rate). Another request that opened id
// first wins, and its session is returned, with opened false.
func (s *Handler) openXHR(w http.ResponseWriter, r *http.Request, clientIP, key, id string) (x *xhrSession, opened bool, refusal *hub.CloseReason) {
	if !s.allowConnect(w, clientIP) {
		return nil, false, nil
	}
	x = newXHRSession(s, id)
	app, refusal := s.admit(r, key, &x.peer, x)
	if refusal != nil {
		return nil, false, refusal
	}
	// Started before others can reach it: finish, from any request, stops
	// the timers start sets.
	x.start(app)
	switch got := s.addXHR(x); {
	case got == nil:
		x.leave()
		return nil, false, &hub.CloseShuttingDown
	case got != x:
		x.leave()
		return got, false, nil
	}
	s.stats.connOpened()
	s.stats.httpSessionOpened()
	x.mu.Lock()
	x.armLocked() // finished unless a receiver attaches in time
	x.mu.Unlock()
	return x, true, nil
}

// xhrWriter writes a receiving request's answer, each write flushed and
// bounded by the write timeout: a client that stops reading is dropped
// like a WebSocket's.
type xhrWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	sent    int64
}

func (xw *xhrWriter) write(b []byte) error {
	_ = xw.rc.SetWriteDeadline(time.Now().Add(xw.timeout))
	n, err := xw.w.Write(b)
	xw.sent += int64(n)
	if err == nil {
		err = xw.rc.Flush()
	}
	return err
}

// xhrSession is the open session id, or nil.
func (s *Handler) xhrSession(id string) *xhrSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.xhr[id]
}

// addXHR registers x, unless a session of its id that has not ended is
// there already (that one is returned) or the fallback is shutting down
// (nil). One that has ended is replaced: it is finishing, and leaves the map
// only once it is done (removeXHR then leaves x in place), while the
// client's next receiving request must open x at once.
func (s *Handler) addXHR(x *xhrSession) *xhrSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.xhrClosing {
		return nil
	}
	if got := s.xhr[x.id]; got != nil && !got.ended() { // lock order: s.mu, then x.mu
		return got
	}
	s.xhr[x.id] = x
	s.wg.Add(1)
	return x
}

func (s *Handler) removeXHR(x *xhrSession) {
	s.mu.Lock()
	if s.xhr[x.id] == x {
		delete(s.xhr, x.id)
	}
	if len(s.xhr) == 0 && s.xhrGone != nil {
		close(s.xhrGone) // CloseHTTPSessions waits for it
		s.xhrGone = nil
	}
	s.mu.Unlock()
	s.wg.Done()
}

// HTTPSessions is the number of open HTTP fallback sessions.
func (s *Handler) HTTPSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.xhr)
}

// CloseHTTPSessions closes every HTTP fallback session with 4200 (reconnect),
// refuses new ones, and waits until the clients have taken the close frame
// (until shutdownGrace or ctx ends). Run it before an HTTP server's
// graceful shutdown: that waits for the streams in flight, which end once
// they carry the close frame, and it closes the listener, which a poller
// between two polls needs to come back for its close frame.
func (s *Handler) CloseHTTPSessions(ctx context.Context) {
	s.mu.Lock()
	s.closeHTTPSessionsLocked()
	if len(s.xhr) > 0 && s.xhrGone == nil {
		s.xhrGone = make(chan struct{})
	}
	gone := s.xhrGone
	s.mu.Unlock()
	if gone == nil {
		return
	}
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	select {
	case <-gone:
	case <-grace.C:
	case <-ctx.Done():
	}
}

// closeHTTPSessionsLocked closes every HTTP fallback session with 4200 and
// refuses new ones. The caller holds mu.
func (s *Handler) closeHTTPSessionsLocked() {
	s.xhrClosing = true
	for _, x := range s.xhr {
		x.conn.Close(hub.CloseShuttingDown)
	}
}
