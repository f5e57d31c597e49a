package upgrade

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// An answer written here (a refused upgrade's) holds at most maxAnswerBytes,
// in one write or several.
func TestAnswerBodyIsBounded(t *testing.T) {
	w := newResponseWriter(pipeConn(t), head{})
	if n, err := w.Write(make([]byte, maxAnswerBytes)); n != maxAnswerBytes || err != nil {
		t.Fatalf("a body of exactly the limit: %d, %v", n, err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, errAnswerTooLarge) {
		t.Fatalf("one byte past the limit: %v, want errAnswerTooLarge", err)
	}
	w = newResponseWriter(pipeConn(t), head{})
	if _, err := w.Write(make([]byte, maxAnswerBytes+1)); !errors.Is(err, errAnswerTooLarge) {
		t.Fatalf("a body over the limit in one write: %v, want errAnswerTooLarge", err)
	}
}

// finish's answer has a Content-Type only with a body: the handler's own if
// it set one, else the one sniffed from the body.
func TestAnswerContentType(t *testing.T) {
	for _, tc := range []struct {
		name, set, body, want string
	}{
		{"no body", "", "", ""},
		{"set by the handler", "application/json", "{}", "application/json"},
		{"sniffed", "", "slow down", "text/plain; charset=utf-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, client := net.Pipe()
			t.Cleanup(func() { client.Close() })
			w := newResponseWriter(server, head{})
			if tc.set != "" {
				w.Header().Set("Content-Type", tc.set)
			}
			w.WriteHeader(http.StatusTooManyRequests)
			if tc.body != "" {
				if _, err := w.Write([]byte(tc.body)); err != nil {
					t.Fatal(err)
				}
			}
			go w.finish(time.Minute)
			resp, err := http.ReadResponse(bufio.NewReader(client), nil)
			if err != nil {
				t.Fatal(err)
			}
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			if resp.StatusCode != http.StatusTooManyRequests || body.String() != tc.body || resp.Header.Get("Content-Type") != tc.want {
				t.Fatalf("answer %d %v %q, want 429 with Content-Type %q and body %q", resp.StatusCode, resp.Header, body.String(), tc.want, tc.body)
			}
		})
	}
}
