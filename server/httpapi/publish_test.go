package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/gen/publish"
	"github.com/heraldrt/herald/gen/publishclient"
	"github.com/heraldrt/herald/server/directory"
	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/storage"
)

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

// quotaInstanceID is an instance with a daily quota of one publish.
const quotaInstanceID = "3b7e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"

// publishServer is the Publish API of one test behind the spec checker.
type publishServer struct {
	*pushServer
	api      *PublishAPI
	pclient  *publishclient.ClientWithResponses
	pspec    *specChecker
	notified int
	// The last publish the dispatcher was told about.
	lastID      string
	lastPayload *push.Payload
}

func (s *publishServer) Published(id string, p *push.Payload) {
	s.notified++
	s.lastID, s.lastPayload = id, p
}

// newPublishEngine wires the Publish API on an engine over db, with check
// (when not nil) in front of it.
func newPublishEngine(t testing.TB, db *storage.DB, log *zap.Logger, notifier PublishNotifier, check gin.HandlerFunc) (*gin.Engine, *PublishAPI) {
	t.Helper()
	api := newPublishAPI(t, db, log, notifier)
	engine := NewEngine(log)
	if check != nil {
		engine.Use(check)
	}
	Mount(engine, Routes{Publish: api})
	return engine, api
}

// newPublishAPI returns the Publish API over db, with the instance of
// quotaInstanceID created and idempotency keys kept in memory.
func newPublishAPI(t testing.TB, db *storage.DB, log *zap.Logger, notifier PublishNotifier) *PublishAPI {
	t.Helper()
	if _, err := db.CreateInstance(context.Background(), storage.Instance{ID: quotaInstanceID, SecretKey: pushSecret, Enabled: true, PublishQuota: 1}); err != nil {
		t.Fatal(err)
	}
	dir, err := directory.NewInstances(context.Background(), db, log)
	if err != nil {
		t.Fatal(err)
	}
	return NewPublishAPI(db, dir, notifier, log, PublishOptions{Idempotency: idempotency.NewGuard(idempotency.NewMemory(idempotency.Options{}), idempotency.Options{})})
}

func newPublishServer(t *testing.T) *publishServer {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	s := &publishServer{pushServer: &pushServer{db: openPushDB(t)}, pspec: newSpecChecker(t, publish.GetSpec)}
	s.engine, s.api = newPublishEngine(t, s.db, log, s, s.pspec.middleware)
	srv := httptest.NewServer(s.engine)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	var err error
	if s.pclient, err = publishclient.NewClientWithResponses(srv.URL, publishclient.WithRequestEditorFn(bearer(pushSecret))); err != nil {
		t.Fatal(err)
	}
	return s
}

func bearer(key string) publishclient.RequestEditorFn {
	return func(_ context.Context, r *http.Request) error {
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		return nil
	}
}

func raw(s string) *json.RawMessage {
	m := json.RawMessage(s)
	return &m
}

const (
	publishPrefix = "/publish_api/v1/instances/"
	goodFCM       = `{"notification":{"title":"Hi","body":"there"}}`
)

// interestsBody is a publish-to-interests body with the interests.
func interestsBody(interests ...string) string {
	b, _ := json.Marshal(map[string]any{"interests": interests, "fcm": json.RawMessage(goodFCM)})
	return string(b)
}

// usersBody is a publish-to-users body with the users.
func usersBody(users ...string) string {
	b, _ := json.Marshal(map[string]any{"users": users, "fcm": json.RawMessage(goodFCM)})
	return string(b)
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strings.Repeat("x", i%5) + "-" + string(rune('a'+i%26)) + strings.Repeat("0", i/26)
	}
	return out
}

