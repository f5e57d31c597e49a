package push

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/heraldrt/herald/server/netguard"
	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/storage"
)

func mustPrepare(t *testing.T, apns, fcm, web string) *Prepared {
	t.Helper()
	var a, f, w json.RawMessage
	if apns != "" {
		a = json.RawMessage(apns)
	}
	if fcm != "" {
		f = json.RawMessage(fcm)
	}
	if web != "" {
		w = json.RawMessage(web)
	}
	p, err := ParsePayload(a, f, w)
	if err != nil {
		t.Fatal(err)
	}
	prep, err := Prepare("inst-1", "pubid-1", "", p)
	if err != nil {
		t.Fatal(err)
	}
	return prep
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return m
}

func wantMeta(t *testing.T, got any, displayable, hasData bool) {
	t.Helper()
	want := map[string]any{"instanceId": "inst-1", "publishId": "pubid-1", "hasDisplayableContent": displayable, "hasData": hasData}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("data.pusher %v, want %v", got, want)
	}
}

// A publish to users names the user in data.pusher on every platform.
func TestPrepareUserID(t *testing.T) {
	p, err := ParsePayload(json.RawMessage(`{"aps":{"alert":"hi"}}`), json.RawMessage(`{"data":{"a":"b"}}`), json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	prep, err := Prepare("inst-1", "pubid-1", "alice", p)
	if err != nil {
		t.Fatal(err)
	}
	want := func(platform string, got any, displayable, hasData bool) {
		t.Helper()
		w := map[string]any{"instanceId": "inst-1", "publishId": "pubid-1", "hasDisplayableContent": displayable, "hasData": hasData, "userId": "alice"}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s data.pusher %v, want %v", platform, got, w)
		}
	}
	want("apns", decode(t, prep.APNsBody)["data"].(map[string]any)["pusher"], true, false)
	want("web", decode(t, prep.WebBody)["data"].(map[string]any)["pusher"], false, false)
	var fm struct {
		Message struct{ Data map[string]string }
	}
	if err := json.Unmarshal(prep.FCMRequest("t"), &fm); err != nil {
		t.Fatal(err)
	}
	want("fcm", decode(t, []byte(fm.Message.Data["pusher"])), false, true)
	// A publish to interests (no user) leaves userId out.
	for _, b := range [][]byte{mustPrepare(t, `{"aps":{"alert":"hi"}}`, `{"data":{"a":"b"}}`, `{}`).APNsBody,
		mustPrepare(t, "", `{"data":{"a":"b"}}`, "").FCMRequest("t"), mustPrepare(t, "", "", `{}`).WebBody} {
		if strings.Contains(string(b), "userId") {
			t.Errorf("payload without a user names one: %s", b)
		}
	}
}

func TestPrepareAPNs(t *testing.T) {
	p := mustPrepare(t, `{"aps":{"alert":{"title":"T","body":"B"},"badge":3},"data":{"k":"v","n":1},"custom":[1,2],
		"headers":{"apns-collapse-id":"c1","apns-expiration":"1700000000"}}`, "", "")
	body := decode(t, p.APNsBody)
	if _, ok := body["headers"]; ok {
		t.Fatal("headers is sent in the APNs body")
	}
	if fmt.Sprint(body["custom"]) != "[1 2]" || fmt.Sprint(body["aps"]) != "map[alert:map[body:B title:T] badge:3]" {
		t.Fatalf("body %s", p.APNsBody)
	}
	data := body["data"].(map[string]any)
	if data["k"] != "v" || data["n"] != float64(1) {
		t.Fatalf("data %v", data)
	}
	wantMeta(t, data["pusher"], true, true)
	if a := p.APNs; a.PushType != "alert" || a.Priority != "10" || a.CollapseID != "c1" || a.Expiration != "1700000000" {
		t.Fatalf("headers %+v", a)
	}

	// Only content-available: a background push at priority 5, without data.
	bg := mustPrepare(t, `{"aps":{"content-available":1}}`, "", "")
	if bg.APNs.PushType != "background" || bg.APNs.Priority != "5" {
		t.Fatalf("background headers %+v", bg.APNs)
	}
	wantMeta(t, decode(t, bg.APNsBody)["data"].(map[string]any)["pusher"], false, false)

	// Explicit headers win.
	ex := mustPrepare(t, `{"aps":{"content-available":1},"headers":{"apns-push-type":"voip","apns-priority":"10"}}`, "", "")
	if ex.APNs.PushType != "voip" || ex.APNs.Priority != "10" {
		t.Fatalf("explicit headers %+v", ex.APNs)
	}
}

