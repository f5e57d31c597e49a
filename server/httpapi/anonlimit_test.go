package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/gen/device"
	"github.com/heraldrt/herald/gen/reporting"
	"github.com/heraldrt/herald/server/directory"
)

// anonEngine wires the Device and Reporting APIs behind limiter (nil: none),
// checking every answer against the APIs' specs.
func anonEngine(t *testing.T, limiter *AnonLimiter) *gin.Engine {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	db := openPushDB(t)
	dir, err := directory.NewInstances(context.Background(), db, log)
	if err != nil {
		t.Fatal(err)
	}
	spec, rspec := newSpecChecker(t, device.GetSpec), newSpecChecker(t, reporting.GetSpec)
	engine := NewEngine(log)
	engine.Use(func(c *gin.Context) {
		switch {
		case c.Request.Method == http.MethodOptions:
			c.Next()
		case strings.HasPrefix(c.Request.URL.Path, "/reporting_api/"):
			rspec.middleware(c)
		default:
			spec.middleware(c)
		}
	})
	Mount(engine, Routes{
		Device:    NewDeviceAPI(db, dir, log, DeviceOptions{LimitPerClient: limiter}),
		Reporting: NewReportingAPI(db, dir, log, ReportingOptions{LimitPerClient: limiter}),
	})
	return engine
}

// anonCall sends one request from the client address ip (no proxy headers,
// so gin's ClientIP is the connection's address whatever proxies it trusts).
func anonCall(t *testing.T, engine http.Handler, ip, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	return anonCallVia(t, engine, ip, "", method, path)
}

// anonCallVia is anonCall from the peer ip with the X-Forwarded-For header
// forwardedFor (none when empty), as a proxy sends it.
func anonCallVia(t *testing.T, engine http.Handler, ip, forwardedFor, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	var body string
	if method == http.MethodPost {
		body = `{"event":"delivery","publishId":"p","deviceId":"d","timestampSecs":1700000000}`
	}
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if forwardedFor != "" {
		req.Header.Set("X-Forwarded-For", forwardedFor)
	}
	req.RemoteAddr = ip + ":40000"
	if strings.Contains(ip, ":") {
		req.RemoteAddr = "[" + ip + "]:40000"
	}
	w := httptest.NewRecorder()
	engine.ServeHTTP(w, req)
	return w
}

func TestAnonRateLimit(t *testing.T) {
	const (
		vapid  = "/device_api/v1/instances/" + pushInstanceID + "/web-vapid-public-key"
		report = "/reporting_api/v2/instances/" + pushInstanceID + "/events"
		rate   = 2 // per second, so bursts of 4
	)
	limiter := NewAnonLimiter(rate)
	now := time.Unix(1_800_000_000, 0)
	limiter.now = func() time.Time { return now }
	engine := anonEngine(t, limiter)
	status := func(ip, method, path string) int { t.Helper(); return anonCall(t, engine, ip, method, path).Code }

	// The burst is twice the rate, over both APIs together.
	for i, path := range []string{vapid, report, vapid, report} {
		method := http.MethodGet
		if path == report {
			method = http.MethodPost
		}
		if got := status("192.0.2.1", method, path); got != 200 {
			t.Fatalf("request %d of the burst: %d", i+1, got)
		}
	}
	for _, tt := range []struct{ method, path string }{{http.MethodGet, vapid}, {http.MethodPost, report}} {
		w := anonCall(t, engine, "192.0.2.1", tt.method, tt.path)
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("429 body %q: %v", w.Body, err)
		}
		checkStatus(t, w.Code, body, 429, "rate_limited")
		if got := w.Header().Get("Retry-After"); got != "1" {
			t.Errorf("%s: Retry-After %q, want 1", tt.path, got)
		}
		if w.Header().Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("%s: a 429 without CORS headers, which a browser cannot read", tt.path)
		}
	}
	// A preflight is not counted, and not refused.
	if got := status("192.0.2.1", http.MethodOptions, vapid); got != http.StatusNoContent {
		t.Errorf("preflight over the limit: %d", got)
	}
	// Another address has its own budget.
	if got := status("192.0.2.2", http.MethodGet, vapid); got != 200 {
		t.Errorf("another address: %d", got)
	}
	// Half a second brings one token back, not a new burst.
	now = now.Add(500 * time.Millisecond)
	if got := status("192.0.2.1", http.MethodGet, vapid); got != 200 {
		t.Errorf("after 500 ms: %d", got)
	}
	if got := status("192.0.2.1", http.MethodGet, vapid); got != 429 {
		t.Errorf("second request after 500 ms: %d", got)
	}
	if s := limiter.Stats(); s.Refused != 3 || s.Tracked != 2 {
		t.Errorf("stats %+v, want 3 refused and 2 addresses", s)
	}

	// IPv6 addresses share the budget of their /64.
	for i := range 4 {
		if got := status(fmt.Sprintf("2001:db8::%x", i+1), http.MethodGet, vapid); got != 200 {
			t.Fatalf("IPv6 request %d: %d", i+1, got)
		}
	}
	if got := status("2001:db8::ff", http.MethodGet, vapid); got != 429 {
		t.Errorf("another address of the same /64: %d", got)
	}
	if got := status("2001:db8:0:1::1", http.MethodGet, vapid); got != 200 {
		t.Errorf("another /64: %d", got)
	}
	// An IPv4-mapped IPv6 address is the IPv4 address.
	if got := status("::ffff:192.0.2.1", http.MethodGet, vapid); got != 429 {
		t.Errorf("192.0.2.1 written as IPv6: %d", got)
	}
}

