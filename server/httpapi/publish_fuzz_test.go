package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/internal/clientrate"
)

// FuzzPublishAPI drives the Publish API through the gin engine with random
// methods, paths, content types, authorizations and bodies. Whatever
// arrives, the answer is never a 5xx, every 4xx carries exactly the error
// body, and a 200 to a publish is exactly {"publishId"}.
//
//	go test -run '^$' -fuzz FuzzPublishAPI -fuzztime 30s ./server/httpapi/
func FuzzPublishAPI(f *testing.F) {
	db := openPushDB(f)
	engine, api := newPublishEngine(f, db, zap.NewNop(), nil, nil)
	api.limiter = clientrate.New(1<<30, 1<<30) // the fuzzer sends far more than 100 requests a second
	auth := "Bearer " + pushSecret
	seeds := []struct {
		method      uint8
		path, ct    string
		body, authz string
	}{
		{1, "publish_api/v1/instances/{i}/publishes/interests", "application/json", `{"interests":["a","b"],"apns":{"aps":{"alert":"x"},"headers":{"apns-priority":"5"}},"fcm":{"notification":{"title":"t"},"data":{"k":1},"time_to_live":3,"priority":"high","collapse_key":"c"},"web":{"notification":{"title":"t","hide_notification_if_site_has_focus":true},"time_to_live":60}}`, auth},
		{1, "publish_api/v1/instances/{i}/publishes", "application/json; charset=utf-8", `{"interests":["a"],"web":{"data":{}},"webhookUrl":"https://h.example/x"}`, auth},
		{1, "publish_api/v1/instances/{i}/publishes/users", "application/json", `{"users":["u1","ü"],"fcm":{}}`, auth},
		{1, "publish_api/v1/instances/{i}/publishes/users", "application/json", `{"users":"x","fcm":{}}`, auth},
		{1, "publish_api/v1/instances/{i}/publishes/interests", "application/json", `{"interests":[1e400],"apns":{"aps":{}}}`, auth},
		{1, "publish_api/v1/instances/{i}/publishes/interests", "text/plain", `{"interests":["a"]}`, ""},
		{0, "publish_api/v1/instances/{i}/publishes/pubid-1", "", "", auth},
		{0, "publish_api/v1/instances/{i}/publishes/interests", "", "", "Bearer x"},
		{3, "customer_api/v1/instances/{i}/users/u%2F1", "", "", auth},
		{3, "user_api/v1/instances/{i}/users/%E2%82%AC", "", "", auth},
		{3, "user_api/v1/instances/{i}/users/%ff", "", "", auth},
		{1, "publish_api/v1/instances/not-a-uuid/publishes", "application/json", `{}`, auth},
		{1, "publish_api/v1/instances/{i}/publishes/interests", "application/json", `{"interests":["a"],"fcm":{"notification":{"body_loc_args":[1]}}}`, auth},
		{1, "publish_api/v1/instances/{i}/publishes/interests", "application/json", `{"interests":["a"],"apns":{"headers":{"apns-expiration":"1x"}}}`, auth},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.ct, []byte(s.body), s.authz)
	}
	methods := []string{"GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"}
	f.Fuzz(func(t *testing.T, method uint8, path, contentType string, body []byte, authorization string) {
		path = strings.ReplaceAll(path, "{i}", pushInstanceID)
		req, err := http.NewRequest(methods[int(method)%len(methods)], "http://herald/"+path, bytes.NewReader(body))
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
		if rec.Code == 200 {
			var ok map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &ok); err != nil {
				t.Fatalf("%s %s: 200 with a body that is not a JSON object: %q", req.Method, req.URL, rec.Body)
			}
			if req.Method == http.MethodPost {
				if id, _ := ok["publishId"].(string); len(ok) != 1 || !strings.HasPrefix(id, publishIDPrefix) {
					t.Fatalf("%s %s: 200 with %q, not {\"publishId\"}", req.Method, req.URL, rec.Body)
				}
			}
			if req.Method == http.MethodDelete && len(ok) != 0 {
				t.Fatalf("%s %s: 200 with %q, not {}", req.Method, req.URL, rec.Body)
			}
		}
	})
}
