package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
)

func TestReadBody(t *testing.T) {
	const limit = 1000
	tests := []struct {
		name    string
		body    string
		reader  func(io.Reader) io.Reader
		wantErr error
	}{
		{"OKEmpty", "", nil, nil},
		{"OKShort", "hello", nil, nil},
		{"OKLongerThanTheFirstBuffer", strings.Repeat("x", 700), nil, nil},
		{"OKAtLimit", strings.Repeat("x", limit), nil, nil},
		{"OKOneByteReads", strings.Repeat("ab", 300), iotest.OneByteReader, nil},
		{"OKDataWithEOF", strings.Repeat("ab", 300), iotest.DataErrReader, nil},
		{"ErrOverLimit", strings.Repeat("x", limit+1), nil, errBodyTooLarge},
		{"ErrFarOverLimit", strings.Repeat("x", 5*limit), nil, errBodyTooLarge},
		{"ErrOverLimitInHalfReads", strings.Repeat("x", limit+1), iotest.HalfReader, errBodyTooLarge},
		{"ErrRead", "partial", func(r io.Reader) io.Reader { return io.MultiReader(r, iotest.ErrReader(io.ErrClosedPipe)) }, io.ErrClosedPipe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(tt.body)
			if tt.reader != nil {
				r = tt.reader(r)
			}
			b, err := readBody(r, limit)
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

// stalledBody is the body of a client that announced a large body, sent
// the first bytes of it (sent of them) and stopped: each Read returns at most one byte until
// sent are gone, then the error of the server's read timeout. It records
// the most room a Read was given, which is the buffer the server holds for
// the request meanwhile.
type stalledBody struct {
	sent     int
	mostRoom int
}

func (b *stalledBody) Read(p []byte) (int, error) {
	b.mostRoom = max(b.mostRoom, len(p))
	if b.sent == 0 || len(p) == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	b.sent--
	p[0] = ' '
	return 1, nil
}

func (*stalledBody) Close() error { return nil }

// A request that announces a body of the largest size and sends little of
// it holds a buffer of what it sent, not of what it announced, in every
// body read ahead of authentication: the Channels API's (before the
// signature is checked) and the admin API's. Sizing the buffer from
// Content-Length let 1,000 such connections hold 277 MB.
func TestStalledBodyHoldsWhatArrivedNotWhatWasAnnounced(t *testing.T) {
	log := zap.NewNop()
	engine := NewEngine(log)
	Mount(engine, Routes{Channels: NewChannelsAPI(hub.New(log), testApps, log, ChannelsOptions{})})
	engine.POST("/admin-like", limitBody(MaxAdminBodyBytes), func(c *gin.Context) { c.Status(http.StatusNoContent) })
	for _, tt := range []struct {
		name, path string
		announced  int64
	}{
		{"Trigger", "/apps/1/events?auth_key=key1", MaxRequestBodyBytes},
		{"Batch", "/apps/1/batch_events?auth_key=key1", MaxRequestBodyBytes},
		{"Admin", "/admin-like", MaxAdminBodyBytes},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := &stalledBody{sent: 100}
			req := httptest.NewRequest(http.MethodPost, tt.path, nil)
			req.Body, req.ContentLength = body, tt.announced
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			engine.ServeHTTP(rec, req)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), KindUnreadableBody) {
				t.Fatalf("answered %d %s, want 400 %s", rec.Code, rec.Body, KindUnreadableBody)
			}
			// What the pool may hold already is the most a stalled
			// request may have been given.
			if body.mostRoom > maxPooledBody {
				t.Fatalf("a request that sent %d of the %d bytes it announced was given a buffer of %d bytes, want at most %d",
					100, tt.announced, body.mostRoom, maxPooledBody)
			}
		})
	}
}

func TestRequestBodyUnreadAndReuse(t *testing.T) {
	b, err := readBody(strings.NewReader("0123456789"), 100)
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
		b, err := readBody(strings.NewReader("ab"), 100)
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
