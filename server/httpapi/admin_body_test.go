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

// The admin API answers a body over its limit with 413, as the other APIs
// do, and one at the limit as usual; a body that cannot be read is a 400.
func TestAdminBodyLimit(t *testing.T) {
	s := newAdminServer(t)
	send := func(method, path string, body io.Reader) (int, []byte) {
		req, _ := http.NewRequest(method, s.url+path, body)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	padded := func(size int) string { // a JSON object of exactly size bytes
		const head, tail = `{"pad":"`, `"}`
		return head + strings.Repeat(" ", size-len(head)-len(tail)) + tail
	}
	for _, path := range []string{"POST /admin/v1/apps", "PATCH /admin/v1/apps/42", "POST /admin/v1/instances", "PATCH /admin/v1/instances/8b4d0c0a-5e3f-4c77-9c20-3e4f5a6b7c8d"} {
		method, p, _ := strings.Cut(path, " ")
		status, body := send(method, p, strings.NewReader(padded(MaxAdminBodyBytes+1)))
		if status != http.StatusRequestEntityTooLarge || errKind(body) != KindBodyTooLarge {
			t.Errorf("%s with %d bytes: %d %s, want 413 body_too_large", path, MaxAdminBodyBytes+1, status, body)
		}
	}
	if status, body := send("POST", "/admin/v1/apps", strings.NewReader(padded(MaxAdminBodyBytes))); status != http.StatusCreated {
		t.Errorf("a body of exactly %d bytes: %d %s, want 201", MaxAdminBodyBytes, status, body)
	}
	// A body of unknown length over the limit too.
	big := io.MultiReader(strings.NewReader(`{"pad":"`), bytes.NewReader(bytes.Repeat([]byte(" "), MaxAdminBodyBytes)), strings.NewReader(`"}`))
	if status, body := send("POST", "/admin/v1/apps", io.NopCloser(big)); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a chunked body over the limit: %d %s, want 413", status, body)
	}

	// Unreadable, as when the server's read timeout ends the read.
	engine := NewEngine(zap.NewNop())
	engine.POST("/x", limitBody(64), func(c *gin.Context) { c.Status(http.StatusNoContent) })
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/x", io.MultiReader(strings.NewReader("{"), iotest.ErrReader(errors.New("i/o timeout"))))
	engine.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || errKind(rec.Body.Bytes()) != KindUnreadableBody {
		t.Errorf("an unreadable body: %d %s, want 400 unreadable_body", rec.Code, rec.Body)
	}
}
