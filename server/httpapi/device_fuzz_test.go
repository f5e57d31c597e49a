package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/storage"
)

// FuzzPushAPIs drives the Device and Reporting APIs through the gin engine
// with random methods, paths, headers and bodies. Whatever arrives, the
// answer is never a 5xx, and every 4xx carries exactly the error body.
//
//	go test -run '^$' -fuzz FuzzPushAPIs -fuzztime 30s ./server/httpapi/
func FuzzPushAPIs(f *testing.F) {
	db := openPushDB(f)
	engine := newPushEngine(f, db, zap.NewNop(), nil)
	d, _, err := db.RegisterDevice(context.Background(), storage.Device{InstanceID: pushInstanceID, Platform: storage.PlatformFCM, Token: "fuzz:token"})
	if err != nil {
		f.Fatal(err)
	}
	dev := "devices/fcm/" + d.ID
	seeds := []struct {
		method      uint8
		api         bool // false: Device API, true: Reporting API
		path, ct    string
		body, authz string
	}{
		{1, false, "devices/apns", "application/json", `{"token":"0a0b","bundleIdentifier":"b","metadata":{"sdkVersion":"1"}}`, ""},
		{1, false, "devices/fcm", "application/json", `{"token":"f:1","knownPreviousClientIds":["x"]}`, ""},
		{1, false, "devices/web", "application/json", `{"token":"eyJlbmRwb2ludCI6Imh0dHBzOi8veC95Iiwia2V5cyI6eyJwMjU2ZGgiOiJhIiwiYXV0aCI6ImIifX0="}`, ""},
		{0, false, dev, "", "", ""},
		{0, false, dev + "/interests", "", "", ""},
		{0, false, dev + "/interests?limit=5&cursor=aTEuYQ", "", "", ""},
		{2, false, dev + "/interests", "application/json", `{"interests":["a","b"]}`, ""},
		{1, false, dev + "/interests/a%40b", "", "", ""},
		{3, false, dev + "/interests/a", "", "", ""},
		{2, false, dev + "/metadata", "application/json", `{"sdkVersion":"2"}`, ""},
		{2, false, dev + "/token", "application/json", `{"token":"f:2"}`, ""},
		{2, false, dev + "/user", "", "", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."},
		{3, false, dev, "", "", ""},
		{4, false, "devices/web", "", "", ""},
		{0, false, "web-vapid-public-key", "", "", ""},
		{1, true, "events", "application/json", `{"event":"Delivery","publishId":"p","deviceId":"d","timestampSecs":1}`, ""},
		{1, true, "events", "application/json", `{"event":"open","publishId":"p","deviceId":"d","timestampSecs":1e400}`, ""},
	}
	for _, s := range seeds {
		f.Add(s.method, s.api, s.path, s.ct, []byte(s.body), s.authz)
	}
	methods := []string{"GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"}
	f.Fuzz(func(t *testing.T, method uint8, reportingAPI bool, path, contentType string, body []byte, authorization string) {
		prefix := "/device_api/v1/instances/" + pushInstanceID + "/"
		if reportingAPI {
			prefix = "/reporting_api/v2/instances/" + pushInstanceID + "/"
		}
		req, err := http.NewRequest(methods[int(method)%len(methods)], "http://herald"+prefix+path, bytes.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		if len(body) == 0 {
			req.Body = http.NoBody
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", authorization)
		rec := httptest.NewRecorder()
		engine.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s: %d %s", req.Method, req.URL, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			var e map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || len(e) != 2 {
				t.Fatalf("%s %s: %d with body %q, not the error body", req.Method, req.URL, rec.Code, rec.Body)
			}
			kind, _ := e["error"].(string)
			desc, _ := e["description"].(string)
			if kind == "" || desc == "" || strings.Contains(desc, "struct") {
				t.Fatalf("%s %s: %d with body %q", req.Method, req.URL, rec.Code, rec.Body)
			}
		}
		if rec.Code == 200 && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %s: 200 with a body that is not JSON: %q", req.Method, req.URL, rec.Body)
		}
	})
}