func TestPrepareFCM(t *testing.T) {
	p := mustPrepare(t, "", `{"notification":{"title":"T","body":"B","android_channel_id":"ch","icon":"ic","unknown":"x"},
		"data":{"s":"str","n":1.5,"b":true,"o":{"x":[1]},"pusher":"spoofed"},"time_to_live":3600,"priority":"high","collapse_key":"ck"}`, "")
	var req struct {
		Message struct {
			Token   string            `json:"token"`
			Data    map[string]string `json:"data"` // v1 requires string values
			Android map[string]any    `json:"android"`
		} `json:"message"`
	}
	raw := p.FCMRequest(`tok"en`)
	if err := json.Unmarshal(raw, &req); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	m := req.Message
	if m.Token != `tok"en` {
		t.Fatalf("token %q", m.Token)
	}
	if m.Data["s"] != "str" || m.Data["n"] != "1.5" || m.Data["b"] != "true" || m.Data["o"] != `{"x":[1]}` {
		t.Fatalf("data %v", m.Data)
	}
	var meta map[string]any
	if err := json.Unmarshal([]byte(m.Data["pusher"]), &meta); err != nil {
		t.Fatalf("data.pusher %q is not a JSON string of the metadata", m.Data["pusher"])
	}
	wantMeta(t, meta, true, true)
	n := m.Android["notification"].(map[string]any)
	if n["title"] != "T" || n["body"] != "B" || n["channel_id"] != "ch" || n["icon"] != "ic" || n["unknown"] != nil {
		t.Fatalf("android.notification %v", n)
	}
	if m.Android["ttl"] != "3600s" || m.Android["priority"] != "HIGH" || m.Android["collapse_key"] != "ck" {
		t.Fatalf("android %v", m.Android)
	}
	if strings.Contains(string(raw), "time_to_live") || strings.Contains(string(raw), `"priority":"high"`) {
		t.Fatalf("legacy fields leaked into the v1 message: %s", raw)
	}

	// Data only: no android block, hasDisplayableContent false.
	d := mustPrepare(t, "", `{"data":{"a":"b"}}`, "")
	var dm map[string]map[string]any
	_ = json.Unmarshal(d.FCMRequest("t"), &dm)
	if _, ok := dm["message"]["android"]; ok {
		t.Fatalf("android block without android fields: %s", d.FCMRequest("t"))
	}
	var dmeta map[string]any
	_ = json.Unmarshal([]byte(dm["message"]["data"].(map[string]any)["pusher"].(string)), &dmeta)
	wantMeta(t, dmeta, false, true)

	// ttl 0 is sent, normal priority is NORMAL.
	z := mustPrepare(t, "", `{"time_to_live":0,"priority":"normal"}`, "")
	if s := string(z.FCMRequest("t")); !strings.Contains(s, `"ttl":"0s"`) || !strings.Contains(s, `"priority":"NORMAL"`) {
		t.Fatalf("ttl 0: %s", s)
	}
}

