package httpapi

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/gen/adminclient"
	"github.com/heraldrt/herald/storage"
)

// Tests that kill mutants gremlins found alive (make mutate); the
// equivalent ones are listed in scripts/mutate-equivalent.md.

// Every Device and Reporting API limit accepts its maximum (and refuses one
// more where no other test does).
func TestDeviceAndReportingLimitsInclusive(t *testing.T) {
	s := newPushServer(t)
	fcm := s.registerFCM(t, "fcm:limits")
	root := "/device_api/v1/instances/" + pushInstanceID
	post := func(path, body string) pushRequest {
		return pushRequest{method: "POST", path: path, body: body, contentType: "application/json"}
	}
	report := "/reporting_api/v2/instances/" + pushInstanceID + "/events"
	reportBody := func(publishID, deviceID, userID string) string {
		b, _ := json.Marshal(map[string]any{"event": "delivery", "publishId": publishID, "deviceId": deviceID, "timestampSecs": 1_700_000_000, "userId": userID})
		return string(b)
	}
	previous := func(n int) string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("old-%d", i)
		}
		b, _ := json.Marshal(ids)
		return string(b)
	}
	tests := []struct {
		name     string
		req      pushRequest
		status   int
		wantKind string
	}{
		{"OKDeviceID64", pushRequest{method: "GET", path: root + "/devices/fcm/" + strings.Repeat("d", 64)}, 404, "device_not_found"},
		{"OKMetadata100", post(root+"/devices/fcm", `{"token":"t:md","metadata":{"sdkVersion":"`+strings.Repeat("é", 100)+`"}}`), 200, ""},
		{"OKToken8192", post(root+"/devices/fcm", `{"token":"`+strings.Repeat("a", 8192)+`"}`), 200, ""},
		{"ErrFcmTokenWithDEL", post(root+"/devices/fcm", `{"token":"a\u007fb"}`), 401, "invalid_gateway_token"},
		{"OKFcmTokenTilde", post(root+"/devices/fcm", `{"token":"a~!b"}`), 200, ""},
		{"OKKnownPreviousIDs100", post(root+"/devices/fcm", `{"token":"t:prev","knownPreviousClientIds":`+previous(100)+`}`), 200, ""},
		{"OKApnsBundle255", post(root+"/devices/apns", `{"token":"0a0b","bundleIdentifier":"`+strings.Repeat("b", 255)+`"}`), 200, ""},
		{"ErrApnsBundle256", post(root+"/devices/apns", `{"token":"0a0b","bundleIdentifier":"`+strings.Repeat("b", 256)+`"}`), 400, "invalid_bundle_identifier"},
		{"OKFcmBundle255", post(root+"/devices/fcm", `{"token":"t:bundle","bundleIdentifier":"`+strings.Repeat("b", 255)+`"}`), 200, ""},
		{"ErrFcmBundle256", post(root+"/devices/fcm", `{"token":"t:bundle2","bundleIdentifier":"`+strings.Repeat("b", 256)+`"}`), 400, "invalid_bundle_identifier"},
		{"OKListLimit100", pushRequest{method: "GET", path: root + "/devices/fcm/" + fcm + "/interests?limit=100"}, 200, ""},
		{"OKReportIDs128", post(report, reportBody(strings.Repeat("p", 128), strings.Repeat("d", 128), "u")), 200, ""},
		{"ErrReportDeviceID129", post(report, reportBody("p", strings.Repeat("d", 129), "u")), 400, "invalid_device_id"},
		{"OKReportUserID164Runes", post(report, reportBody("p", "d", strings.Repeat("é", 164))), 200, ""},
		{"OKReportUserID164FourByteRunes", post(report, reportBody("p", "d", strings.Repeat("😀", 164))), 200, ""},
		{"OKReportUserID100Bytes", post(report, reportBody("p", "d", strings.Repeat("u", 100))), 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body, _ := s.do(t, tt.req)
			checkStatus(t, status, body, tt.status, tt.wantKind)
		})
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

