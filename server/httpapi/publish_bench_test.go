package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/internal/clientrate"
)

// BenchmarkPublishToInterests measures publishes to interests through the
// gin engine in process (secret key, rate limit and body checks, JSON
// decoding, validation and parsing of the three gateway payloads, one
// SQLite write transaction with the quota count, the response), with a
// payload for every gateway.
func BenchmarkPublishToInterests(b *testing.B) {
	engine, api := newPublishEngine(b, openPushDB(b), zap.NewNop(), nil, nil)
	api.limiter = clientrate.New(1<<30, 1<<30)
	target := "/publish_api/v1/instances/" + pushInstanceID + "/publishes/interests"
	body := []byte(`{"interests":["news","sports"],` +
		`"apns":{"aps":{"alert":{"title":"Hi","body":"A benchmark"},"badge":1},"data":{"k":"v"}},` +
		`"fcm":{"notification":{"title":"Hi","body":"A benchmark"},"data":{"k":"v"}},` +
		`"web":{"notification":{"title":"Hi","body":"A benchmark","deep_link":"https://example.com/"},"data":{"k":"v"}}}`)
	rec := &discardWriter{header: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", target, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+pushSecret)
		rec.status = 0
		engine.ServeHTTP(rec, req)
		if rec.status != http.StatusOK {
			b.Fatalf("status %d", rec.status)
		}
	}
}