func TestPrepareWeb(t *testing.T) {
	p := mustPrepare(t, "", "", `{"notification":{"title":"T","deep_link":"https://x.example"},"data":{"k":[1]},"time_to_live":90}`)
	m := decode(t, p.WebBody)
	if n := m["notification"].(map[string]any); n["title"] != "T" || n["deep_link"] != "https://x.example" {
		t.Fatalf("notification %v", n)
	}
	data := m["data"].(map[string]any)
	if fmt.Sprint(data["k"]) != "[1]" {
		t.Fatalf("data %v", data)
	}
	wantMeta(t, data["pusher"], true, true)
	if p.Web.TTLSeconds != 90 {
		t.Fatalf("ttl %d", p.Web.TTLSeconds)
	}
	d := mustPrepare(t, "", "", `{}`)
	if d.Web.TTLSeconds != DefaultWebTTL {
		t.Fatalf("default ttl %d", d.Web.TTLSeconds)
	}
	dm := decode(t, d.WebBody)
	if _, ok := dm["notification"]; ok {
		t.Fatalf("notification without one: %s", d.WebBody)
	}
	wantMeta(t, dm["data"].(map[string]any)["pusher"], false, false)
}

func TestParsePayloadErrors(t *testing.T) {
	for _, tc := range []struct{ apns, fcm, web, field string }{
		{"", "", "", "apns, fcm, web"},
		{"null", "null", "null", "apns, fcm, web"},
		{`[]`, "", "", "apns"},
		{`{"aps":1}`, "", "", "apns.aps"},
		{`{"headers":{"apns-priority":"3"}}`, "", "", "apns.headers.apns-priority"},
		{`{"headers":{"apns-collapse-id":"` + strings.Repeat("c", 65) + `"}}`, "", "", "apns.headers.apns-collapse-id"},
		{"", `{"notification":{"title":1}}`, "", "fcm.notification.title"},
		{"", `{"notification":{"body_loc_args":"x"}}`, "", "fcm.notification.body_loc_args"},
		{"", `{"time_to_live":2419201}`, "", "fcm.time_to_live"},
		{"", `{"priority":"max"}`, "", "fcm.priority"},
		{"", `{"data":[1]}`, "", "fcm.data"},
		{"", "", `{"notification":{"icon":false}}`, "web.notification.icon"},
		{"", "", `{"time_to_live":1.5}`, "web.time_to_live"},
	} {
		var a, f, w json.RawMessage
		if tc.apns != "" {
			a = json.RawMessage(tc.apns)
		}
		if tc.fcm != "" {
			f = json.RawMessage(tc.fcm)
		}
		if tc.web != "" {
			w = json.RawMessage(tc.web)
		}
		_, err := ParsePayload(a, f, w)
		pe, ok := err.(*PayloadError)
		if !ok || pe.Field != tc.field {
			t.Errorf("%s %s %s: %v, want a PayloadError on %s", tc.apns, tc.fcm, tc.web, err, tc.field)
		}
		// Callers tell a missing payload from an invalid one by the sentinel.
		if missing := tc.field == "apns, fcm, web"; errors.Is(err, ErrNoPayload) != missing {
			t.Errorf("%s %s %s: errors.Is(%v, ErrNoPayload) is %v", tc.apns, tc.fcm, tc.web, err, !missing)
		}
	}
}

func TestRetryAfterAndBackoff(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0}, {"0", 0}, {"17", 17 * time.Second}, {"-3", 0}, {"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		if got := retryAfter(tc.v, now); got != tc.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tc.v, got, tc.want)
		}
	}
	d := &Dispatcher{opts: Options{BaseBackoff: time.Second, MaxBackoff: time.Minute}.WithDefaults()}
	for _, tc := range []struct {
		attempts int
		after    time.Duration
		want     time.Duration
	}{
		{0, 0, time.Second}, {1, 0, 2 * time.Second}, {3, 0, 8 * time.Second}, {10, 0, time.Minute}, {60, 0, time.Minute},
		{0, 30 * time.Second, 30 * time.Second}, // Retry-After beyond the backoff wins
		{4, 3 * time.Second, 16 * time.Second},  // the backoff beyond Retry-After wins
		{2, 10 * time.Minute, 10 * time.Minute}, // even beyond the cap: the gateway said so
	} {
		if got := d.backoff(tc.attempts, tc.after); got != tc.want {
			t.Errorf("backoff(%d, %v) = %v, want %v", tc.attempts, tc.after, got, tc.want)
		}
	}
	for _, tc := range []struct {
		status int
		want   storage.DeliveryOutcome
	}{{200, storage.DeliverySent}, {201, storage.DeliverySent}, {429, storage.DeliveryRetry}, {500, storage.DeliveryRetry},
		{503, storage.DeliveryRetry}, {400, storage.DeliveryFailed}, {403, storage.DeliveryFailed}, {413, storage.DeliveryFailed}} {
		if r := classifyStatus(tc.status, "x", time.Second); r.Outcome != tc.want {
			t.Errorf("classifyStatus(%d) = %v, want %v", tc.status, r.Outcome, tc.want)
		}
	}
}