// A publish body over the limit is refused with the limit in KiB.
func TestPublishBodyTooLargeNamesLimit(t *testing.T) {
	s := newPublishServer(t)
	big := `{"interests":["a"],"fcm":{"data":{"x":"` + strings.Repeat("y", MaxInterestsPublishBytes) + `"}}}`
	status, body, _ := s.do(t, pushRequest{"POST", publishPrefix + pushInstanceID + "/publishes/interests", "application/json", big, "Bearer " + pushSecret})
	checkStatus(t, status, body, 400, "body_too_large")
	if want := "The request body is larger than 10 KiB."; body["description"] != want {
		t.Fatalf("description %q, want %q", body["description"], want)
	}
}

// A publish stores exactly the payloads given (null ones left out), and
// accepts a webhook URL of the longest allowed length.
func TestPublishStoresGivenPayloadsOnly(t *testing.T) {
	s := newPublishServer(t)
	webhook := "https://hooks.example/" + strings.Repeat("w", maxWebhookURLLength-len("https://hooks.example/"))
	body := `{"interests":["a"],"apns":{"aps":{"alert":"hi"}},"fcm":null,"webhookUrl":"` + webhook + `"}`
	status, res, _ := s.do(t, pushRequest{"POST", publishPrefix + pushInstanceID + "/publishes/interests", "application/json", body, "Bearer " + pushSecret})
	checkStatus(t, status, res, 200, "")
	p, err := s.db.GetPublish(context.Background(), pushInstanceID, res["publishId"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(p.Payload), `{"apns":{"aps":{"alert":"hi"}}}`; got != want {
		t.Errorf("stored payload %s, want %s", got, want)
	}
	if p.WebhookURL != webhook {
		t.Errorf("stored webhook URL of %d bytes, want %d", len(p.WebhookURL), len(webhook))
	}
}

// A delivery report keeps the device's flags; an open drops them.
func TestReportFlagsKeptForDeliveriesOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.db")
	db, err := storage.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.CreateInstance(context.Background(), storage.Instance{ID: pushInstanceID, SecretKey: pushSecret, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	// A device the publish targets, so that its reports are stored.
	d, _, err := db.RegisterDevice(context.Background(), storage.Device{InstanceID: pushInstanceID, Platform: storage.PlatformFCM, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddDeviceInterest(context.Background(), pushInstanceID, storage.PlatformFCM, d.ID, "news"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreatePublish(context.Background(), storage.Publish{ID: "p", InstanceID: pushInstanceID, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newPushEngine(t, db, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), nil))
	t.Cleanup(srv.Close)
	s := &pushServer{url: srv.URL}
	for _, ev := range []string{"delivery", "open"} {
		body := `{"event":"` + ev + `","publishId":"p","deviceId":"` + d.ID + `","timestampSecs":1700000000,"appInBackground":true,"hasDisplayableContent":true,"hasData":false}`
		status, res, _ := s.do(t, pushRequest{method: "POST", path: "/reporting_api/v2/instances/" + pushInstanceID + "/events", body: body, contentType: "application/json"})
		checkStatus(t, status, res, 200, "")
	}
	raw, err := sql.Open("sqlite", path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rows, err := raw.Query(`SELECT event, app_in_background, has_displayable_content, has_data FROM report_events ORDER BY event`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var kind string
		var bg, disp, data sql.NullBool
		if err := rows.Scan(&kind, &bg, &disp, &data); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %v/%v %v/%v %v/%v", kind, bg.Valid, bg.Bool, disp.Valid, disp.Bool, data.Valid, data.Bool))
	}
	if want := "delivery true/true true/true true/false|open false/false false/false false/false"; strings.Join(got, "|") != want {
		t.Fatalf("stored %q, want %q", strings.Join(got, "|"), want)
	}
}

// The admin API caps request bodies, shows whether an APNs CA is set, and
// lists up to 100 recent publishes.
func TestAdminLimitsAndFlags(t *testing.T) {
	s := newAdminServer(t)
	ctx := context.Background()
	big := `{"id":"x","pad":"` + strings.Repeat(" ", MaxAdminBodyBytes) + `"}`
	req, _ := http.NewRequest("POST", s.url+"/admin/v1/apps", strings.NewReader(big))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over %d bytes: status %d, want 413", MaxAdminBodyBytes, res.StatusCode)
	}

	for _, tc := range []struct {
		id, ca string
		want   bool
	}{{"8b4d0c0a-5e3f-4c77-9c20-3e4f5a6b7c8d", "-----BEGIN CERTIFICATE-----\n...", true}, {"9c5e1d1b-6f4a-4d88-8d31-4f5a6b7c8d9e", "", false}} {
		if _, err := s.db.CreateInstance(ctx, storage.Instance{ID: tc.id, SecretKey: "s", Enabled: true, APNs: storage.APNsConfig{CAPEM: tc.ca}}); err != nil {
			t.Fatal(err)
		}
		got, err := s.client.GetInstanceWithResponse(ctx, tc.id)
		if err != nil || got.JSON200 == nil || got.JSON200.Apns.CaConfigured != tc.want {
			t.Errorf("instance with CA %q: %v %s, want caConfigured %v", tc.ca, err, got.Body, tc.want)
		}
		list, err := s.client.ListInstancePublishesWithResponse(ctx, tc.id, &adminclient.ListInstancePublishesParams{Limit: ptr(100)})
		if err != nil || list.StatusCode() != 200 {
			t.Errorf("100 recent publishes: %v %d %s", err, list.StatusCode(), list.Body)
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

func TestValidSocketID(t *testing.T) {
	for s, want := range map[string]bool{
		"1.2": true, "123456.7890": true, strings.Repeat("1", 32) + "." + strings.Repeat("2", 31): true,
		"": false, "12": false, ".5": false, "5.": false, "a.1": false, "1.a": false, "1.2.3": false, "1 .2": false,
		strings.Repeat("1", 32) + "." + strings.Repeat("2", 32): false,
	} {
		if got := validSocketID(s); got != want {
			t.Errorf("validSocketID(%q) = %v, want %v", s, got, want)
		}
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

// A handler that panics is answered with a logged 500; http.ErrAbortHandler
// goes on to net/http, which aborts the response.
func TestRecovery(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	engine := NewEngine(zap.New(core))
	engine.GET("/panic", func(*gin.Context) { panic("boom") })
	engine.GET("/abort", func(*gin.Context) { panic(http.ErrAbortHandler) })
	rec := httptest.NewRecorder()
	engine.ServeHTTP(rec, httptest.NewRequest("GET", "/panic", nil))
	if rec.Code != 500 || errKind(rec.Body.Bytes()) != "internal_error" || logs.FilterMessage("panic in handler").Len() != 1 {
		t.Fatalf("status %d, body %s, %d panics logged", rec.Code, rec.Body, logs.FilterMessage("panic in handler").Len())
	}
	defer func() {
		if p := recover(); p != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", p)
		}
	}()
	engine.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/abort", nil))
	t.Fatal("http.ErrAbortHandler was swallowed")
}

// Answered requests are logged at debug below 400, info from 400 and error
// from 500.
func TestAccessLogLevels(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	engine := NewEngine(zap.New(core))
	engine.GET("/status/:code", func(c *gin.Context) {
		var code int
		fmt.Sscan(c.Param("code"), &code)
		c.Status(code)
	})
	want := map[int]zapcore.Level{200: zapcore.DebugLevel, 399: zapcore.DebugLevel, 400: zapcore.InfoLevel, 499: zapcore.InfoLevel,
		500: zapcore.ErrorLevel, 503: zapcore.ErrorLevel}
	for code, level := range want {
		engine.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", fmt.Sprintf("/status/%d", code), nil))
		entries := logs.TakeAll()
		if len(entries) != 1 || entries[0].Message != "request" || entries[0].Level != level || entries[0].ContextMap()["status"] != int64(code) {
			t.Errorf("status %d logged %v, want one request entry at %v", code, entries, level)
		}
	}
}

// Every prefix of a trigger body is refused by the fast decoder or decoded
// as encoding/json does, without a panic.
func TestDecodeTriggerEventPrefixes(t *testing.T) {
	for _, tt := range triggerBodies {
		for i := range len(tt.body) {
			checkLikeEncodingJSON(t, []byte(tt.body[:i]))
		}
	}
}
