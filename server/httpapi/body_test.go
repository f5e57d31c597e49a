package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
)

func TestReadBody(t *testing.T) {
	const limit = 1000
	tests := []struct {
		name    string
		body    string
		size    int64 // declared Content-Length
		reader  func(io.Reader) io.Reader
		wantErr error
	}{
		{"OKEmpty", "", 0, nil, nil},
		{"OKSizeKnown", "hello", 5, nil, nil},
		{"OKSizeUnknown", strings.Repeat("x", 700), -1, nil, nil},
		{"OKAtLimit", strings.Repeat("x", limit), limit, nil, nil},
		{"OKAtLimitSizeUnknown", strings.Repeat("x", limit), -1, nil, nil},
		{"OKOneByteReads", strings.Repeat("ab", 300), 600, iotest.OneByteReader, nil},
		{"OKDataWithEOF", strings.Repeat("ab", 300), 600, iotest.DataErrReader, nil},
		{"OKSizeUnderstated", strings.Repeat("x", 900), 10, nil, nil},
		{"OKSizeOverstated", "short", 900, nil, nil},
		{"ErrOverLimit", strings.Repeat("x", limit+1), limit + 1, nil, errBodyTooLarge},
		{"ErrOverLimitSizeUnknown", strings.Repeat("x", 5*limit), -1, nil, errBodyTooLarge},
		{"ErrOverLimitSizeUnderstated", strings.Repeat("x", limit+1), 10, iotest.HalfReader, errBodyTooLarge},
		{"ErrRead", "partial", 7, func(r io.Reader) io.Reader { return io.MultiReader(r, iotest.ErrReader(io.ErrClosedPipe)) }, io.ErrClosedPipe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(tt.body)
			if tt.reader != nil {
				r = tt.reader(r)
			}
			b, err := readBody(r, tt.size, limit)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || b != nil {
					t.Fatalf("got %v, %v; want error %v", b, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer b.release()
			if got := string(b.bytes()); got != tt.body {
				t.Fatalf("bytes: got %d bytes, want %d", len(got), len(tt.body))
			}
			read, err := io.ReadAll(b)
			if err != nil || string(read) != tt.body {
				t.Fatalf("Read: got %d bytes, %v", len(read), err)
			}
			if rest := b.unread(); len(rest) != 0 {
				t.Fatalf("unread after reading everything: %q", rest)
			}
		})
	}
}

func TestRequestBodyUnreadAndReuse(t *testing.T) {
	b, err := readBody(strings.NewReader("0123456789"), 10, 100)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4)
	if n, _ := b.Read(p); n != 4 || string(p) != "0123" {
		t.Fatalf("Read: %q", p[:n])
	}
	if rest := string(b.unread()); rest != "456789" {
		t.Fatalf("unread: %q", rest)
	}
	if n, _ := b.Read(p); n != 4 || string(p) != "4567" {
		t.Fatalf("Read after unread: %q", p[:n])
	}
	b.skipRest()
	if n, err := b.Read(p); n != 0 || err != io.EOF {
		t.Fatalf("Read after skipRest: %d, %v; want EOF", n, err)
	}
	b.release()
	// A body from the pool holds only its own request's bytes.
	for range 10 {
		b, err := readBody(strings.NewReader("ab"), -1, 100)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := io.ReadAll(b); !bytes.Equal(got, []byte("ab")) {
			t.Fatalf("reused body reads %q", got)
		}
		b.release()
	}
}

// A body that fails to decode is answered with a description naming what
// is wrong: the field and the type it needs, or the body's own type.
func TestDecodeErrorDescriptions(t *testing.T) {
	s := newPushServer(t)
	path := "/device_api/v1/instances/" + pushInstanceID + "/devices/fcm"
	for body, want := range map[string]string{
		`{"token":5}`: `Field "token" must be a string, not number.`,
		`["token"]`:   `The body must be a JSON object, not array.`,
	} {
		status, got, _ := s.do(t, pushRequest{method: "POST", path: path, body: body, contentType: "application/json"})
		checkStatus(t, status, got, 400, "invalid_request")
		if got["description"] != want {
			t.Errorf("%s: description %q, want %q", body, got["description"], want)
		}
	}
}

// A request whose body is empty (but not http.NoBody, as with chunked
// encoding) needs no content type.
func TestJSONBodyEmptyNeedsNoContentType(t *testing.T) {
	engine := NewEngine(zap.NewNop())
	engine.POST("/x", jsonBody(64), func(c *gin.Context) { c.Status(http.StatusNoContent) })
	req := httptest.NewRequest("POST", "/x", strings.NewReader(""))
	req.Body = io.NopCloser(strings.NewReader("")) // not http.NoBody
	rec := httptest.NewRecorder()
	engine.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Fatalf("status %d (%s), want 204", rec.Code, rec.Body)
	}
}

// A declared Content-Length beyond the limit does not size the buffer.
func TestReadBodyIgnoresDeclaredSizeOverLimit(t *testing.T) {
	b, err := readBody(strings.NewReader("{}"), 1<<50, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer b.release()
	if string(b.bytes()) != "{}" {
		t.Fatalf("read %q", b.bytes())
	}
}