// gateway is a scripted HTTP/2 TLS gateway: answer decides each response.
type gateway struct {
	srv      *httptest.Server
	ca       string
	mu       sync.Mutex
	requests []*http.Request
	answer   func(n int, r *http.Request, w http.ResponseWriter)
}

func newGateway(t *testing.T, tls bool, answer func(n int, r *http.Request, w http.ResponseWriter)) *gateway {
	g := &gateway{answer: answer}
	g.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		g.mu.Lock()
		g.requests = append(g.requests, r.Clone(context.Background()))
		n := len(g.requests)
		g.mu.Unlock()
		g.answer(n, r, w)
	}))
	if tls {
		g.srv.EnableHTTP2 = true
		g.srv.StartTLS()
		g.ca = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.srv.Certificate().Raw}))
	} else {
		g.srv.Start()
	}
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gateway) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.requests)
}

func (g *gateway) request(i int) *http.Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.requests[i]
}

func newAPNsSender(t *testing.T, g *gateway) *APNs {
	t.Helper()
	key, _, err := pushtest.NewAPNsKey()
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAPNs(storage.APNsConfig{KeyPEM: key, KeyID: "K1", TeamID: "T1", URL: g.srv.URL, CAPEM: g.ca, Topic: "com.example.fallback"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func apnsReason(w http.ResponseWriter, status int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"reason":%q}`, reason)
}

func TestAPNsExpiredProviderTokenRefresh(t *testing.T) {
	g := newGateway(t, true, func(n int, r *http.Request, w http.ResponseWriter) {
		if n == 1 {
			apnsReason(w, http.StatusForbidden, "ExpiredProviderToken")
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	a := newAPNsSender(t, g)
	p := mustPrepare(t, `{"aps":{"alert":"hi"},"headers":{"apns-collapse-id":"c","apns-expiration":"0"}}`, "", "")
	res := a.Send(context.Background(), storage.Delivery{Token: "abcd", BundleIdentifier: "com.example.app"}, p)
	if res.Outcome != storage.DeliverySent || g.count() != 2 {
		t.Fatalf("result %+v after %d requests", res, g.count())
	}
	first, second := g.request(0), g.request(1)
	if first.Header.Get("authorization") == second.Header.Get("authorization") {
		t.Fatal("the refused provider token was sent again")
	}
	if second.ProtoMajor != 2 || second.URL.Path != "/3/device/abcd" || second.Header.Get("apns-topic") != "com.example.app" ||
		second.Header.Get("apns-push-type") != "alert" || second.Header.Get("apns-priority") != "10" ||
		second.Header.Get("apns-collapse-id") != "c" || second.Header.Get("apns-expiration") != "0" {
		t.Fatalf("request %s %s %v", second.Proto, second.URL.Path, second.Header)
	}
	// The new token is reused by the next send; no device bundle id: the instance topic.
	res = a.Send(context.Background(), storage.Delivery{Token: "ef01"}, p)
	if res.Outcome != storage.DeliverySent || g.request(2).Header.Get("authorization") != second.Header.Get("authorization") ||
		g.request(2).Header.Get("apns-topic") != "com.example.fallback" {
		t.Fatalf("third send %+v %v", res, g.request(2).Header)
	}

	// A token refused twice is not retried in a loop: one refresh, then a retry later.
	always := newGateway(t, true, func(_ int, _ *http.Request, w http.ResponseWriter) {
		apnsReason(w, http.StatusForbidden, "ExpiredProviderToken")
	})
	res = newAPNsSender(t, always).Send(context.Background(), storage.Delivery{Token: "abcd", BundleIdentifier: "b"}, p)
	if res.Outcome != storage.DeliveryRetry || always.count() != 2 {
		t.Fatalf("always expired: %+v after %d requests", res, always.count())
	}
}

func TestAPNsProviderTokenLifetime(t *testing.T) {
	g := newGateway(t, true, func(int, *http.Request, http.ResponseWriter) {})
	a := newAPNsSender(t, g)
	now := time.Unix(1_800_000_000, 0)
	a.now = func() time.Time { return now }
	t1, _ := a.providerToken("")
	now = now.Add(APNsTokenLifetime - time.Second)
	if t2, _ := a.providerToken(""); t2 != t1 {
		t.Fatal("token renewed before its lifetime")
	}
	now = now.Add(2 * time.Second)
	if t3, _ := a.providerToken(""); t3 == t1 {
		t.Fatal("token not renewed after its lifetime")
	}
}

func TestAPNsOutcomes(t *testing.T) {
	for _, tc := range []struct {
		status     int
		reason     string
		retryAfter string
		want       storage.DeliveryOutcome
		after      time.Duration
	}{
		{410, "Unregistered", "", storage.DeliveryDeadToken, 0},
		{410, "ExpiredToken", "", storage.DeliveryDeadToken, 0},
		{400, "BadDeviceToken", "", storage.DeliveryDeadToken, 0},
		{400, "BadTopic", "", storage.DeliveryFailed, 0},
		{413, "PayloadTooLarge", "", storage.DeliveryFailed, 0},
		{429, "TooManyRequests", "12", storage.DeliveryRetry, 12 * time.Second},
		{500, "InternalServerError", "", storage.DeliveryRetry, 0},
		{503, "ServiceUnavailable", "3", storage.DeliveryRetry, 3 * time.Second},
	} {
		g := newGateway(t, true, func(_ int, _ *http.Request, w http.ResponseWriter) {
			if tc.retryAfter != "" {
				w.Header().Set("Retry-After", tc.retryAfter)
			}
			apnsReason(w, tc.status, tc.reason)
		})
		res := newAPNsSender(t, g).Send(context.Background(), storage.Delivery{Token: "ab", BundleIdentifier: "b"}, mustPrepare(t, `{"aps":{"alert":"x"}}`, "", ""))
		if res.Outcome != tc.want || res.RetryAfter != tc.after || g.count() != 1 {
			t.Errorf("%d %s: %+v after %d requests, want outcome %v retry after %v", tc.status, tc.reason, res, g.count(), tc.want, tc.after)
		}
	}
}

// fcmGateway is a scripted FCM: a token endpoint numbering its tokens and a
// send endpoint answering with send(n, access token).
func fcmGateway(t *testing.T, send func(n int, token string, w http.ResponseWriter)) (*FCM, *gateway, *atomic.Int64) {
	t.Helper()
	var tokens atomic.Int64
	var sends atomic.Int64
	g := newGateway(t, false, func(_ int, r *http.Request, w http.ResponseWriter) {
		if r.URL.Path == "/token" {
			n := tokens.Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"access_token":"tok-%d","expires_in":3600,"token_type":"Bearer"}`, n)
			return
		}
		if r.URL.Path != "/v1/projects/proj/messages:send" {
			t.Errorf("FCM request to %s", r.URL.Path)
		}
		send(int(sends.Add(1)), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), w)
	})
	sa, _, err := pushtest.NewServiceAccount("proj", g.srv.URL+"/token")
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFCM(storage.FCMConfig{ServiceAccountJSON: sa, URL: g.srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f, g, &tokens
}

func fcmError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%d,"message":"m","status":%q,"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":%q}]}}`, status, code, code)
}

func TestFCMUnauthorizedRefreshesToken(t *testing.T) {
	var used []string
	var mu sync.Mutex
	f, _, tokens := fcmGateway(t, func(_ int, tok string, w http.ResponseWriter) {
		mu.Lock()
		used = append(used, tok)
		mu.Unlock()
		if tok == "tok-1" {
			fcmError(w, http.StatusUnauthorized, "UNAUTHENTICATED")
			return
		}
		fmt.Fprint(w, `{"name":"projects/proj/messages/1"}`)
	})
	p := mustPrepare(t, "", `{"data":{"a":"b"}}`, "")
	res := f.Send(context.Background(), storage.Delivery{Token: "t1"}, p)
	if res.Outcome != storage.DeliverySent || tokens.Load() != 2 || fmt.Sprint(used) != "[tok-1 tok-2]" {
		t.Fatalf("result %+v, %d token requests, sends with %v", res, tokens.Load(), used)
	}
	// The fresh token is cached.
	if res := f.Send(context.Background(), storage.Delivery{Token: "t2"}, p); res.Outcome != storage.DeliverySent || tokens.Load() != 2 {
		t.Fatalf("second send %+v, %d token requests", res, tokens.Load())
	}
	// A token is used until tokenRefreshEarly before it expires, and
	// renewed from then on.
	expiring := func(in time.Duration) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.tokens = oauth2.ReuseTokenSourceWithExpiry(&oauth2.Token{AccessToken: "tok-2", TokenType: "Bearer", Expiry: time.Now().Add(in)},
			f.jwt.TokenSource(f.tokenCtx), tokenRefreshEarly)
	}
	expiring(tokenRefreshEarly + time.Minute)
	if res := f.Send(context.Background(), storage.Delivery{Token: "t3"}, p); res.Outcome != storage.DeliverySent || tokens.Load() != 2 {
		t.Fatalf("before the early refresh %+v, %d token requests", res, tokens.Load())
	}
	expiring(tokenRefreshEarly - time.Second)
	if res := f.Send(context.Background(), storage.Delivery{Token: "t4"}, p); res.Outcome != storage.DeliverySent || tokens.Load() != 3 {
		t.Fatalf("after expiry %+v, %d token requests", res, tokens.Load())
	}
	if fmt.Sprint(used[len(used)-2:]) != "[tok-2 tok-3]" {
		t.Fatalf("sends with %v", used)
	}
}

func TestFCMUnauthorizedTwiceFails(t *testing.T) {
	f, g, tokens := fcmGateway(t, func(_ int, _ string, w http.ResponseWriter) { fcmError(w, http.StatusUnauthorized, "UNAUTHENTICATED") })
	res := f.Send(context.Background(), storage.Delivery{Token: "t"}, mustPrepare(t, "", `{}`, ""))
	if res.Outcome != storage.DeliveryFailed || tokens.Load() != 2 || g.count() != 4 {
		t.Fatalf("result %+v, %d token requests, %d requests", res, tokens.Load(), g.count())
	}
}

func TestFCMOutcomes(t *testing.T) {
	for _, tc := range []struct {
		status     int
		code       string
		retryAfter string
		want       storage.DeliveryOutcome
		after      time.Duration
	}{
		{404, "UNREGISTERED", "", storage.DeliveryDeadToken, 0},
		{400, "UNREGISTERED", "", storage.DeliveryDeadToken, 0},
		{400, "INVALID_ARGUMENT", "", storage.DeliveryFailed, 0},
		{403, "SENDER_ID_MISMATCH", "", storage.DeliveryFailed, 0},
		{429, "QUOTA_EXCEEDED", "30", storage.DeliveryRetry, 30 * time.Second},
		{503, "UNAVAILABLE", "", storage.DeliveryRetry, 0},
		{500, "INTERNAL", "2", storage.DeliveryRetry, 2 * time.Second},
	} {
		f, _, _ := fcmGateway(t, func(_ int, _ string, w http.ResponseWriter) {
			if tc.retryAfter != "" {
				w.Header().Set("Retry-After", tc.retryAfter)
			}
			fcmError(w, tc.status, tc.code)
		})
		res := f.Send(context.Background(), storage.Delivery{Token: "t"}, mustPrepare(t, "", `{}`, ""))
		if res.Outcome != tc.want || res.RetryAfter != tc.after {
			t.Errorf("%d %s: %+v, want %v after %v", tc.status, tc.code, res, tc.want, tc.after)
		}
	}
	// A token endpoint that fails makes the delivery retry later.
	g := newGateway(t, false, func(_ int, _ *http.Request, w http.ResponseWriter) { http.Error(w, "down", http.StatusBadGateway) })
	sa, _, _ := pushtest.NewServiceAccount("proj", g.srv.URL+"/token")
	f, err := NewFCM(storage.FCMConfig{ServiceAccountJSON: sa, URL: g.srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res := f.Send(context.Background(), storage.Delivery{Token: "t"}, mustPrepare(t, "", `{}`, "")); res.Outcome != storage.DeliveryRetry {
		t.Fatalf("token endpoint down: %+v", res)
	}
}

func newVAPID(t *testing.T) storage.VAPIDConfig {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	priv, _ := k.Bytes()
	pub, _ := k.PublicKey.Bytes()
	return storage.VAPIDConfig{PublicKey: base64.RawURLEncoding.EncodeToString(pub), PrivateKey: base64.RawURLEncoding.EncodeToString(priv), Subject: "mailto:t@example.com"}
}

func TestWebPushThroughFake(t *testing.T) {
	fake := pushtest.NewWebPush()
	t.Cleanup(fake.Close)
	cfg := newVAPID(t)
	fake.VAPIDPublicKey = cfg.PublicKey
	roots := x509.NewCertPool()
	roots.AddCert(fake.Server.Certificate())
	w, err := NewWebPush(cfg, roots, netguard.NewPolicy([]string{"127.0.0.1"}))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := fake.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := fake.Subscribe()
	fake.Dead(dead)
	p := mustPrepare(t, "", "", `{"notification":{"title":"T"},"data":{"x":1},"time_to_live":120}`)
	if res := w.Send(context.Background(), storage.Delivery{Token: sub.Token()}, p); res.Outcome != storage.DeliverySent {
		t.Fatalf("send: %+v", res)
	}
	if res := w.Send(context.Background(), storage.Delivery{Token: dead.Token()}, p); res.Outcome != storage.DeliveryDeadToken {
		t.Fatalf("gone subscription: %+v", res)
	}
	if res := w.Send(context.Background(), storage.Delivery{Token: "not base64!"}, p); res.Outcome != storage.DeliveryDeadToken {
		t.Fatalf("bad token: %+v", res)
	}
	if pr := fake.Problems(); len(pr) > 0 {
		t.Fatalf("the fake found problems: %v", pr)
	}
	got := fake.For(sub.ID)
	if len(got) != 1 || got[0].Headers["TTL"] != "120" || string(got[0].Body) != string(p.WebBody) {
		t.Fatalf("received %+v, want %s", got, p.WebBody)
	}
}

func TestWebPushOutcomes(t *testing.T) {
	cfg := newVAPID(t)
	w, err := NewWebPush(cfg, nil, netguard.NewPolicy([]string{"127.0.0.1"}))
	if err != nil {
		t.Fatal(err)
	}
	fake := pushtest.NewWebPush() // only for a subscription's keys
	t.Cleanup(fake.Close)
	for _, tc := range []struct {
		status     int
		retryAfter string
		want       storage.DeliveryOutcome
		after      time.Duration
	}{
		{201, "", storage.DeliverySent, 0},
		{404, "", storage.DeliveryDeadToken, 0},
		{410, "", storage.DeliveryDeadToken, 0},
		{413, "", storage.DeliveryFailed, 0},
		{429, "45", storage.DeliveryRetry, 45 * time.Second},
		{502, "", storage.DeliveryRetry, 0},
	} {
		g := newGateway(t, false, func(_ int, _ *http.Request, rw http.ResponseWriter) {
			if tc.retryAfter != "" {
				rw.Header().Set("Retry-After", tc.retryAfter)
			}
			rw.WriteHeader(tc.status)
		})
		sub, _ := fake.Subscribe()
		// Point the subscription at the scripted endpoint.
		var s map[string]any
		raw, _ := base64.StdEncoding.DecodeString(sub.Token())
		_ = json.Unmarshal(raw, &s)
		s["endpoint"] = g.srv.URL + "/push/x"
		b, _ := json.Marshal(s)
		res := w.Send(context.Background(), storage.Delivery{Token: base64.StdEncoding.EncodeToString(b)}, mustPrepare(t, "", "", `{}`))
		if res.Outcome != tc.want || res.RetryAfter != tc.after {
			t.Errorf("%d: %+v, want %v after %v", tc.status, res, tc.want, tc.after)
		}
		if r := g.request(0); r.Header.Get("TTL") != fmt.Sprint(DefaultWebTTL) || r.Header.Get("Content-Encoding") != "aes128gcm" ||
			!strings.HasPrefix(r.Header.Get("Authorization"), "vapid t=") {
			t.Errorf("request headers %v", r.Header)
		}
	}
}

func TestClassifyStatusEdges(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   storage.DeliveryOutcome
	}{{199, storage.DeliveryFailed}, {299, storage.DeliverySent}, {300, storage.DeliveryFailed}, {428, storage.DeliveryFailed},
		{430, storage.DeliveryFailed}, {499, storage.DeliveryFailed}} {
		if r := classifyStatus(tc.status, "x", 0); r.Outcome != tc.want {
			t.Errorf("classifyStatus(%d) = %v, want %v", tc.status, r.Outcome, tc.want)
		}
	}
}

// Every gateway connection and request is bounded in time, so a gateway
// that stops answering cannot hold a sender forever.
func TestGatewayTimeouts(t *testing.T) {
	check := func(name string, rt http.RoundTripper) {
		t.Helper()
		st, ok := rt.(schemeTransport)
		if !ok {
			t.Fatalf("%s: transport %T", name, rt)
		}
		var h2, plain *http.Transport
		if name == "web" { // through the guard (TestWebPushGuard)
			h2, plain = st.tls.(*netguard.Guarded).Base(), st.plain.(*netguard.Guarded).Base()
		} else {
			h2, plain = st.tls.(*http.Transport), st.plain.(*http.Transport)
		}
		if h2.IdleConnTimeout != 5*time.Minute || h2.TLSHandshakeTimeout != 10*time.Second || h2.MaxConnsPerHost != 1 || !h2.ForceAttemptHTTP2 {
			t.Errorf("%s: TLS transport idle %v, handshake %v, %d connections at a time", name, h2.IdleConnTimeout, h2.TLSHandshakeTimeout, h2.MaxConnsPerHost)
		}
		if plain.IdleConnTimeout != 5*time.Minute || plain.MaxIdleConns != 256 || plain.MaxIdleConnsPerHost != 128 {
			t.Errorf("%s: plain transport idle %v, %d idle, %d per host", name, plain.IdleConnTimeout, plain.MaxIdleConns, plain.MaxIdleConnsPerHost)
		}
	}
	apns, err := pushtest.NewAPNs()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(apns.Close)
	a, err := NewAPNs(storage.APNsConfig{KeyPEM: apns.KeyPEM, KeyID: apns.KeyID, TeamID: apns.TeamID, Topic: "t", URL: apns.URL})
	if err != nil {
		t.Fatal(err)
	}
	check("apns", a.client.Transport)
	if a.client.Timeout != 30*time.Second {
		t.Errorf("apns: request timeout %v, want 30s", a.client.Timeout)
	}
	sa, _, err := pushtest.NewServiceAccount("proj", "https://oauth.example/token")
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFCM(storage.FCMConfig{ServiceAccountJSON: sa}, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("fcm", f.client.Transport)
	if f.client.Timeout != 30*time.Second {
		t.Errorf("fcm: request timeout %v, want 30s", f.client.Timeout)
	}
	if c, _ := f.tokenCtx.Value(oauth2.HTTPClient).(*http.Client); c == nil || c.Timeout != 10*time.Second {
		t.Errorf("fcm: token request client %v, want a 10 s timeout", c)
	}
	w, err := NewWebPush(newVAPID(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("web", w.client.Transport)
	if w.client.Timeout != 30*time.Second {
		t.Errorf("web: request timeout %v, want 30s", w.client.Timeout)
	}
}