// Behind a trusted proxy the budget is the client's, as X-Forwarded-For
// names it, not the proxy's: two clients behind one proxy each have their
// own. From any other peer the header is ignored, so a client cannot buy a
// fresh budget by naming another address.
func TestAnonRateLimitBehindTrustedProxy(t *testing.T) {
	const (
		vapid  = "/device_api/v1/instances/" + pushInstanceID + "/web-vapid-public-key"
		report = "/reporting_api/v2/instances/" + pushInstanceID + "/events"
		proxy  = "192.0.2.10"
	)
	limiter := NewAnonLimiter(1) // bursts of 2
	limiter.now = func() time.Time { return time.Unix(1_800_000_000, 0) }
	engine := anonEngine(t, limiter)
	if err := engine.SetTrustedProxies([]string{proxy}); err != nil {
		t.Fatal(err)
	}
	status := func(peer, client, method, path string) int {
		t.Helper()
		return anonCallVia(t, engine, peer, client, method, path).Code
	}
	for _, client := range []string{"203.0.113.7", "203.0.113.8"} {
		if got := status(proxy, client, http.MethodGet, vapid); got != 200 {
			t.Fatalf("%s's first request: %d", client, got)
		}
		if got := status(proxy, client, http.MethodPost, report); got != 200 {
			t.Fatalf("%s's second request: %d", client, got)
		}
	}
	for _, client := range []string{"203.0.113.7", "203.0.113.8"} {
		if got := status(proxy, client, http.MethodGet, vapid); got != 429 {
			t.Errorf("%s's third request: %d, want 429", client, got)
		}
	}
	// The proxy's own requests (no header) have the proxy's budget.
	if got := status(proxy, "", http.MethodGet, vapid); got != 200 {
		t.Errorf("the proxy's own request: %d", got)
	}
	// An untrusted peer naming a fresh client is limited as itself.
	for i, want := range []int{200, 200, 429} {
		if got := status("198.51.100.5", fmt.Sprintf("203.0.113.%d", 20+i), http.MethodGet, vapid); got != want {
			t.Errorf("untrusted peer's request %d: %d, want %d", i+1, got, want)
		}
	}
	if s := limiter.Stats(); s.Refused != 3 || s.Tracked != 4 {
		t.Errorf("stats %+v, want 3 refused and 4 addresses", s)
	}
}

// 0 turns the limit off: a test rig or a trusted network sends as it likes.
func TestAnonRateLimitOff(t *testing.T) {
	limiter := NewAnonLimiter(0)
	if limiter != nil {
		t.Fatal("a limiter for 0 requests a second")
	}
	if s := limiter.Stats(); s != (AnonLimiterStats{}) {
		t.Errorf("stats of no limiter %+v", s)
	}
	engine := anonEngine(t, limiter)
	for i := range 300 {
		if got := anonCall(t, engine, "192.0.2.1", http.MethodGet, "/device_api/v1/instances/"+pushInstanceID+"/web-vapid-public-key").Code; got != 200 {
			t.Fatalf("request %d: %d", i+1, got)
		}
	}
}

// Retry-After is the wait for the next token, in whole seconds rounded up.
func TestAnonRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		rate  float64
		drain int
		want  string
	}{
		{50, 100, "1"},   // 20 ms
		{0.4, 1, "3"},    // 2.5 s
		{0.25, 1, "4"},   // 4 s
		{0.01, 1, "100"}, // 100 s
	} {
		t.Run(fmt.Sprint(tt.rate), func(t *testing.T) {
			limiter := NewAnonLimiter(tt.rate)
			now := time.Unix(1_800_000_000, 0)
			limiter.now = func() time.Time { return now }
			engine := anonEngine(t, limiter)
			path := "/device_api/v1/instances/" + pushInstanceID + "/web-vapid-public-key"
			for i := range tt.drain {
				if got := anonCall(t, engine, "192.0.2.1", http.MethodGet, path).Code; got != 200 {
					t.Fatalf("request %d: %d", i+1, got)
				}
			}
			w := anonCall(t, engine, "192.0.2.1", http.MethodGet, path)
			if w.Code != 429 || w.Header().Get("Retry-After") != tt.want {
				t.Fatalf("%d with Retry-After %q, want 429 with %s", w.Code, w.Header().Get("Retry-After"), tt.want)
			}
		})
	}
}