func TestPublishAPIErrors(t *testing.T) {
	s := newPublishServer(t)
	auth := "Bearer " + pushSecret
	interests := publishPrefix + pushInstanceID + "/publishes/interests"
	bare := publishPrefix + pushInstanceID + "/publishes"
	users := publishPrefix + pushInstanceID + "/publishes/users"
	big := `{"interests":["a"],"fcm":{"data":{"x":"` + strings.Repeat("y", MaxInterestsPublishBytes) + `"}}}`
	bigUsers := `{"users":["a"],"fcm":{"data":{"x":"` + strings.Repeat("y", MaxUsersPublishBytes) + `"}}}`
	// Under the users limit but over the interests one: fine for users.
	midUsers := `{"users":["a"],"fcm":{"data":{"x":"` + strings.Repeat("y", 2*MaxInterestsPublishBytes) + `"}}}`
	tests := []struct {
		name     string
		r        pushRequest
		want     int
		wantKind string
	}{
		{"ErrMissingAuthorization", pushRequest{"POST", interests, "application/json", interestsBody("a"), ""}, 400, "missing_authorization"},
		{"ErrMissingAuthorizationDelete", pushRequest{"DELETE", "/customer_api/v1/instances/" + pushInstanceID + "/users/u", "", "", ""}, 400, "missing_authorization"},
		{"ErrWrongKey", pushRequest{"POST", interests, "application/json", interestsBody("a"), "Bearer nope"}, 401, "incorrect_api_key"},
		{"ErrNotBearer", pushRequest{"POST", interests, "application/json", interestsBody("a"), "Basic " + pushSecret}, 401, "incorrect_api_key"},
		{"ErrWrongKeyGet", pushRequest{"GET", interests[:len(interests)-len("interests")] + "pubid-x", "", "", "Bearer nope"}, 401, "incorrect_api_key"},
		{"ErrWrongKeyUserAPI", pushRequest{"DELETE", "/user_api/v1/instances/" + pushInstanceID + "/users/u", "", "", "Bearer nope"}, 401, "incorrect_api_key"},
		{"ErrUnknownInstance", pushRequest{"POST", publishPrefix + unknownInstanceID + "/publishes/interests", "application/json", interestsBody("a"), auth}, 404, ""},
		{"ErrUnknownInstanceUsers", pushRequest{"DELETE", "/customer_api/v1/instances/" + unknownInstanceID + "/users/u", "", "", auth}, 404, ""},
		{"ErrInstanceNotUUID", pushRequest{"POST", publishPrefix + "not-a-uuid/publishes/interests", "application/json", interestsBody("a"), auth}, 400, ""},
		{"ErrUnknownPublish", pushRequest{"GET", bare + "/pubid-00000000-0000-4000-8000-000000000000", "", "", auth}, 404, "publish_not_found"},
		{"ErrBodyTooLargeInterests", pushRequest{"POST", interests, "application/json", big, auth}, 400, "body_too_large"},
		{"ErrBodyTooLargeBare", pushRequest{"POST", bare, "application/json", big, auth}, 400, "body_too_large"},
		{"ErrBodyTooLargeUsers", pushRequest{"POST", users, "application/json", bigUsers, auth}, 400, "body_too_large"},
		{"OKUsersBodyOverInterestsLimit", pushRequest{"POST", users, "application/json", midUsers, auth}, 200, ""},
		{"ErrBodyNotObject", pushRequest{"POST", interests, "application/json", `["a"]`, auth}, 400, ""},
		{"ErrBodyNotJSON", pushRequest{"POST", interests, "application/json", `{"interests":`, auth}, 400, ""},
		{"ErrBodyEmpty", pushRequest{"POST", users, "application/json", "", auth}, 400, ""},
		{"ErrWrongContentType", pushRequest{"POST", interests, "text/plain", interestsBody("a"), auth}, 400, "invalid_content_type"},
		{"ErrNoContentType", pushRequest{"POST", users, "", usersBody("a"), auth}, 400, "invalid_content_type"},
		{"OKContentTypeCharset", pushRequest{"POST", interests, "application/json; charset=utf-8", interestsBody("a"), auth}, 200, ""},
		{"ErrNoPayload", pushRequest{"POST", interests, "application/json", `{"interests":["a"]}`, auth}, 422, "missing_payload"},
		{"ErrNullPayloads", pushRequest{"POST", users, "application/json", `{"users":["a"],"apns":null,"fcm":null,"web":null}`, auth}, 422, "missing_payload"},
		{"ErrNoInterests", pushRequest{"POST", interests, "application/json", interestsBody(), auth}, 422, "invalid_interests"},
		{"ErrInterestsMissing", pushRequest{"POST", bare, "application/json", `{"fcm":{}}`, auth}, 422, "invalid_interests"},
		{"ErrTooManyInterests", pushRequest{"POST", interests, "application/json", interestsBody(names("i", MaxPublishInterests+1)...), auth}, 422, "invalid_interests"},
		{"OKHundredInterests", pushRequest{"POST", interests, "application/json", interestsBody(names("i", MaxPublishInterests)...), auth}, 200, ""},
		{"ErrInvalidInterestName", pushRequest{"POST", interests, "application/json", interestsBody("ok", "not ok"), auth}, 422, "invalid_interest_name"},
		{"ErrEmptyInterestName", pushRequest{"POST", bare, "application/json", interestsBody(""), auth}, 422, "invalid_interest_name"},
		{"ErrLongInterestName", pushRequest{"POST", interests, "application/json", interestsBody(strings.Repeat("a", MaxInterestNameLength+1)), auth}, 422, "invalid_interest_name"},
		{"ErrNoUsers", pushRequest{"POST", users, "application/json", usersBody(), auth}, 422, "invalid_users"},
		{"ErrTooManyUsers", pushRequest{"POST", users, "application/json", usersBody(names("u", MaxPublishUsers+1)...), auth}, 422, "invalid_users"},
		{"OKThousandUsers", pushRequest{"POST", users, "application/json", usersBody(names("u", MaxPublishUsers)...), auth}, 200, ""},
		{"ErrLongUserID", pushRequest{"POST", users, "application/json", usersBody(strings.Repeat("u", MaxUserIDBytes+1)), auth}, 422, "invalid_user_id"},
		{"OKLongestUserID", pushRequest{"POST", users, "application/json", usersBody(strings.Repeat("é", MaxUserIDBytes/2)), auth}, 200, ""},
		{"ErrEmptyUserID", pushRequest{"POST", users, "application/json", usersBody(""), auth}, 422, "invalid_user_id"},
		{"ErrInterestsNotArray", pushRequest{"POST", interests, "application/json", `{"interests":"a","fcm":{}}`, auth}, 422, "invalid_request"},
		{"ErrInterestNotString", pushRequest{"POST", interests, "application/json", `{"interests":[1],"fcm":{}}`, auth}, 422, "invalid_request"},
		{"ErrUsersNotArray", pushRequest{"POST", users, "application/json", `{"users":{"a":1},"fcm":{}}`, auth}, 422, "invalid_request"},
		{"ErrWebhookNotString", pushRequest{"POST", interests, "application/json", `{"interests":["a"],"fcm":{},"webhookUrl":5}`, auth}, 422, "invalid_request"},
		{"ErrWebhookNotURL", pushRequest{"POST", interests, "application/json", `{"interests":["a"],"fcm":{},"webhookUrl":"ftp://x"}`, auth}, 422, "invalid_webhook_url"},
		{"ErrFCMNotObject", pushRequest{"POST", interests, "application/json", `{"interests":["a"],"fcm":"hello"}`, auth}, 422, ""},
		{"ErrAPNsNotObject", pushRequest{"POST", interests, "application/json", `{"interests":["a"],"apns":[1]}`, auth}, 422, ""},
		{"ErrFCMTitleNotString", pushRequest{"POST", interests, "application/json", `{"interests":["a"],"fcm":{"notification":{"title":5}}}`, auth}, 422, "invalid_payload"},
		{"ErrFCMPriority", pushRequest{"POST", interests, "application/json", `{"interests":["a"],"fcm":{"priority":"urgent"}}`, auth}, 422, "invalid_payload"},
		{"ErrFCMTTL", pushRequest{"POST", interests, "application/json", `{"interests":["a"],"fcm":{"time_to_live":-1}}`, auth}, 422, "invalid_payload"},
		{"ErrWebTTLNotInt", pushRequest{"POST", users, "application/json", `{"users":["a"],"web":{"time_to_live":"1"}}`, auth}, 422, "invalid_payload"},
		{"ErrWebHideNotBool", pushRequest{"POST", users, "application/json", `{"users":["a"],"web":{"notification":{"hide_notification_if_site_has_focus":"yes"}}}`, auth}, 422, "invalid_payload"},
		{"ErrAPNsPriority", pushRequest{"POST", interests, "application/json", `{"interests":["a"],"apns":{"aps":{"alert":"x"},"headers":{"apns-priority":"7"}}}`, auth}, 422, "invalid_payload"},
		{"ErrAPNsApsNotObject", pushRequest{"POST", interests, "application/json", `{"interests":["a"],"apns":{"aps":"x"}}`, auth}, 422, "invalid_payload"},
		{"ErrDeleteLongUserID", pushRequest{"DELETE", "/customer_api/v1/instances/" + pushInstanceID + "/users/" + strings.Repeat("u", MaxUserIDBytes+1), "", "", auth}, 400, ""},
		{"ErrDeleteLongUserIDUserAPI", pushRequest{"DELETE", "/user_api/v1/instances/" + pushInstanceID + "/users/" + strings.Repeat("u", MaxUserIDBytes+1), "", "", auth}, 400, ""},
		{"ErrWrongMethod", pushRequest{"PUT", interests, "application/json", interestsBody("a"), auth}, 405, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := s.do(t, tc.r)
			checkStatus(t, status, body, tc.want, tc.wantKind)
			if status == 200 {
				id, _ := body["publishId"].(string)
				if len(body) != 1 || !strings.HasPrefix(id, publishIDPrefix) {
					t.Fatalf("200 body %v, want exactly {\"publishId\"}", body)
				}
			}
		})
	}
	for _, want := range []string{"publishtointerests 400", "publishtointerests 401", "publishtointerests 404", "publishtointerests 422",
		"publishtointerests 200", "publishtointerestsbare 400", "publishtointerestsbare 422", "publishtousers 400", "publishtousers 422",
		"publishtousers 200", "getpublish 401", "getpublish 404", "deleteuser 400", "deleteuser 404", "deleteuserviauserapi 400", "deleteuserviauserapi 401"} {
		if !s.pspec.seen[want] {
			t.Errorf("no row answered %s", want)
		}
	}
}

