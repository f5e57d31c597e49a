package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	pushnotifications "github.com/pusher/push-notifications-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/gen/device"
	"github.com/heraldrt/herald/gen/deviceclient"
	"github.com/heraldrt/herald/gen/reporting"
	"github.com/heraldrt/herald/gen/reportingclient"
	"github.com/heraldrt/herald/server/beamsauth"
	"github.com/heraldrt/herald/server/directory"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

const (
	pushInstanceID     = "0b7e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
	pushSecret         = "beams-secret-key"
	pushExtraIssuer    = "https://auth.example.com"
	disabledInstanceID = "1b7e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
	unknownInstanceID  = "2b7e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
	testVAPIDKey       = "BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM"
)

type pushServer struct {
	db      *storage.DB
	url     string
	engine  *gin.Engine
	client  *deviceclient.ClientWithResponses
	reports *reportingclient.ClientWithResponses
	spec    *specChecker // Device API
	rspec   *specChecker // Reporting API
}

// openPushDB opens a fresh database with the test instances.
func openPushDB(t testing.TB) *storage.DB {
	t.Helper()
	db := testdb.New(t, storage.Open)
	for _, in := range []storage.Instance{
		{ID: pushInstanceID, SecretKey: pushSecret, JWTIssuer: pushExtraIssuer, Enabled: true, VAPID: storage.VAPIDConfig{PublicKey: testVAPIDKey, PrivateKey: "p"}},
		{ID: disabledInstanceID, SecretKey: pushSecret, Enabled: false},
	} {
		if _, err := db.CreateInstance(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// newPushEngine wires the Device and Reporting APIs on an engine, with
// check (when not nil) in front of them.
func newPushEngine(t testing.TB, db *storage.DB, log *zap.Logger, check gin.HandlerFunc) *gin.Engine {
	t.Helper()
	dir, err := directory.NewInstances(context.Background(), db, log)
	if err != nil {
		t.Fatal(err)
	}
	engine := NewEngine(log)
	if check != nil {
		engine.Use(check)
	}
	Mount(engine, Routes{Device: NewDeviceAPI(db, dir, log, DeviceOptions{}), Reporting: NewReportingAPI(db, dir, log, ReportingOptions{})})
	return engine
}

func newPushServer(t *testing.T) *pushServer {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	s := &pushServer{db: openPushDB(t), spec: newSpecChecker(t, device.GetSpec), rspec: newSpecChecker(t, reporting.GetSpec)}
	// Every response is checked against the spec of its API; preflights are
	// CORS machinery outside both specs.
	s.engine = newPushEngine(t, s.db, log, func(c *gin.Context) {
		switch {
		case c.Request.Method == http.MethodOptions:
			c.Next()
		case strings.HasPrefix(c.Request.URL.Path, "/reporting_api/"):
			s.rspec.middleware(c)
		default:
			s.spec.middleware(c)
		}
	})
	srv := httptest.NewServer(s.engine)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	var err error
	if s.client, err = deviceclient.NewClientWithResponses(srv.URL); err != nil {
		t.Fatal(err)
	}
	if s.reports, err = reportingclient.NewClientWithResponses(srv.URL); err != nil {
		t.Fatal(err)
	}
	return s
}

// registerFCM registers an FCM device with the token and returns its id.
func (s *pushServer) registerFCM(t *testing.T, token string) string {
	t.Helper()
	res, err := s.client.RegisterFcmDeviceWithResponse(context.Background(), pushInstanceID, deviceclient.FcmRegistration{Token: token})
	if err != nil || res.JSON200 == nil {
		t.Fatalf("register: %v %d %s", err, res.StatusCode(), res.Body)
	}
	return res.JSON200.ID
}

// pushRequest is a hand-made request for the rows the typed client cannot send.
type pushRequest struct {
	method, path, contentType, body, authorization string
}

// do sends r and returns the status and the body, decoded as an object.
func (s *pushServer) do(t *testing.T, r pushRequest) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(r.method, s.url+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.body == "" {
		req.Body = http.NoBody
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.authorization != "" {
		req.Header.Set("Authorization", r.authorization)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var body map[string]any
	if res.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("%s %s: %d with a body that is not a JSON object: %q", r.method, r.path, res.StatusCode, raw)
		}
	}
	return res.StatusCode, body, res.Header
}

// checkStatus fails unless status is want and, for an error, the body is
// exactly {"error": wantKind, "description": "…"}.
func checkStatus(t *testing.T, status int, body map[string]any, want int, wantKind string) {
	t.Helper()
	if status != want {
		t.Fatalf("status %d, want %d (body %v)", status, want, body)
	}
	if status < 400 {
		return
	}
	kind, _ := body["error"].(string)
	desc, _ := body["description"].(string)
	if len(body) != 2 || desc == "" || (wantKind != "" && kind != wantKind) || strings.Contains(desc, "struct") {
		t.Fatalf("body %v, want error %q with a description and nothing else", body, wantKind)
	}
}

func webToken(endpoint string) string {
	sub, _ := json.Marshal(map[string]any{"endpoint": endpoint, "keys": map[string]string{"p256dh": "BPk", "auth": "au"}})
	return base64.StdEncoding.EncodeToString(sub)
}

func TestDeviceLifecycle(t *testing.T) {
	s := newPushServer(t)
	ctx := context.Background()

	// Register: a new APNs device has no interests; the same token again is
	// the same device, with its interests.
	reg, err := s.client.RegisterApnsDeviceWithResponse(ctx, pushInstanceID, deviceclient.ApnsRegistration{
		Token: "a1b2c3d4", BundleIdentifier: "com.example.app", Metadata: &deviceclient.ApnsMetadata{SdkVersion: ptr("4.0.0"), IosVersion: ptr("17.2")},
	})
	if err != nil || reg.JSON200 == nil || len(reg.JSON200.InitialInterestSet) != 0 || !strings.Contains(string(reg.Body), `"initialInterestSet":[]`) {
		t.Fatalf("register apns: %v %d %s", err, reg.StatusCode(), reg.Body)
	}
	id := reg.JSON200.ID
	if res, _ := s.client.AddDeviceInterestWithResponse(ctx, pushInstanceID, "apns", id, "news@home"); res.StatusCode() != 200 || strings.TrimSpace(string(res.Body)) != "{}" {
		t.Fatalf("add interest: %d %s", res.StatusCode(), res.Body)
	}
	again, _ := s.client.RegisterApnsDeviceWithResponse(ctx, pushInstanceID, deviceclient.ApnsRegistration{Token: "a1b2c3d4", BundleIdentifier: "com.example.app"})
	if again.JSON200 == nil || again.JSON200.ID != id || strings.Join(again.JSON200.InitialInterestSet, ",") != "news@home" {
		t.Fatalf("register known token: %d %s", again.StatusCode(), again.Body)
	}

	// Get.
	got, _ := s.client.GetDeviceWithResponse(ctx, pushInstanceID, "apns", id)
	if got.JSON200 == nil || got.JSON200.ID != id || got.JSON200.UserID != "" {
		t.Fatalf("get: %d %s", got.StatusCode(), got.Body)
	}

	// Metadata.
	md, _ := s.client.UpdateDeviceMetadataWithResponse(ctx, pushInstanceID, "apns", id, deviceclient.Metadata{SdkVersion: ptr("4.1.0"), IosVersion: ptr("18.0")})
	if md.StatusCode() != 200 || strings.TrimSpace(string(md.Body)) != "{}" {
		t.Fatalf("metadata: %d %s", md.StatusCode(), md.Body)
	}
	got, _ = s.client.GetDeviceWithResponse(ctx, pushInstanceID, "apns", id)
	if m := got.JSON200.Metadata; m == nil || *m.SdkVersion != "4.1.0" || *m.IosVersion != "18.0" || m.AndroidVersion != nil {
		t.Fatalf("metadata after update: %s", got.Body)
	}

	// Interests: replace, list in pages, remove.
	var names []string
	for i := range 150 {
		names = append(names, fmt.Sprintf("topic-%03d", i))
	}
	set, _ := s.client.SetDeviceInterestsWithResponse(ctx, pushInstanceID, "apns", id, deviceclient.InterestSet{Interests: append(names, names[0])})
	if set.StatusCode() != 200 {
		t.Fatalf("set interests: %d %s", set.StatusCode(), set.Body)
	}
	var listed []string
	params := &deviceclient.ListDeviceInterestsParams{}
	for pages := 1; ; pages++ {
		page, _ := s.client.ListDeviceInterestsWithResponse(ctx, pushInstanceID, "apns", id, params)
		if page.JSON200 == nil {
			t.Fatalf("list: %d %s", page.StatusCode(), page.Body)
		}
		listed = append(listed, page.JSON200.Interests...)
		next := page.JSON200.ResponseMetadata.NextCursor
		if next == nil {
			if pages != 2 {
				t.Fatalf("%d pages, want 2", pages)
			}
			break
		}
		params.Cursor = next
	}
	if strings.Join(listed, ",") != strings.Join(names, ",") {
		t.Fatalf("listed %v", listed)
	}
	small, _ := s.client.ListDeviceInterestsWithResponse(ctx, pushInstanceID, "apns", id, &deviceclient.ListDeviceInterestsParams{Limit: ptr(150)})
	if small.StatusCode() != 400 {
		t.Fatalf("limit 150: %d %s", small.StatusCode(), small.Body)
	}
	exact, _ := s.client.ListDeviceInterestsWithResponse(ctx, pushInstanceID, "apns", id, &deviceclient.ListDeviceInterestsParams{Limit: ptr(50), Cursor: params.Cursor})
	if exact.JSON200 == nil || len(exact.JSON200.Interests) != 50 || exact.JSON200.Interests[0] != "topic-100" || exact.JSON200.ResponseMetadata.NextCursor != nil {
		t.Fatalf("last page of 50: %d %s", exact.StatusCode(), exact.Body)
	}
	if res, _ := s.client.RemoveDeviceInterestWithResponse(ctx, pushInstanceID, "apns", id, "topic-000"); res.StatusCode() != 200 {
		t.Fatalf("remove: %d %s", res.StatusCode(), res.Body)
	}
	if n, _ := s.db.CountInterestSubscribers(ctx, pushInstanceID, "topic-000"); n != 0 {
		t.Fatalf("topic-000 still has %d subscribers", n)
	}

	// FCM token update and web registration.
	fcm := s.registerFCM(t, "fcm:token-1")
	if res, _ := s.client.UpdateFcmTokenWithResponse(ctx, pushInstanceID, fcm, deviceclient.TokenUpdate{Token: "fcm:token-2"}); res.StatusCode() != 200 {
		t.Fatalf("token: %d %s", res.StatusCode(), res.Body)
	}
	if stored, _ := s.db.GetDevice(ctx, pushInstanceID, storage.PlatformFCM, fcm); stored.Token != "fcm:token-2" {
		t.Fatalf("token after update: %q", stored.Token)
	}
	web, _ := s.client.RegisterWebDeviceWithResponse(ctx, pushInstanceID, deviceclient.WebRegistration{Token: webToken("https://push.example.com/sub/1"), Metadata: &deviceclient.Metadata{SdkVersion: ptr("2.1.0")}})
	if web.JSON200 == nil || !strings.HasPrefix(web.JSON200.ID, "web-") {
		t.Fatalf("register web: %d %s", web.StatusCode(), web.Body)
	}
	key, _ := s.client.GetWebVapidPublicKeyWithResponse(ctx, pushInstanceID)
	if key.JSON200 == nil || key.JSON200.VapidPublicKey != testVAPIDKey {
		t.Fatalf("vapid key: %d %s", key.StatusCode(), key.Body)
	}

	// Delete is idempotent.
	for range 2 {
		del, _ := s.client.DeleteDeviceWithResponse(ctx, pushInstanceID, "apns", id)
		if del.StatusCode() != 200 || strings.TrimSpace(string(del.Body)) != "{}" {
			t.Fatalf("delete: %d %s", del.StatusCode(), del.Body)
		}
	}
	if got, _ := s.client.GetDeviceWithResponse(ctx, pushInstanceID, "apns", id); got.StatusCode() != 404 {
		t.Fatalf("get deleted: %d %s", got.StatusCode(), got.Body)
	}
}

func TestDeviceErrors(t *testing.T) {
	s := newPushServer(t)
	fcm := s.registerFCM(t, "fcm:errors")
	root := "/device_api/v1/instances/" + pushInstanceID
	dev := root + "/devices/fcm/" + fcm
	const jsonCT = "application/json"
	req := func(method, path, body string) pushRequest {
		r := pushRequest{method: method, path: path, body: body}
		if body != "" {
			r.contentType = jsonCT
		}
		return r
	}
	with := func(r pushRequest, f func(*pushRequest)) pushRequest { f(&r); return r }
	interests := func(n int) string {
		names := make([]string, n)
		for i := range names {
			names[i] = "i" + strconv.Itoa(i)
		}
		b, _ := json.Marshal(map[string]any{"interests": names})
		return string(b)
	}
	apns := `{"token":"0a0b","bundleIdentifier":"com.example"}`
	tests := []struct {
		name     string
		req      pushRequest
		status   int
		wantKind string
	}{
		// Registration.
		{"OKRegisterApns", req("POST", root+"/devices/apns", apns), 200, ""},
		{"OKRegisterFcmWithoutBundle", req("POST", root+"/devices/fcm", `{"token":"t:1","metadata":{"sdkVersion":"1.9","androidVersion":"14"},"knownPreviousClientIds":["old-1"]}`), 200, ""},
		{"OKRegisterFcmUnknownFields", req("POST", root+"/devices/fcm", `{"token":"t:2","extra":{"x":1}}`), 200, ""},
		{"OKRegisterWeb", req("POST", root+"/devices/web", `{"token":"`+webToken("https://fcm.googleapis.com/fcm/send/x")+`"}`), 200, ""},
		{"OKContentTypeCharset", with(req("POST", root+"/devices/apns", apns), func(r *pushRequest) { r.contentType = "application/json; charset=UTF-8" }), 200, ""},
		{"ErrWrongContentType", with(req("POST", root+"/devices/apns", apns), func(r *pushRequest) { r.contentType = "text/plain" }), 400, "invalid_content_type"},
		{"ErrMissingContentType", with(req("POST", root+"/devices/fcm", `{"token":"t"}`), func(r *pushRequest) { r.contentType = "" }), 400, "invalid_content_type"},
		{"ErrInstanceNotUUID", req("POST", "/device_api/v1/instances/not-a-uuid/devices/apns", apns), 400, "invalid_instance_id"},
		{"ErrInstanceMissing", req("POST", "/device_api/v1/instances//devices/apns", apns), 400, "missing_instance_id"},
		{"ErrUnknownInstance", req("POST", "/device_api/v1/instances/"+unknownInstanceID+"/devices/apns", apns), 404, "instance_not_found"},
		{"ErrDisabledInstance", req("POST", "/device_api/v1/instances/"+disabledInstanceID+"/devices/fcm", `{"token":"t"}`), 404, "instance_not_found"},
		{"ErrBodyNotObject", req("POST", root+"/devices/apns", `["token"]`), 400, "invalid_request"},
		{"ErrBodyNotJSON", req("POST", root+"/devices/apns", `{"token":`), 400, "invalid_request"},
		{"ErrBodyNull", req("POST", root+"/devices/fcm", `null`), 400, "missing_token"},
		{"ErrNoBody", req("POST", root+"/devices/fcm", ""), 400, "invalid_request"},
		{"ErrTokenWrongType", req("POST", root+"/devices/fcm", `{"token":5}`), 400, "invalid_request"},
		{"ErrApnsMissingToken", req("POST", root+"/devices/apns", `{"bundleIdentifier":"com.example"}`), 400, "missing_token"},
		{"ErrApnsMissingBundle", req("POST", root+"/devices/apns", `{"token":"0a0b"}`), 400, "missing_bundle_identifier"},
		{"ErrApnsTokenNotHex", req("POST", root+"/devices/apns", `{"token":"xyz!","bundleIdentifier":"com.example"}`), 401, "invalid_gateway_token"},
		{"ErrFcmMissingToken", req("POST", root+"/devices/fcm", `{"bundleIdentifier":"com.example"}`), 400, "missing_token"},
		{"ErrFcmTokenWithSpace", req("POST", root+"/devices/fcm", `{"token":"a b"}`), 401, "invalid_gateway_token"},
		{"ErrWebTokenNotSubscription", req("POST", root+"/devices/web", `{"token":"bm90IGpzb24="}`), 400, "invalid_token"},
		{"ErrWebTokenBadEndpoint", req("POST", root+"/devices/web", `{"token":"`+webToken("ftp://x/y")+`"}`), 400, "invalid_token"},
		{"ErrTokenTooLong", req("POST", root+"/devices/fcm", `{"token":"`+strings.Repeat("a", 8193)+`"}`), 400, "invalid_token"},
		{"ErrMetadataTooLong", req("POST", root+"/devices/fcm", `{"token":"t:3","metadata":{"sdkVersion":"`+strings.Repeat("1", 101)+`"}}`), 400, "invalid_metadata"},
		{"ErrTooManyPreviousIDs", req("POST", root+"/devices/fcm", `{"token":"t:4","knownPreviousClientIds":[`+strings.TrimSuffix(strings.Repeat(`"x",`, 101), ",")+`]}`), 400, "invalid_known_previous_client_ids"},
		{"ErrBodyTooLarge", req("POST", root+"/devices/fcm", `{"token":"`+strings.Repeat("a", MaxDeviceBodyBytes)+`"}`), 413, "body_too_large"},
		// Get and delete.
		{"OKGet", req("GET", dev, ""), 200, ""},
		{"OKGetContentTypeIgnored", with(req("GET", dev, ""), func(r *pushRequest) { r.contentType = "text/plain" }), 200, ""},
		{"ErrGetUnknownDevice", req("GET", root+"/devices/fcm/fcm-nope", ""), 404, "device_not_found"},
		{"ErrGetOtherPlatform", req("GET", root+"/devices/apns/"+fcm, ""), 404, "device_not_found"},
		{"ErrGetInvalidPlatform", req("GET", root+"/devices/safari/"+fcm, ""), 400, "invalid_platform"},
		{"ErrGetDeviceIDTooLong", req("GET", root+"/devices/fcm/"+strings.Repeat("d", 65), ""), 400, "invalid_device_id"},
		{"ErrGetInstanceNotUUID", req("GET", "/device_api/v1/instances/123/devices/fcm/"+fcm, ""), 400, "invalid_instance_id"},
		{"ErrGetUnknownInstance", req("GET", "/device_api/v1/instances/"+unknownInstanceID+"/devices/fcm/"+fcm, ""), 404, "instance_not_found"},
		{"OKDeleteUnknownDevice", req("DELETE", root+"/devices/fcm/fcm-never-existed", ""), 200, ""},
		{"ErrDeleteInstanceNotUUID", req("DELETE", "/device_api/v1/instances/x/devices/fcm/"+fcm, ""), 400, "invalid_instance_id"},
		{"ErrDeleteInvalidPlatform", req("DELETE", root+"/devices/gcm/"+fcm, ""), 400, "invalid_platform"},
		// Metadata and token.
		{"OKMetadata", req("PUT", dev+"/metadata", `{"sdkVersion":"2.0"}`), 200, ""},
		{"ErrMetadataWrongContentType", with(req("PUT", dev+"/metadata", `{"sdkVersion":"2.0"}`), func(r *pushRequest) { r.contentType = "text/plain" }), 400, "invalid_content_type"},
		{"ErrMetadataNotObject", req("PUT", dev+"/metadata", `"2.0"`), 400, "invalid_request"},
		{"ErrMetadataValueType", req("PUT", dev+"/metadata", `{"sdkVersion":2}`), 400, "invalid_request"},
		{"ErrMetadataUnknownDevice", req("PUT", root+"/devices/fcm/fcm-nope/metadata", `{}`), 404, "device_not_found"},
		{"ErrMetadataInstanceNotUUID", req("PUT", "/device_api/v1/instances/x/devices/fcm/"+fcm+"/metadata", `{}`), 400, "invalid_instance_id"},
		{"OKToken", req("PUT", dev+"/token", `{"token":"fcm:errors"}`), 200, ""},
		{"ErrTokenMissing", req("PUT", dev+"/token", `{}`), 400, "missing_token"},
		{"ErrTokenNotObject", req("PUT", dev+"/token", `[]`), 400, "invalid_request"},
		{"ErrTokenWrongContentType", with(req("PUT", dev+"/token", `{"token":"x"}`), func(r *pushRequest) { r.contentType = "text/plain" }), 400, "invalid_content_type"},
		{"ErrTokenUnknownDevice", req("PUT", root+"/devices/fcm/fcm-nope/token", `{"token":"x"}`), 404, "device_not_found"},
		{"ErrTokenOnApnsPath", req("PUT", root+"/devices/apns/"+fcm+"/token", `{"token":"x"}`), 404, "not_found"},
		// Interests.
		{"OKSetInterests", req("PUT", dev+"/interests", `{"interests":["a","b-c","A_Z=@,.;09"]}`), 200, ""},
		{"OKSetInterestsEmpty", req("PUT", dev+"/interests", `{"interests":[]}`), 200, ""},
		{"OKSetInterests5000", req("PUT", dev+"/interests", interests(5000)), 200, ""},
		{"ErrSetInterests5001", req("PUT", dev+"/interests", interests(5001)), 400, "too_many_interests"},
		{"ErrSetInterestsInvalidName", req("PUT", dev+"/interests", `{"interests":["ok","not ok"]}`), 400, "invalid_interest_name"},
		{"ErrSetInterestsNameTooLong", req("PUT", dev+"/interests", `{"interests":["`+strings.Repeat("x", 165)+`"]}`), 400, "invalid_interest_name"},
		{"OKSetInterestsName164", req("PUT", dev+"/interests", `{"interests":["`+strings.Repeat("x", 164)+`"]}`), 200, ""},
		{"ErrSetInterestsEmptyName", req("PUT", dev+"/interests", `{"interests":[""]}`), 400, "invalid_interest_name"},
		{"ErrSetInterestsMissing", req("PUT", dev+"/interests", `{}`), 400, "missing_interests"},
		{"ErrSetInterestsNotObject", req("PUT", dev+"/interests", `["a"]`), 400, "invalid_request"},
		{"ErrSetInterestsNotStrings", req("PUT", dev+"/interests", `{"interests":[1]}`), 400, "invalid_request"},
		{"ErrSetInterestsUnknownDevice", req("PUT", root+"/devices/fcm/fcm-nope/interests", `{"interests":[]}`), 404, "device_not_found"},
		{"ErrSetInterestsUnknownInstance", req("PUT", "/device_api/v1/instances/"+unknownInstanceID+"/devices/fcm/"+fcm+"/interests", `{"interests":[]}`), 404, "instance_not_found"},
		{"OKAddInterestNoContentType", req("POST", dev+"/interests/hello", ""), 200, ""},
		{"OKAddInterestEscaped", req("POST", dev+"/interests/a%40b%2Cc%3Bd%3De", ""), 200, ""},
		{"ErrAddInterestInvalid", req("POST", dev+"/interests/a%20b", ""), 400, "invalid_interest_name"},
		{"ErrAddInterestTooLong", req("POST", dev+"/interests/"+strings.Repeat("x", 165), ""), 400, "invalid_interest_name"},
		{"ErrAddInterestUnknownDevice", req("POST", root+"/devices/fcm/fcm-nope/interests/a", ""), 404, "device_not_found"},
		{"ErrAddInterestUnknownInstance", req("POST", "/device_api/v1/instances/"+unknownInstanceID+"/devices/fcm/x/interests/a", ""), 404, "instance_not_found"},
		{"ErrAddInterestInstanceNotUUID", req("POST", "/device_api/v1/instances/x/devices/fcm/x/interests/a", ""), 400, "invalid_instance_id"},
		{"OKRemoveInterest", req("DELETE", dev+"/interests/hello", ""), 200, ""},
		{"OKRemoveInterestNotHeld", req("DELETE", dev+"/interests/never", ""), 200, ""},
		{"ErrRemoveInterestInvalid", req("DELETE", dev+"/interests/a%21", ""), 400, "invalid_interest_name"},
		{"ErrRemoveInterestUnknownDevice", req("DELETE", root+"/devices/fcm/fcm-nope/interests/a", ""), 404, "device_not_found"},
		{"ErrRemoveInterestUnknownInstance", req("DELETE", "/device_api/v1/instances/"+unknownInstanceID+"/devices/fcm/x/interests/a", ""), 404, "instance_not_found"},
		{"OKListInterests", req("GET", dev+"/interests?limit=1", ""), 200, ""},
		{"ErrListLimitZero", req("GET", dev+"/interests?limit=0", ""), 400, "invalid_limit"},
		{"ErrListLimit101", req("GET", dev+"/interests?limit=101", ""), 400, "invalid_limit"},
		{"ErrListLimitNotNumber", req("GET", dev+"/interests?limit=ten", ""), 400, "invalid_parameter"},
		{"ErrListCursorGarbage", req("GET", dev+"/interests?cursor=%21%21%21", ""), 400, ""},
		{"ErrListCursorForged", req("GET", dev+"/interests?cursor="+base64.RawURLEncoding.EncodeToString([]byte("i1.not valid")), ""), 400, "invalid_cursor"},
		{"ErrListCursorOtherScheme", req("GET", dev+"/interests?cursor=YWJj", ""), 400, "invalid_cursor"},
		{"ErrListUnknownDevice", req("GET", root+"/devices/fcm/fcm-nope/interests", ""), 404, "device_not_found"},
		{"ErrListUnknownInstance", req("GET", "/device_api/v1/instances/"+unknownInstanceID+"/devices/fcm/x/interests", ""), 404, "instance_not_found"},
		{"ErrListInstanceNotUUID", req("GET", "/device_api/v1/instances/x/devices/fcm/x/interests", ""), 400, "invalid_instance_id"},
		// Web Push key and routing.
		{"OKVapidKey", req("GET", root+"/web-vapid-public-key", ""), 200, ""},
		{"ErrVapidUnknownInstance", req("GET", "/device_api/v1/instances/"+unknownInstanceID+"/web-vapid-public-key", ""), 404, "instance_not_found"},
		{"ErrNoRoute", req("GET", root+"/nothing", ""), 404, "not_found"},
		{"ErrMethod", req("PATCH", dev, ""), 405, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body, header := s.do(t, tt.req)
			checkStatus(t, status, body, tt.status, tt.wantKind)
			if status != 404 && status != 405 && header.Get("Access-Control-Allow-Origin") != "*" {
				t.Fatalf("no CORS header on %d", status)
			}
		})
	}
}

// userToken signs claims with HS256 and the test instance's secret.
func userToken(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	return signToken(t, jwt.SigningMethodHS256, claims, []byte(pushSecret))
}

func signToken(t *testing.T, method jwt.SigningMethod, claims jwt.MapClaims, key any) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSetDeviceUser(t *testing.T) {
	s := newPushServer(t)
	ctx := context.Background()
	exp := time.Now().Add(time.Hour).Unix()
	issuer := beamsauth.Issuer(pushInstanceID)
	claims := func(sub string, edit func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"sub": sub, "exp": exp, "iss": issuer}
		if edit != nil {
			edit(c)
		}
		return c
	}

	// A token minted by the real Beams Go server SDK is accepted.
	beams, err := pushnotifications.New(pushInstanceID, pushSecret)
	if err != nil {
		t.Fatal(err)
	}
	sdkToken, err := beams.GenerateToken("alice")
	if err != nil {
		t.Fatal(err)
	}
	alice := s.registerFCM(t, "fcm:alice")
	bearer := func(token string) deviceclient.RequestEditorFn {
		return func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}
	}
	res, err := s.client.SetDeviceUserWithResponse(ctx, pushInstanceID, "fcm", alice, bearer(sdkToken["token"].(string)))
	if err != nil || res.StatusCode() != 200 || strings.TrimSpace(string(res.Body)) != "{}" {
		t.Fatalf("set user with the Go SDK's token: %v %d %s", err, res.StatusCode(), res.Body)
	}
	got, _ := s.client.GetDeviceWithResponse(ctx, pushInstanceID, "fcm", alice)
	if got.JSON200 == nil || got.JSON200.UserID != "alice" {
		t.Fatalf("device after set user: %s", got.Body)
	}

	// A user at the device limit.
	for i := range storage.MaxUserDevices {
		id := s.registerFCM(t, "fcm:full-"+strconv.Itoa(i))
		if err := s.db.SetDeviceUser(ctx, pushInstanceID, storage.PlatformFCM, id, "full"); err != nil {
			t.Fatal(err)
		}
	}
	fresh := func() string { return s.registerFCM(t, "fcm:"+strconv.FormatInt(time.Now().UnixNano(), 36)) }

	tamper := func(token string) string {
		parts := strings.Split(token, ".")
		payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
		parts[1] = base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"bob"`, `"eve"`, 1)))
		return strings.Join(parts, ".")
	}
	none := signToken(t, jwt.SigningMethodNone, claims("bob", nil), jwt.UnsafeAllowNoneSignatureType)
	tests := []struct {
		name          string
		device        func() string
		authorization string
		status        int
		wantKind      string
	}{
		{"OKSameUserAgain", func() string { return alice }, "Bearer " + userToken(t, claims("alice", nil)), 200, ""},
		{"OKExtraIssuer", fresh, "Bearer " + userToken(t, claims("bob", func(c jwt.MapClaims) { c["iss"] = pushExtraIssuer })), 200, ""},
		{"OKMaxLengthSub", fresh, "Bearer " + userToken(t, claims(strings.Repeat("u", 164), nil)), 200, ""},
		{"OKLowercaseScheme", fresh, "bearer " + userToken(t, claims("carol", nil)), 200, ""},
		{"ErrNoAuthorization", fresh, "", 401, "missing_token"},
		{"ErrNotBearer", fresh, "Basic dXNlcjpwYXNz", 401, "missing_token"},
		{"ErrEmptyBearer", fresh, "Bearer ", 401, "missing_token"},
		{"ErrMalformed", fresh, "Bearer not.a.jwt", 401, "invalid_token"},
		{"ErrTampered", fresh, "Bearer " + tamper(userToken(t, claims("bob", nil))), 401, "invalid_token"},
		{"ErrWrongSecret", fresh, "Bearer " + signToken(t, jwt.SigningMethodHS256, claims("bob", nil), []byte("other-secret")), 401, "invalid_token"},
		{"ErrAlgNone", fresh, "Bearer " + none, 401, "invalid_token"},
		{"ErrAlgHS512", fresh, "Bearer " + signToken(t, jwt.SigningMethodHS512, claims("bob", nil), []byte(pushSecret)), 401, "invalid_token"},
		{"ErrExpired", fresh, "Bearer " + userToken(t, claims("bob", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() })), 401, "token_expired"},
		{"ErrNotYetValid", fresh, "Bearer " + userToken(t, claims("bob", func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), 401, "token_expired"},
		{"ErrMissingExp", fresh, "Bearer " + userToken(t, claims("bob", func(c jwt.MapClaims) { delete(c, "exp") })), 400, "missing_claim"},
		{"ErrMissingSub", fresh, "Bearer " + userToken(t, claims("", func(c jwt.MapClaims) { delete(c, "sub") })), 400, "missing_claim"},
		{"ErrEmptySub", fresh, "Bearer " + userToken(t, claims("", nil)), 400, "missing_claim"},
		{"ErrSubTooLong", fresh, "Bearer " + userToken(t, claims(strings.Repeat("u", 165), nil)), 400, "invalid_sub"},
		{"ErrMissingIss", fresh, "Bearer " + userToken(t, claims("bob", func(c jwt.MapClaims) { delete(c, "iss") })), 400, "missing_claim"},
		{"ErrWrongIssuer", fresh, "Bearer " + userToken(t, claims("bob", func(c jwt.MapClaims) { c["iss"] = beamsauth.Issuer(unknownInstanceID) })), 403, "invalid_issuer"},
		{"ErrUserAlreadySet", func() string { return alice }, "Bearer " + userToken(t, claims("bob", nil)), 400, "user_already_set"},
		{"ErrUnknownDevice", func() string { return "fcm-nope" }, "Bearer " + userToken(t, claims("bob", nil)), 404, "device_not_found"},
		{"ErrTooManyDevices", fresh, "Bearer " + userToken(t, claims("full", nil)), 422, "too_many_devices"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body, _ := s.do(t, pushRequest{method: "PUT", path: "/device_api/v1/instances/" + pushInstanceID + "/devices/fcm/" + tt.device() + "/user", authorization: tt.authorization})
			checkStatus(t, status, body, tt.status, tt.wantKind)
		})
	}
	t.Run("ErrInstanceNotUUID", func(t *testing.T) {
		status, body, _ := s.do(t, pushRequest{method: "PUT", path: "/device_api/v1/instances/abc/devices/fcm/" + alice + "/user", authorization: "Bearer " + userToken(t, claims("alice", nil))})
		checkStatus(t, status, body, 400, "invalid_instance_id")
	})
}

func TestCORS(t *testing.T) {
	s := newPushServer(t)
	for _, path := range []string{
		"/device_api/v1/instances/" + pushInstanceID + "/devices/web",
		"/device_api/v1/instances/" + pushInstanceID + "/devices/web/web-1/user",
		"/reporting_api/v2/instances/" + pushInstanceID + "/events",
	} {
		req, _ := http.NewRequest(http.MethodOptions, s.url+path, nil)
		req.Header.Set("Origin", "https://shop.example.com")
		req.Header.Set("Access-Control-Request-Method", "PUT")
		req.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		h := res.Header
		if res.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "*" ||
			!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") ||
			!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Content-Type") ||
			!strings.Contains(h.Get("Access-Control-Allow-Methods"), "PUT") {
			t.Fatalf("preflight %s: %d %v", path, res.StatusCode, h)
		}
	}
}

func TestEveryDeviceOperationIsAnswered(t *testing.T) {
	// Guards against the tables above losing an operation: between them the
	// contract tests answer each operation with 200 and the error statuses
	// the source lists for it.
	s := newPushServer(t)
	ctx := context.Background()
	id := s.registerFCM(t, "fcm:every")
	s.client.RegisterApnsDeviceWithResponse(ctx, pushInstanceID, deviceclient.ApnsRegistration{Token: "00", BundleIdentifier: "b"})
	s.client.RegisterWebDeviceWithResponse(ctx, pushInstanceID, deviceclient.WebRegistration{Token: webToken("https://x/y")})
	s.client.GetDeviceWithResponse(ctx, pushInstanceID, "fcm", id)
	s.client.UpdateDeviceMetadataWithResponse(ctx, pushInstanceID, "fcm", id, deviceclient.Metadata{})
	s.client.UpdateFcmTokenWithResponse(ctx, pushInstanceID, id, deviceclient.TokenUpdate{Token: "fcm:every2"})
	s.client.SetDeviceInterestsWithResponse(ctx, pushInstanceID, "fcm", id, deviceclient.InterestSet{Interests: []string{"a"}})
	s.client.ListDeviceInterestsWithResponse(ctx, pushInstanceID, "fcm", id, nil)
	s.client.AddDeviceInterestWithResponse(ctx, pushInstanceID, "fcm", id, "b")
	s.client.RemoveDeviceInterestWithResponse(ctx, pushInstanceID, "fcm", id, "b")
	s.client.GetWebVapidPublicKeyWithResponse(ctx, pushInstanceID)
	s.client.SetDeviceUserWithResponse(ctx, pushInstanceID, "fcm", id, func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+userToken(t, jwt.MapClaims{"sub": "u", "exp": time.Now().Add(time.Hour).Unix(), "iss": beamsauth.Issuer(pushInstanceID)}))
		return nil
	})
	s.client.DeleteDeviceWithResponse(ctx, pushInstanceID, "fcm", id)
	for _, op := range []string{"registerApnsDevice", "registerFcmDevice", "registerWebDevice", "getDevice", "deleteDevice",
		"updateDeviceMetadata", "updateFcmToken", "setDeviceUser", "listDeviceInterests", "setDeviceInterests",
		"addDeviceInterest", "removeDeviceInterest", "getWebVapidPublicKey"} {
		if !s.spec.seen[strings.ToLower(op)+" 200"] {
			t.Errorf("%s was not answered with 200", op)
		}
	}
}

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
