package ws

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
)

// parseSendBody takes a JSON array of strings and refuses the rest with
// the error that says why.
func TestParseSendBody(t *testing.T) {
	tests := []struct {
		body string
		want []string
		err  error
	}{
		{`[]`, []string{}, nil},
		{` ["{\"event\":\"pusher:ping\",\"data\":{}}"] `, []string{`{"event":"pusher:ping","data":{}}`}, nil},
		{`["a","\u2028\"\\"]`, []string{"a", "\u2028\"\\"}, nil},
		{``, nil, errSendEmpty},
		{" \n", nil, errSendEmpty},
		{"[\"\xff\"]", nil, errSendNotUTF8},
		{`null`, nil, errSendNotArray},
		{`{}`, nil, errSendNotArray},
		{`[1]`, nil, errSendNotArray},
		{`"a"`, nil, errSendNotArray},
		{`["x"`, nil, errSendNotArray},
	}
	for _, tt := range tests {
		got, err := parseSendBody([]byte(tt.body))
		if !errors.Is(err, tt.err) || !slices.Equal(got, tt.want) {
			t.Errorf("parseSendBody(%q) = %q, %v; want %q, %v", tt.body, got, err, tt.want, tt.err)
		}
	}
}

// parseSendBody never panics, and what it takes is UTF-8 that the frame
// appendMessages makes of it carries back unchanged, on one line.
func FuzzParseSendBody(f *testing.F) {
	for _, seed := range []string{
		`[]`, `["{\"event\":\"pusher:ping\",\"data\":{}}"]`, `["a","b"]`, `null`, `{}`, `[1]`, ``, ` `,
		"[\"\xff\"]", `["\u2028\"\\"]`, `[""]`, `["x"`, `[null]`, `["\n\u0000"]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msgs, err := parseSendBody(body)
		if err != nil {
			return
		}
		frames := make([][]byte, len(msgs))
		for i, m := range msgs {
			if !utf8.ValidString(m) {
				t.Fatalf("parseSendBody(%q) took %q, not UTF-8", body, m)
			}
			frames[i] = []byte(m)
		}
		line := appendMessages(nil, frames)
		if line[0] != 'a' || line[len(line)-1] != '\n' {
			t.Fatalf("frame %q is not a[...] ending its line", line)
		}
		var back []string
		if err := json.Unmarshal(line[1:len(line)-1], &back); err != nil {
			t.Fatalf("frame %q: %v", line, err)
		}
		if !slices.Equal(back, msgs) {
			t.Fatalf("messages %q came back as %q", msgs, back)
		}
		for _, b := range line[:len(line)-1] {
			if b == '\n' {
				t.Fatalf("frame %q holds a line end", line)
			}
		}
	})
}

// cancelOnWrite records an answer and cancels the request's context at the
// first byte written, so that a receiving request the fuzzer opens ends
// once it has answered instead of waiting for more.
type cancelOnWrite struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (w cancelOnWrite) Write(b []byte) (int, error) {
	defer w.cancel()
	return w.ResponseRecorder.Write(b)
}

// Any request to the HTTP fallback (method, path, query, a body announced
// by length, chunked or not at all) is answered without a panic and without
// a 5xx: refused with a 4xx and the error body, or served. A receiving
// request that announces a body is refused with 400 unexpected_body and
// Connection: close.
func FuzzFallbackRequest(f *testing.F) {
	for _, seed := range []struct {
		method      byte
		path, query string
		body        string
		announce    byte
	}{
		{0, "key1/123/abcdefgh/xhr_streaming", "protocol=7", "", 2},
		{0, "key1/123/abcdefgh/xhr", "protocol=7", "", 0},
		{0, "key1/123/abcdefgh/xhr", "protocol=7", "x", 0},
		{0, "key1/123/abcdefgh/xhr_streaming", "protocol=7", "", 1},
		{0, "key1/123/abcdefgh/xhr_send", "", `["{\"event\":\"pusher:ping\",\"data\":{}}"]`, 0},
		{0, "key1/123/../xhr", "protocol=7", "", 2},
		{0, "key1/123//xhr", "protocol=7", "", 2},
		{0, "off/1/s/xhr", "protocol=7", "", 2},
		{0, "nokey/1/s/xhr", "protocol=6", "", 2},
		{1, "key1/1/s/xhr", "", "", 2},
		{2, "key1/1/s/xhr", "", "", 2},
		{0, "key1/1/s/unknown", "", "", 2},
	} {
		f.Add(seed.method, seed.path, seed.query, []byte(seed.body), seed.announce)
	}
	handler := NewHandler(hub.New(zap.NewNop()), wsApps, zap.NewNop(), Options{})
	f.Fuzz(func(t *testing.T, method byte, path, query string, body []byte, announce byte) {
		methods := []string{http.MethodPost, http.MethodOptions, http.MethodGet, http.MethodPut}
		target := "/pusher/app/" + path
		u, err := url.Parse(target)
		if err != nil || strings.ContainsAny(path, "?#") {
			return // not a request line a client can send
		}
		u.RawQuery = url.PathEscape(query)
		// A poll on a session an earlier input opened waits for frames (up to
		// the 25 s heartbeat); the deadline only ends that wait, and what
		// is checked below holds whenever the request ends.
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, methods[int(method)%len(methods)], "/", bytes.NewReader(body))
		req.URL = u
		switch announce % 3 {
		case 0:
			req.ContentLength = int64(len(body))
		case 1:
			req.ContentLength, req.TransferEncoding = -1, []string{"chunked"}
		default:
			req.ContentLength, req.Body = 0, http.NoBody
		}
		rec := cancelOnWrite{httptest.NewRecorder(), cancel}
		handler.ServeFallback(rec, req, "192.0.2.1")

		status := rec.Code
		if status >= 500 {
			t.Fatalf("%s %s with %d body bytes: %d %q", req.Method, u, len(body), status, rec.Body)
		}
		if status >= 400 {
			var e struct{ Error, Description string }
			if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error == "" || e.Description == "" {
				t.Fatalf("%s %s: %d without the error body: %q", req.Method, u, status, rec.Body)
			}
		}
		_, _, transport, ok := fallbackPath(u.Path)
		receiving := ok && (transport == transportStreaming || transport == transportPolling)
		if req.Method == http.MethodPost && receiving && req.ContentLength != 0 &&
			(status != http.StatusBadRequest || !strings.Contains(rec.Body.String(), kindUnexpectedBody) || rec.Header().Get("Connection") != "close") {
			t.Fatalf("a receiving request announcing a body: %d %q %v, want 400 unexpected_body and Connection: close", status, rec.Body, rec.Header())
		}
	})
}