func TestPublishSuccessThroughClient(t *testing.T) {
	s := newPublishServer(t)
	ctx := context.Background()
	hook := "https://hooks.example.com/beams"
	type result struct {
		status int
		body   []byte
		json   *publishclient.PublishResult
	}
	ops := []struct {
		name string
		call func() (result, error)
	}{
		{"Interests", func() (result, error) {
			r, err := s.pclient.PublishToInterestsWithResponse(ctx, pushInstanceID, nil, publishclient.InterestsPublishRequest{
				Interests: []string{"news", "sport@home"}, Apns: raw(`{"aps":{"alert":{"title":"t","body":"b"}},"headers":{"apns-collapse-id":"c"}}`),
				Fcm: raw(`{"notification":{"title":"t"},"data":{"n":1},"time_to_live":60,"priority":"high"}`), Web: raw(`{"notification":{"title":"t","deep_link":"https://x"}}`), WebhookURL: &hook,
			})
			if err != nil {
				return result{}, err
			}
			return result{r.StatusCode(), r.Body, r.JSON200}, nil
		}},
		{"InterestsBare", func() (result, error) {
			r, err := s.pclient.PublishToInterestsBareWithResponse(ctx, pushInstanceID, nil, publishclient.InterestsPublishRequest{Interests: []string{"news"}, Web: raw(`{"data":{"a":"b"}}`)})
			if err != nil {
				return result{}, err
			}
			return result{r.StatusCode(), r.Body, r.JSON200}, nil
		}},
		{"Users", func() (result, error) {
			r, err := s.pclient.PublishToUsersWithResponse(ctx, pushInstanceID, nil, publishclient.UsersPublishRequest{Users: []string{"u-1", "u-1", "ünïcode"}, Apns: raw(`{"aps":{"content-available":1}}`)})
			if err != nil {
				return result{}, err
			}
			return result{r.StatusCode(), r.Body, r.JSON200}, nil
		}},
	}
	for _, op := range ops {
		t.Run("OK"+op.name, func(t *testing.T) {
			before := s.notified
			r, err := op.call()
			if err != nil || r.status != 200 || r.json == nil {
				t.Fatalf("%v %d %s", err, r.status, r.body)
			}
			var body map[string]any
			if err := json.Unmarshal(r.body, &body); err != nil || len(body) != 1 || !strings.HasPrefix(r.json.PublishID, publishIDPrefix) {
				t.Fatalf("body %s, want exactly {\"publishId\"}", r.body)
			}
			if s.notified != before+1 {
				t.Fatalf("the dispatcher was told %d times", s.notified-before)
			}
			// It was told the publish's id and its parsed payload, which it
			// need not parse again.
			if s.lastID != r.json.PublishID || s.lastPayload == nil {
				t.Fatalf("the dispatcher was told %q with payload %v, want %q with one", s.lastID, s.lastPayload, r.json.PublishID)
			}
			var gateways []string
			for _, pl := range []storage.Platform{storage.PlatformAPNs, storage.PlatformFCM, storage.PlatformWeb} {
				if s.lastPayload.Platforms()[pl] {
					gateways = append(gateways, string(pl))
				}
			}
			if want := map[string]string{"Interests": "apns fcm web", "InterestsBare": "web", "Users": "apns"}[op.name]; strings.Join(gateways, " ") != want {
				t.Fatalf("the payload handed over is for %v, want %s", gateways, want)
			}
			// Stored before the answer, in the accepted state.
			st, err := s.pclient.GetPublishWithResponse(ctx, pushInstanceID, r.json.PublishID)
			if err != nil || st.JSON200 == nil {
				t.Fatalf("status: %v %d %s", err, st.StatusCode(), st.Body)
			}
			got := st.JSON200
			if got.PublishID != r.json.PublishID || got.State != publishclient.PublishState("accepted") || got.Targeted != 0 ||
				got.Sent != 0 || got.Failed != 0 || got.Delivered != 0 || got.Opened != 0 || got.FinishedAt != nil ||
				time.Since(got.CreatedAt) > time.Minute {
				t.Fatalf("publish status %+v", got)
			}
			var shape map[string]any
			_ = json.Unmarshal(st.Body, &shape)
			for _, k := range []string{"publishId", "state", "targeted", "sent", "failed", "delivered", "opened", "createdAt"} {
				if _, ok := shape[k]; !ok {
					t.Errorf("publish status has no %q: %s", k, st.Body)
				}
			}
			// Another instance cannot see it.
			other, _ := s.pclient.GetPublishWithResponse(ctx, quotaInstanceID, r.json.PublishID)
			if other.StatusCode() != 404 {
				t.Fatalf("publish of another instance: %d %s", other.StatusCode(), other.Body)
			}
		})
	}
	// The stored payload keeps only the given gateways.
	p, err := s.db.UnresolvedPublishes(ctx, 10)
	if err != nil || len(p) != 3 {
		t.Fatalf("unresolved publishes: %v %d", err, len(p))
	}
}

