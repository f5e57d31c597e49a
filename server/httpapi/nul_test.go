package httpapi

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The Push and admin APIs refuse the NUL character wherever it comes (a
// JSON string's \u0000, the path, the query, a user token's sub) with 400
// and the error body, before anything is stored: SQLite would keep it and
// PostgreSQL answer an error of its own. A backslash before "u0000" is no
// NUL and goes through.
func TestNULRefusedByThePushAndAdminAPIs(t *testing.T) {
	s, p := newPushServer(t), newPublishServer(t)
	device := s.registerFCM(t, "nul-test-token")
	devices := "/device_api/v1/instances/" + pushInstanceID + "/devices/fcm"
	nulSub := userToken(t, jwt.MapClaims{"sub": "user\x00x", "exp": time.Now().Add(time.Hour).Unix(), "iss": pushExtraIssuer})
	for _, tt := range []struct {
		name string
		r    pushRequest
		kind string
	}{
		// The Device and Reporting APIs (s).
		{"DeviceToken", pushRequest{method: "POST", path: devices, contentType: "application/json", body: `{"token":"a\u0000b"}`}, KindInvalidRequest},
		{"DeviceMetadata", pushRequest{method: "PUT", path: devices + "/" + device + "/metadata", contentType: "application/json", body: `{"sdkVersion":"1\u0000"}`}, KindInvalidRequest},
		{"DevicePath", pushRequest{method: "GET", path: devices + "/" + device + "%00"}, KindInvalidRequest},
		{"InterestPath", pushRequest{method: "POST", path: devices + "/" + device + "/interests/news%00"}, KindInvalidRequest},
		{"UserSub", pushRequest{method: "PUT", path: devices + "/" + device + "/user", authorization: "Bearer " + nulSub}, KindInvalidSub},
		{"ReportDevice", pushRequest{method: "POST", path: "/reporting_api/v2/instances/" + pushInstanceID + "/events", contentType: "application/json",
			body: `{"event":"delivery","deviceId":"` + device + `\u0000","publishId":"pub","timestampSecs":1}`}, KindInvalidRequest},
		// The Publish and customer APIs (p).
		{"PublishPayload", pushRequest{method: "POST", path: publishPrefix + pushInstanceID + "/publishes/interests", contentType: "application/json", authorization: "Bearer " + pushSecret,
			body: `{"interests":["news"],"fcm":{"data":{"k":"a\u0000b"}}}`}, KindInvalidRequest},
		{"PublishUser", pushRequest{method: "POST", path: publishPrefix + pushInstanceID + "/publishes/users", contentType: "application/json", authorization: "Bearer " + pushSecret,
			body: `{"users":["u\u0000"],"fcm":` + goodFCM + `}`}, KindInvalidRequest},
		{"DeleteUser", pushRequest{method: "DELETE", path: "/customer_api/v1/instances/" + pushInstanceID + "/users/u%00", authorization: "Bearer " + pushSecret}, KindInvalidRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			server := s
			if !strings.HasPrefix(tt.r.path, "/device_api/") && !strings.HasPrefix(tt.r.path, "/reporting_api/") {
				server = p.pushServer
			}
			status, body, _ := server.do(t, tt.r)
			checkStatus(t, status, body, http.StatusBadRequest, tt.kind)
		})
	}
	got, err := s.db.GetDevice(t.Context(), pushInstanceID, "fcm", device)
	if err != nil || len(got.Metadata) != 0 || got.UserID != "" {
		t.Fatalf("the device changed: %+v %v", got, err)
	}

	// An escaped backslash followed by u0000 is text like any other.
	status, body, _ := s.do(t, pushRequest{method: "PUT", path: devices + "/" + device + "/metadata", contentType: "application/json", body: `{"sdkVersion":"1\\u0000"}`})
	checkStatus(t, status, body, http.StatusOK, "")
	if got, _ := s.db.GetDevice(t.Context(), pushInstanceID, "fcm", device); got.Metadata["sdkVersion"] != `1\u0000` {
		t.Fatalf("metadata %q, want the text as sent", got.Metadata)
	}

	a := newAdminServer(t)
	req, _ := http.NewRequest("POST", a.url+"/admin/v1/apps", strings.NewReader(`{"id":"nul\u0000app"}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusBadRequest || errKind(b) != KindInvalidRequest {
		t.Fatalf("admin app with a NUL: %d %s, want 400 invalid_request", res.StatusCode, b)
	}
}
