package httpapi

import (
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// X-Forwarded-For and X-Real-IP name the client, in the access log and to
// c.ClientIP (the per-IP limits), only when the peer is a trusted proxy;
// NewEngine trusts none.
func TestClientIPTrustsOnlyNamedProxies(t *testing.T) {
	for _, tt := range []struct {
		name    string
		trusted []string // nil: NewEngine's default
		peer    string
		headers []string
		want    string
	}{
		{"DefaultIgnoresForwardedFor", nil, "192.0.2.10:4000", []string{"X-Forwarded-For", "203.0.113.7"}, "192.0.2.10"},
		{"DefaultIgnoresRealIP", nil, "192.0.2.10:4000", []string{"X-Real-IP", "203.0.113.7"}, "192.0.2.10"},
		{"DefaultIgnoresLoopbackPeer", nil, "127.0.0.1:4000", []string{"X-Forwarded-For", "203.0.113.7"}, "127.0.0.1"},
		{"TrustedProxy", []string{"192.0.2.10"}, "192.0.2.10:4000", []string{"X-Forwarded-For", "203.0.113.7"}, "203.0.113.7"},
		{"TrustedRange", []string{"192.0.2.0/24"}, "192.0.2.99:4000", []string{"X-Forwarded-For", "203.0.113.7"}, "203.0.113.7"},
		// A client's own X-Forwarded-For comes first; the address the
		// trusted proxy appended is the one believed.
		{"TrustedProxyAppends", []string{"192.0.2.10"}, "192.0.2.10:4000", []string{"X-Forwarded-For", "198.51.100.1, 203.0.113.7"}, "203.0.113.7"},
		{"UntrustedPeer", []string{"192.0.2.10"}, "198.51.100.5:4000", []string{"X-Forwarded-For", "203.0.113.7"}, "198.51.100.5"},
		{"TrustedWithoutHeader", []string{"192.0.2.10"}, "192.0.2.10:4000", nil, "192.0.2.10"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			engine := NewEngine(zap.New(core))
			if tt.trusted != nil {
				if err := engine.SetTrustedProxies(tt.trusted); err != nil {
					t.Fatal(err)
				}
			}
			var seen string
			engine.GET("/ip", func(c *gin.Context) { seen = c.ClientIP() })
			req := httptest.NewRequest("GET", "/ip", nil)
			req.RemoteAddr = tt.peer
			for i := 0; i+1 < len(tt.headers); i += 2 {
				req.Header.Set(tt.headers[i], tt.headers[i+1])
			}
			engine.ServeHTTP(httptest.NewRecorder(), req)
			if seen != tt.want {
				t.Errorf("ClientIP %q, want %q", seen, tt.want)
			}
			entries := logs.FilterMessage("request").All()
			if len(entries) != 1 || entries[0].ContextMap()["remote"] != tt.want {
				t.Errorf("access log %v, want remote %q", entries, tt.want)
			}
		})
	}
}