func TestPublishStatusCounts(t *testing.T) {
	s := newPublishServer(t)
	ctx := context.Background()
	r, err := s.pclient.PublishToInterestsWithResponse(ctx, pushInstanceID, nil, publishclient.InterestsPublishRequest{Interests: []string{"a"}, Fcm: raw(goodFCM)})
	if err != nil || r.JSON200 == nil {
		t.Fatalf("%v %s", err, r.Body)
	}
	id := r.JSON200.PublishID
	d, _, err := s.db.RegisterDevice(ctx, storage.Device{InstanceID: pushInstanceID, Platform: storage.PlatformFCM, Token: "f:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.AddDeviceInterest(ctx, pushInstanceID, storage.PlatformFCM, d.ID, "a"); err != nil {
		t.Fatal(err)
	}
	pubs, err := s.db.UnresolvedPublishes(ctx, 10)
	if err != nil || len(pubs) != 1 {
		t.Fatalf("%v %d", err, len(pubs))
	}
	if _, err := s.db.StartPublish(ctx, pubs[0]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.db.CompletePages(ctx, []storage.PageResult{{PublishID: id, Cursor: d.ID, Targeted: 1}}); err != nil {
		t.Fatal(err)
	}
	st, err := s.pclient.GetPublishWithResponse(ctx, pushInstanceID, id)
	if err != nil || st.JSON200 == nil || st.JSON200.Targeted != 1 || st.JSON200.State == "accepted" {
		t.Fatalf("after resolving: %v %s", err, st.Body)
	}
}

func TestPublishQuota(t *testing.T) {
	s := newPublishServer(t)
	ctx := context.Background()
	body := publishclient.InterestsPublishRequest{Interests: []string{"a"}, Fcm: raw(goodFCM)}
	first, err := s.pclient.PublishToInterestsWithResponse(ctx, quotaInstanceID, nil, body)
	if err != nil || first.StatusCode() != 200 {
		t.Fatalf("first: %v %d %s", err, first.StatusCode(), first.Body)
	}
	second, err := s.pclient.PublishToInterestsWithResponse(ctx, quotaInstanceID, nil, body)
	if err != nil || second.StatusCode() != 402 || second.JSON402 == nil || second.JSON402.Error != "quota_exceeded" {
		t.Fatalf("second: %v %d %s", err, second.StatusCode(), second.Body)
	}
	users, err := s.pclient.PublishToUsersWithResponse(ctx, quotaInstanceID, nil, publishclient.UsersPublishRequest{Users: []string{"u"}, Fcm: raw(goodFCM)})
	if err != nil || users.StatusCode() != 402 {
		t.Fatalf("users: %v %d %s", err, users.StatusCode(), users.Body)
	}
	// The default instance has no quota; the next UTC day resets it.
	if r, _ := s.pclient.PublishToInterestsWithResponse(ctx, pushInstanceID, nil, body); r.StatusCode() != 200 {
		t.Fatalf("no quota: %d %s", r.StatusCode(), r.Body)
	}
	s.api.now = func() time.Time { return time.Now().Add(24 * time.Hour) }
	if r, _ := s.pclient.PublishToInterestsBareWithResponse(ctx, quotaInstanceID, nil, body); r.StatusCode() != 200 {
		t.Fatalf("next day: %d %s", r.StatusCode(), r.Body)
	}
}

func TestPublishRateLimit(t *testing.T) {
	s := newPublishServer(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	s.api.now = func() time.Time { return now }
	body := publishclient.InterestsPublishRequest{Interests: []string{"a"}, Web: raw(`{"data":{}}`)}
	for i := range PublishRateLimit {
		// Every operation counts, whatever it answers.
		var status int
		switch i % 3 {
		case 0:
			r, _ := s.pclient.PublishToInterestsWithResponse(ctx, pushInstanceID, nil, body)
			status = r.StatusCode()
		case 1:
			r, _ := s.pclient.GetPublishWithResponse(ctx, pushInstanceID, "pubid-none")
			status = r.StatusCode()
		default:
			r, _ := s.pclient.DeleteUserWithResponse(ctx, pushInstanceID, "u")
			status = r.StatusCode()
		}
		if status == 429 {
			t.Fatalf("request %d refused", i+1)
		}
	}
	for _, call := range []func() (int, []byte){
		func() (int, []byte) {
			r, _ := s.pclient.PublishToInterestsWithResponse(ctx, pushInstanceID, nil, body)
			return r.StatusCode(), r.Body
		},
		func() (int, []byte) {
			r, _ := s.pclient.PublishToUsersWithResponse(ctx, pushInstanceID, nil, publishclient.UsersPublishRequest{Users: []string{"u"}, Web: raw(`{}`)})
			return r.StatusCode(), r.Body
		},
		func() (int, []byte) {
			r, _ := s.pclient.DeleteUserViaUserAPIWithResponse(ctx, pushInstanceID, "u")
			return r.StatusCode(), r.Body
		},
	} {
		status, b := call()
		var e map[string]any
		_ = json.Unmarshal(b, &e)
		checkStatus(t, status, e, 429, "too_many_requests")
	}
	// Another instance has its own budget; the next second starts afresh.
	if r, _ := s.pclient.PublishToInterestsWithResponse(ctx, quotaInstanceID, nil, body); r.StatusCode() != 200 {
		t.Fatalf("other instance: %d %s", r.StatusCode(), r.Body)
	}
	now = now.Add(time.Second)
	if r, _ := s.pclient.PublishToInterestsWithResponse(ctx, pushInstanceID, nil, body); r.StatusCode() != 200 {
		t.Fatalf("next second: %d %s", r.StatusCode(), r.Body)
	}
}

func TestDeleteUserBothPaths(t *testing.T) {
	s := newPublishServer(t)
	ctx := context.Background()
	bind := func(platform storage.Platform, token, user string) string {
		t.Helper()
		d, _, err := s.db.RegisterDevice(ctx, storage.Device{InstanceID: pushInstanceID, Platform: platform, Token: token, BundleIdentifier: "com.example"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.db.SetDeviceUser(ctx, pushInstanceID, platform, d.ID, user); err != nil {
			t.Fatal(err)
		}
		return d.ID
	}
	exists := func(platform storage.Platform, id string) bool {
		_, err := s.db.GetDevice(ctx, pushInstanceID, platform, id)
		return err == nil
	}
	user := "user with spaces@ü"
	a := bind(storage.PlatformAPNs, "aa01", user)
	f := bind(storage.PlatformFCM, "f:1", user)
	keep := bind(storage.PlatformFCM, "f:2", "someone-else")

	r, err := s.pclient.DeleteUserWithResponse(ctx, pushInstanceID, user)
	if err != nil || r.StatusCode() != 200 || strings.TrimSpace(string(r.Body)) != "{}" {
		t.Fatalf("delete: %v %d %s", err, r.StatusCode(), r.Body)
	}
	if exists(storage.PlatformAPNs, a) || exists(storage.PlatformFCM, f) || !exists(storage.PlatformFCM, keep) {
		t.Fatal("DeleteUser did not delete exactly the user's devices")
	}
	// Again, and a user who never had a device: still 200.
	if r, _ := s.pclient.DeleteUserWithResponse(ctx, pushInstanceID, user); r.StatusCode() != 200 {
		t.Fatalf("delete again: %d %s", r.StatusCode(), r.Body)
	}

	w := bind(storage.PlatformWeb, webToken("https://push.example.com/1"), "node-user")
	r2, err := s.pclient.DeleteUserViaUserAPIWithResponse(ctx, pushInstanceID, "node-user")
	if err != nil || r2.StatusCode() != 200 || strings.TrimSpace(string(r2.Body)) != "{}" {
		t.Fatalf("delete via user api: %v %d %s", err, r2.StatusCode(), r2.Body)
	}
	if exists(storage.PlatformWeb, w) || !exists(storage.PlatformFCM, keep) {
		t.Fatal("DeleteUserViaUserAPI did not delete exactly the user's devices")
	}
	// The path carries the escaped id, as the Node SDK sends it.
	status, body, _ := s.do(t, pushRequest{"DELETE", "/user_api/v1/instances/" + pushInstanceID + "/users/" + url.PathEscape("someone-else"), "", "", "Bearer " + pushSecret})
	checkStatus(t, status, body, 200, "")
	if exists(storage.PlatformFCM, keep) {
		t.Fatal("escaped user id: device kept")
	}
	for _, op := range []string{"deleteuser 200", "deleteuserviauserapi 200"} {
		if !s.pspec.seen[op] {
			t.Errorf("%s not answered: %v", op, s.pspec.seen)
		}
	}
}

// TestPublishSecretKeyComparedExactly: the bearer token must be the secret key
// itself, not one that differs in case, has a prefix or suffix, is cut short
// or empty, nor the key under another scheme; a refused request publishes
// nothing.
func TestPublishSecretKeyComparedExactly(t *testing.T) {
	s := newPublishServer(t)
	ctx := context.Background()
	paths := map[string]string{
		"Interests": publishPrefix + pushInstanceID + "/publishes/interests",
		"Bare":      publishPrefix + pushInstanceID + "/publishes",
		"Users":     publishPrefix + pushInstanceID + "/publishes/users",
	}
	bodies := map[string]string{"Interests": interestsBody("a"), "Bare": interestsBody("a"), "Users": usersBody("u")}
	tests := []struct {
		name          string
		authorization string
		want          int
	}{
		{"OKExactSecret", "Bearer " + pushSecret, 200},
		{"OKSchemeOtherCase", "bearer " + pushSecret, 200},
		{"ErrSecretUpperCase", "Bearer " + strings.ToUpper(pushSecret), 401},
		{"ErrSecretOneLetterOtherCase", "Bearer B" + pushSecret[1:], 401},
		{"ErrSecretWithPrefix", "Bearer x" + pushSecret, 401},
		{"ErrSecretWithSuffix", "Bearer " + pushSecret + "x", 401},
		{"ErrSecretTwice", "Bearer " + pushSecret + pushSecret, 401},
		{"ErrSecretLastCharacterOff", "Bearer " + pushSecret[:len(pushSecret)-1], 401},
		{"ErrSecretFirstCharacterOff", "Bearer " + pushSecret[1:], 401},
		{"ErrSecretHalf", "Bearer " + pushSecret[:len(pushSecret)/2], 401},
		{"ErrSecretOneCharacter", "Bearer " + pushSecret[:1], 401},
		{"ErrSecretEmpty", "Bearer ", 401},
		{"ErrSecretWithoutScheme", pushSecret, 401},
		{"ErrBasicScheme", "Basic " + pushSecret, 401},
		{"ErrBasicSchemeEncoded", "Basic " + base64.StdEncoding.EncodeToString([]byte(pushSecret+":")), 401},
		{"ErrTokenScheme", "Token " + pushSecret, 401},
	}
	for _, tc := range tests {
		for _, op := range []string{"Interests", "Bare", "Users"} {
			t.Run(tc.name+"/"+op, func(t *testing.T) {
				before, err := s.db.UnresolvedPublishes(ctx, 1000)
				if err != nil {
					t.Fatal(err)
				}
				notified := s.notified
				status, body, _ := s.do(t, pushRequest{"POST", paths[op], "application/json", bodies[op], tc.authorization})
				kind := ""
				if tc.want == 401 {
					kind = "incorrect_api_key"
				}
				checkStatus(t, status, body, tc.want, kind)
				after, err := s.db.UnresolvedPublishes(ctx, 1000)
				if err != nil {
					t.Fatal(err)
				}
				published := len(after) - len(before)
				if tc.want == 200 {
					if id, _ := body["publishId"].(string); len(body) != 1 || !strings.HasPrefix(id, publishIDPrefix) || published != 1 || s.notified != notified+1 {
						t.Fatalf("body %v, %d stored, %d notified; want one publish", body, published, s.notified-notified)
					}
					return
				}
				if published != 0 || s.notified != notified {
					t.Fatalf("refused request stored %d publishes and notified %d times", published, s.notified-notified)
				}
			})
		}
	}
	// The refused key cannot read a publish either.
	r, err := s.pclient.PublishToInterestsWithResponse(ctx, pushInstanceID, nil, publishclient.InterestsPublishRequest{Interests: []string{"a"}, Fcm: raw(goodFCM)})
	if err != nil || r.JSON200 == nil {
		t.Fatalf("publish: %v %d %s", err, r.StatusCode(), r.Body)
	}
	get := publishPrefix + pushInstanceID + "/publishes/" + r.JSON200.PublishID
	for _, auth := range []string{"Bearer " + pushSecret[:len(pushSecret)-1], "Bearer " + pushSecret + "x", "Bearer " + strings.ToUpper(pushSecret)} {
		status, body, _ := s.do(t, pushRequest{"GET", get, "", "", auth})
		checkStatus(t, status, body, 401, "incorrect_api_key")
		if _, leaked := body["publishId"]; leaked {
			t.Fatalf("%q read the publish: %v", auth, body)
		}
	}
	status, body, _ := s.do(t, pushRequest{"GET", get, "", "", "Bearer " + pushSecret})
	checkStatus(t, status, body, 200, "")
}
