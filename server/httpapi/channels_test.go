package httpapi

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/gen/channels"
	"github.com/heraldrt/herald/gen/channelsclient"
	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/storage"
)

// staticApps is an AppLookup over a fixed set of apps.
type staticApps map[string]*storage.App

func (s staticApps) ByKey(key string) *storage.App { return s[key] }

var testApps = staticApps{
	"key1":     {ID: "1", Key: "key1", Secret: "secret1", Enabled: true, SubscriptionCount: true},
	"key2":     {ID: "2", Key: "key2", Secret: "secret2", Enabled: true, SubscriptionCount: true},
	"disabled": {ID: "3", Key: "disabled", Secret: "secret3", Enabled: false},
	"nocount":  {ID: "4", Key: "nocount", Secret: "secret4", Enabled: true, SubscriptionCount: false},
}

type testServer struct {
	api    *ChannelsAPI
	hub    *hub.Hub
	url    string
	client *channelsclient.ClientWithResponses // signs as app 1
	spec   *specChecker
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	return newTestServerWith(t, testApps, func(*ChannelsOptions) {})
}

// newTestServerWith is newTestServer over apps, with the API's options (an
// in-memory Idempotency guard) set further by configure before the API is
// built.
func newTestServerWith(t *testing.T, apps AppLookup, configure func(*ChannelsOptions)) *testServer {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	h := hub.New(log)
	engine := NewEngine(log)
	spec := newSpecChecker(t, channels.GetSpec)
	engine.Use(spec.middleware)
	opts := ChannelsOptions{Idempotency: idempotency.NewGuard(idempotency.NewMemory(idempotency.Options{}), idempotency.Options{})}
	configure(&opts)
	api := NewChannelsAPI(h, apps, log, opts)
	Mount(engine, Routes{Channels: api})
	srv := httptest.NewServer(engine)
	t.Cleanup(srv.Close)
	client, err := channelsclient.NewClientWithResponses(srv.URL, channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner("key1", "secret1")))
	if err != nil {
		t.Fatal(err)
	}
	return &testServer{api: api, hub: h, url: srv.URL, client: client, spec: spec}
}

// subscriber attaches a connection to the hub, subscribed to the channels
// (presence ones as user), and returns it with its opening frames drained.
func (s *testServer) subscriber(t *testing.T, appID, user string, chans ...string) *hub.Conn {
	t.Helper()
	return subscriber(t, s.hub, appID, user, chans...)
}

// received returns, once delivery has caught up, the event names and data queued for c, as "event:data".
func (s *testServer) received(t *testing.T, c *hub.Conn) []string {
	t.Helper()
	return received(t, s.hub, c)
}

// subscriber attaches a registry connection of appID to h, subscribed to
// chans (presence ones as user), with its opening frames drained.
func subscriber(t *testing.T, h *hub.Hub, appID, user string, chans ...string) *hub.Conn {
	t.Helper()
	c, err := h.Connect(appID, hub.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chans {
		opts := hub.SubscribeOptions{}
		if hub.IsPresence(ch) {
			opts.Member = &hub.Member{UserID: user}
		}
		if err := h.Subscribe(c, ch, opts); err != nil {
			t.Fatal(err)
		}
	}
	c.Take(nil)
	return c
}

// received returns, once h's delivery has caught up, the events queued for
// c, as "channel:event:data", sorted.
func received(t *testing.T, h *hub.Hub, c *hub.Conn) []string {
	t.Helper()
	h.Flush() // delivery is asynchronous
	frames, reason := c.Take(nil)
	if reason != nil {
		t.Fatalf("connection closing: %v", reason)
	}
	var out []string
	for _, f := range frames {
		var ev struct{ Event, Channel, Data string }
		if err := json.Unmarshal(f, &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev.Channel+":"+ev.Event+":"+ev.Data)
	}
	// Events of one channel arrive in order; across channels delivery runs in
	// parallel, so compare sorted.
	sort.Strings(out)
	return out
}

func ptr[T any](v T) *T { return &v }

func TestTriggerDeliversToSubscribers(t *testing.T) {
	s := newTestServer(t)
	a := s.subscriber(t, "1", "", "news", "private-x")
	b := s.subscriber(t, "1", "", "news")
	other := s.subscriber(t, "2", "", "news")
	ctx := context.Background()

	res, err := s.client.TriggerEventWithResponse(ctx, "1", nil, channelsclient.TriggerEventRequest{
		Name: ptr("greet"), Data: ptr(`{"hi":1}`), Channels: &[]string{"news", "private-x", "news"}, SocketID: ptr(b.SocketID()),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode() != 200 || strings.TrimSpace(string(res.Body)) != "{}" {
		t.Fatalf("trigger: %d %s", res.StatusCode(), res.Body)
	}
	if got := strings.Join(s.received(t, a), " "); got != `news:greet:{"hi":1} private-x:greet:{"hi":1}` {
		t.Fatalf("a received %s", got)
	}
	if got := s.received(t, b); len(got) != 0 {
		t.Fatalf("excluded socket received %v", got)
	}
	if got := s.received(t, other); len(got) != 0 {
		t.Fatalf("another app's subscriber received %v", got)
	}
}

func TestTriggerInfo(t *testing.T) {
	s := newTestServer(t)
	s.subscriber(t, "1", "u1", "news", "presence-room")
	s.subscriber(t, "1", "u1", "news", "presence-room")
	s.subscriber(t, "1", "u2", "presence-room")
	res, err := s.client.TriggerEventWithResponse(context.Background(), "1", nil, channelsclient.TriggerEventRequest{
		Name: ptr("e"), Data: ptr("d"), Channels: &[]string{"news", "presence-room", "empty"}, Info: ptr("user_count,subscription_count"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.JSON200 == nil || res.JSON200.Channels == nil {
		t.Fatalf("trigger: %d %s", res.StatusCode(), res.Body)
	}
	got, _ := json.Marshal(res.JSON200.Channels)
	if want := `{"empty":{"subscription_count":0},"news":{"subscription_count":2},"presence-room":{"user_count":2}}`; string(got) != want {
		t.Fatalf("info: got %s, want %s", got, want)
	}
}

func TestTriggerParamsInQueryString(t *testing.T) {
	s := newTestServer(t)
	c := s.subscriber(t, "1", "", "a", "b")
	res, err := s.client.TriggerEventWithBodyWithResponse(context.Background(), "1", &channelsclient.TriggerEventParams{
		Name: ptr("q"), Data: ptr("from-query"), Channels: &[]string{"a", "b"},
	}, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode() != 200 {
		t.Fatalf("%d %s", res.StatusCode(), res.Body)
	}
	if got := strings.Join(s.received(t, c), " "); got != "a:q:from-query b:q:from-query" {
		t.Fatalf("received %s", got)
	}
	// A body field wins over the query.
	res, err = s.client.TriggerEventWithResponse(context.Background(), "1", &channelsclient.TriggerEventParams{Data: ptr("query")},
		channelsclient.TriggerEventRequest{Name: ptr("q"), Data: ptr("body"), Channel: ptr("a")})
	if err != nil || res.StatusCode() != 200 {
		t.Fatalf("%v %d %s", err, res.StatusCode(), res.Body)
	}
	if got := strings.Join(s.received(t, c), " "); got != "a:q:body" {
		t.Fatalf("received %s", got)
	}
}

func TestBatch(t *testing.T) {
	s := newTestServer(t)
	c := s.subscriber(t, "1", "u", "a", "presence-p")
	res, err := s.client.TriggerBatchEventsWithResponse(context.Background(), "1", nil, channelsclient.TriggerBatchRequest{Batch: []channelsclient.BatchEvent{
		{Name: "e1", Data: "1", Channel: "a"},
		{Name: "e2", Data: "2", Channel: "presence-p", Info: ptr("user_count")},
		{Name: "e3", Data: "3", Channel: "a", Info: ptr("subscription_count"), SocketID: ptr(c.SocketID())},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(res.JSON200)
	if want := `{"batch":[{},{"user_count":1},{"subscription_count":1}]}`; string(got) != want {
		t.Fatalf("batch: %d got %s, want %s", res.StatusCode(), got, want)
	}
	if got := strings.Join(s.received(t, c), " "); got != "a:e1:1 presence-p:e2:2" {
		t.Fatalf("received %s", got)
	}
	res, err = s.client.TriggerBatchEventsWithResponse(context.Background(), "1", nil, channelsclient.TriggerBatchRequest{Batch: []channelsclient.BatchEvent{{Name: "e", Data: "", Channel: "a"}}})
	if err != nil || res.StatusCode() != 200 || strings.TrimSpace(string(res.Body)) != "{}" {
		t.Fatalf("batch without info: %v %d %s", err, res.StatusCode(), res.Body)
	}
}

func TestChannelQueries(t *testing.T) {
	s := newTestServer(t)
	s.subscriber(t, "1", "alice", "presence-room", "news", "cache-price")
	s.subscriber(t, "1", "alice", "presence-room")
	s.subscriber(t, "1", "bob", "presence-room", "news")
	ctx := context.Background()

	list, err := s.client.ListChannelsWithResponse(ctx, "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(list.JSON200)
	if want := `{"channels":{"cache-price":{},"news":{},"presence-room":{}}}`; string(got) != want {
		t.Fatalf("list: %d %s", list.StatusCode(), got)
	}
	list, _ = s.client.ListChannelsWithResponse(ctx, "1", &channelsclient.ListChannelsParams{FilterByPrefix: ptr("presence-"), Info: ptr("user_count")})
	got, _ = json.Marshal(list.JSON200)
	if want := `{"channels":{"presence-room":{"user_count":2}}}`; string(got) != want {
		t.Fatalf("presence list: %d %s", list.StatusCode(), got)
	}

	one, _ := s.client.GetChannelWithResponse(ctx, "1", "news", &channelsclient.GetChannelParams{Info: ptr("subscription_count")})
	if strings.TrimSpace(string(one.Body)) != `{"occupied":true,"subscription_count":2}` {
		t.Fatalf("news: %d %s", one.StatusCode(), one.Body)
	}
	one, _ = s.client.GetChannelWithResponse(ctx, "1", "presence-room", &channelsclient.GetChannelParams{Info: ptr("user_count")})
	if strings.TrimSpace(string(one.Body)) != `{"occupied":true,"user_count":2}` {
		t.Fatalf("presence-room: %d %s", one.StatusCode(), one.Body)
	}
	one, _ = s.client.GetChannelWithResponse(ctx, "1", "nobody", nil)
	if strings.TrimSpace(string(one.Body)) != `{"occupied":false}` {
		t.Fatalf("nobody: %d %s", one.StatusCode(), one.Body)
	}
	one, _ = s.client.GetChannelWithResponse(ctx, "1", "cache-price", &channelsclient.GetChannelParams{Info: ptr("cache")})
	if strings.TrimSpace(string(one.Body)) != `{"cache":null,"occupied":true}` {
		t.Fatalf("empty cache: %d %s", one.StatusCode(), one.Body)
	}
	s.client.TriggerEventWithResponse(ctx, "1", nil, channelsclient.TriggerEventRequest{Name: ptr("p"), Data: ptr("42"), Channel: ptr("cache-price")})
	one, _ = s.client.GetChannelWithResponse(ctx, "1", "cache-price", &channelsclient.GetChannelParams{Info: ptr("cache,subscription_count")})
	if one.JSON200 == nil || !one.JSON200.Cache.IsSpecified() {
		t.Fatalf("cache: %d %s", one.StatusCode(), one.Body)
	}
	if cache := one.JSON200.Cache.MustGet(); cache.Data != "42" || cache.TTL < 1790 || cache.TTL > 1800 || *one.JSON200.SubscriptionCount != 1 {
		t.Fatalf("cache: %s", one.Body)
	}

	users, _ := s.client.ListPresenceUsersWithResponse(ctx, "1", "presence-room")
	if strings.TrimSpace(string(users.Body)) != `{"users":[{"id":"alice"},{"id":"bob"}]}` {
		t.Fatalf("users: %d %s", users.StatusCode(), users.Body)
	}
	users, _ = s.client.ListPresenceUsersWithResponse(ctx, "1", "presence-empty")
	if strings.TrimSpace(string(users.Body)) != `{"users":[]}` {
		t.Fatalf("empty users: %d %s", users.StatusCode(), users.Body)
	}
}

func TestTerminateUserConnections(t *testing.T) {
	s := newTestServer(t)
	c := s.subscriber(t, "1", "")
	if err := s.hub.SignIn(c, "user-7", nil); err != nil {
		t.Fatal(err)
	}
	res, err := s.client.TerminateUserConnectionsWithResponse(context.Background(), "1", "user-7")
	if err != nil || res.StatusCode() != 200 || strings.TrimSpace(string(res.Body)) != "{}" {
		t.Fatalf("%v %d %s", err, res.StatusCode(), res.Body)
	}
	if _, reason := c.Take(nil); reason == nil || reason.Code != 4009 {
		t.Fatalf("close reason %v, want 4009", reason)
	}
}

func TestServerToUserChannel(t *testing.T) {
	s := newTestServer(t)
	c := s.subscriber(t, "1", "", "#server-to-user-42")
	res, err := s.client.TriggerEventWithResponse(context.Background(), "1", nil, channelsclient.TriggerEventRequest{Name: ptr("hello"), Data: ptr("{}"), Channel: ptr("#server-to-user-42")})
	if err != nil || res.StatusCode() != 200 {
		t.Fatalf("%v %d %s", err, res.StatusCode(), res.Body)
	}
	if got := strings.Join(s.received(t, c), " "); got != "#server-to-user-42:hello:{}" {
		t.Fatalf("received %s", got)
	}
}

// rawRequest sends a request signed (or not) by hand, for the error rows the
// typed client cannot produce.
type rawRequest struct {
	method, path, contentType string
	query                     url.Values
	body                      string
	key, secret               string // signing credentials; key "" sends it unsigned
	at                        time.Time
	editQuery                 func(url.Values)
}

func (s *testServer) do(t *testing.T, r rawRequest) (int, map[string]any) {
	t.Helper()
	if r.at.IsZero() {
		r.at = time.Now()
	}
	if r.query == nil {
		r.query = url.Values{}
	}
	raw := r.query.Encode()
	if r.key != "" {
		raw = clientauth.SignQuery(r.method, r.path, r.query, []byte(r.body), r.key, r.secret, r.at)
	}
	if r.editQuery != nil {
		q, _ := url.ParseQuery(raw)
		r.editQuery(q)
		raw = q.Encode()
	}
	req, err := http.NewRequest(r.method, s.url+r.path+"?"+raw, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatalf("%s %s: %d with a body that is not a JSON object: %v", r.method, r.path, res.StatusCode, err)
	}
	return res.StatusCode, body
}

func eventJSON(name, data string, chans ...string) string {
	b, _ := json.Marshal(map[string]any{"name": name, "data": data, "channels": chans})
	return string(b)
}

func TestErrors(t *testing.T) {
	s := newTestServer(t)
	post := func(path, body string) rawRequest {
		return rawRequest{method: "POST", path: path, body: body, contentType: "application/json", key: "key1", secret: "secret1"}
	}
	get := func(path string, query url.Values) rawRequest {
		return rawRequest{method: "GET", path: path, query: query, key: "key1", secret: "secret1"}
	}
	with := func(r rawRequest, f func(*rawRequest)) rawRequest { f(&r); return r }
	good := eventJSON("e", "d", "c")
	manyChannels := make([]string, 101)
	for i := range manyChannels {
		manyChannels[i] = "c" + strconv.Itoa(i)
	}
	batch := func(n int) string {
		items := make([]map[string]string, n)
		for i := range items {
			items[i] = map[string]string{"name": "e", "data": "d", "channel": "c"}
		}
		b, _ := json.Marshal(map[string]any{"batch": items})
		return string(b)
	}
	tests := []struct {
		name       string
		req        rawRequest
		wantStatus int
		wantKind   string
	}{
		{"OK", post("/apps/1/events", good), 200, ""},
		{"ErrUnsigned", with(post("/apps/1/events", good), func(r *rawRequest) { r.key = "" }), 401, "missing_auth_param"},
		{"ErrMissingSignature", with(post("/apps/1/events", good), func(r *rawRequest) { r.editQuery = func(q url.Values) { q.Del("auth_signature") } }), 401, "missing_auth_param"},
		{"ErrUnknownKey", with(post("/apps/1/events", good), func(r *rawRequest) { r.key = "nobody" }), 401, "unknown_auth_key"},
		{"ErrKeyOfAnotherApp", with(post("/apps/1/events", good), func(r *rawRequest) { r.key, r.secret = "key2", "secret2" }), 401, "auth_key_app_mismatch"},
		{"ErrWrongSecret", with(post("/apps/1/events", good), func(r *rawRequest) { r.secret = "wrong" }), 401, "invalid_signature"},
		{"ErrOldTimestamp", with(post("/apps/1/events", good), func(r *rawRequest) { r.at = time.Now().Add(-11 * time.Minute) }), 401, "invalid_auth_timestamp"},
		{"ErrFutureTimestamp", with(post("/apps/1/events", good), func(r *rawRequest) { r.at = time.Now().Add(11 * time.Minute) }), 401, "invalid_auth_timestamp"},
		{"ErrBodyMD5", with(post("/apps/1/events", good), func(r *rawRequest) {
			r.editQuery = func(q url.Values) { sum := md5.Sum([]byte("other")); q.Set("body_md5", hex.EncodeToString(sum[:])) }
		}), 401, "invalid_body_md5"},
		{"ErrBadAuthVersion", with(post("/apps/1/events", good), func(r *rawRequest) { r.editQuery = func(q url.Values) { q.Set("auth_version", "2") } }), 401, "invalid_auth_version"},
		{"ErrDisabledApp", with(post("/apps/3/events", good), func(r *rawRequest) { r.key, r.secret = "disabled", "secret3" }), 403, "app_disabled"},
		{"ErrDataTooLarge", post("/apps/1/events", eventJSON("e", strings.Repeat("x", 10241), "c")), 413, "data_too_large"},
		{"OKDataAtLimit", post("/apps/1/events", eventJSON("e", strings.Repeat("x", 10240), "c")), 200, ""},
		{"ErrBodyTooLarge", post("/apps/1/events", strings.Repeat(" ", MaxRequestBodyBytes+1)), 413, "body_too_large"},
		{"ErrTooManyChannels", post("/apps/1/events", eventJSON("e", "d", manyChannels...)), 400, "too_many_channels"},
		{"OKHundredChannels", post("/apps/1/events", eventJSON("e", "d", manyChannels[:100]...)), 200, ""},
		{"ErrNoChannels", post("/apps/1/events", `{"name":"e","data":"d"}`), 400, "missing_channels"},
		{"ErrChannelAndChannels", post("/apps/1/events", `{"name":"e","data":"d","channel":"a","channels":["b"]}`), 400, "ambiguous_channels"},
		{"ErrMissingName", post("/apps/1/events", `{"data":"d","channel":"a"}`), 400, "missing_name"},
		{"ErrMissingData", post("/apps/1/events", `{"name":"e","channel":"a"}`), 400, "missing_data"},
		{"ErrReservedEventName", post("/apps/1/events", eventJSON("pusher:x", "d", "c")), 400, "invalid_event_name"},
		{"ErrLongEventName", post("/apps/1/events", eventJSON(strings.Repeat("e", 201), "d", "c")), 400, "invalid_event_name"},
		{"ErrChannelNameSpace", post("/apps/1/events", eventJSON("e", "d", "a b")), 400, "invalid_channel_name"},
		{"ErrChannelNameTooLong", post("/apps/1/events", eventJSON("e", "d", strings.Repeat("c", 201))), 400, "invalid_channel_name"},
		{"ErrBadSocketID", post("/apps/1/events", `{"name":"e","data":"d","channel":"a","socket_id":"abc"}`), 400, "invalid_socket_id"},
		{"ErrUnknownInfo", post("/apps/1/events", `{"name":"e","data":"d","channel":"a","info":"bogus"}`), 400, "invalid_info"},
		{"ErrCacheInfoOnTrigger", post("/apps/1/events", `{"name":"e","data":"d","channel":"cache-a","info":"cache"}`), 400, "invalid_info"},
		{"ErrSubscriptionCountDisabled", with(post("/apps/4/events", `{"name":"e","data":"d","channel":"a","info":"subscription_count"}`), func(r *rawRequest) { r.key, r.secret = "nocount", "secret4" }), 400, "subscription_count_disabled"},
		{"ErrMalformedJSON", post("/apps/1/events", `{"name":`), 400, "invalid_request"},
		{"ErrWrongJSONType", post("/apps/1/events", `{"name":1,"data":"d","channel":"a"}`), 400, "invalid_request"},
		{"ErrWrongChannelsType", post("/apps/1/events", `{"name":"e","data":"d","channels":"a"}`), 400, "invalid_request"},
		{"ErrBodyNotObject", post("/apps/1/events", `["e"]`), 400, "invalid_request"},
		{"ErrNullName", post("/apps/1/events", `{"name":null,"data":"d","channel":"a"}`), 400, "missing_name"},
		{"ErrWhitespaceBody", post("/apps/1/events", " \n"), 400, "missing_name"},
		{"OKUnicodeEscapes", post("/apps/1/events", `{"name":"\u0065","data":"\ud83d\ude80","channel":"a"}`), 200, ""},
		{"OKMemberOtherCase", post("/apps/1/events", `{"Name":"e","DATA":"d","channel":"a"}`), 200, ""},
		{"OKUnknownMember", post("/apps/1/events", `{"name":"e","data":"d","channel":"a","extra":[1,{}]}`), 200, ""},
		{"ErrWrongContentType", with(post("/apps/1/events", good), func(r *rawRequest) { r.contentType = "text/plain" }), 400, "invalid_content_type"},
		{"ErrMissingContentType", with(post("/apps/1/events", good), func(r *rawRequest) { r.contentType = "" }), 400, "invalid_content_type"},
		{"OKContentTypeCharset", with(post("/apps/1/events", good), func(r *rawRequest) { r.contentType = "application/json; charset=utf-8" }), 200, ""},
		{"ErrBatchTooMany", post("/apps/1/batch_events", batch(11)), 400, "too_many_events"},
		{"OKBatchTen", post("/apps/1/batch_events", batch(10)), 200, ""},
		{"ErrBatchEmpty", post("/apps/1/batch_events", batch(0)), 400, "empty_batch"},
		{"ErrBatchMissing", post("/apps/1/batch_events", `{}`), 400, "missing_batch"},
		{"ErrBatchNoBody", with(post("/apps/1/batch_events", ""), func(r *rawRequest) { r.contentType = "" }), 400, "invalid_request"},
		{"ErrBatchDataTooLarge", post("/apps/1/batch_events", `{"batch":[{"name":"e","data":"`+strings.Repeat("x", 10241)+`","channel":"c"}]}`), 413, "data_too_large"},
		{"ErrBatchBadChannel", post("/apps/1/batch_events", `{"batch":[{"name":"e","data":"d","channel":"c"},{"name":"e","data":"d","channel":"no way"}]}`), 400, "invalid_channel_name"},
		{"ErrListUserCountWithoutPrefix", get("/apps/1/channels", url.Values{"info": {"user_count"}}), 400, "invalid_info"},
		{"ErrListUserCountOtherPrefix", get("/apps/1/channels", url.Values{"info": {"user_count"}, "filter_by_prefix": {"private-"}}), 400, "invalid_info"},
		{"ErrListSubscriptionCount", get("/apps/1/channels", url.Values{"info": {"subscription_count"}}), 400, "invalid_info"},
		{"OKListPresenceUserCount", get("/apps/1/channels", url.Values{"info": {"user_count"}, "filter_by_prefix": {"presence-"}}), 200, ""},
		{"ErrChannelUserCountOnPublic", get("/apps/1/channels/news", url.Values{"info": {"user_count"}}), 400, "invalid_info"},
		{"ErrChannelSubscriptionCountOnPresence", get("/apps/1/channels/presence-x", url.Values{"info": {"subscription_count"}}), 400, "invalid_info"},
		{"ErrChannelCacheOnNonCache", get("/apps/1/channels/news", url.Values{"info": {"cache"}}), 400, "invalid_info"},
		{"ErrChannelUnknownInfo", get("/apps/1/channels/news", url.Values{"info": {"everything"}}), 400, "invalid_info"},
		{"ErrChannelInvalidName", get("/apps/1/channels/bad%20name", nil), 400, "invalid_channel_name"},
		{"ErrUsersOnPublic", get("/apps/1/channels/news/users", nil), 400, "not_presence_channel"},
		{"OKUsersOnPresence", get("/apps/1/channels/presence-x/users", nil), 200, ""},
		{"OKTerminateEmptyObject", post("/apps/1/users/u/terminate_connections", "{}"), 200, ""},
		{"OKTerminateNoBody", with(post("/apps/1/users/u/terminate_connections", ""), func(r *rawRequest) { r.contentType = "" }), 200, ""},
		{"ErrTerminateBody", post("/apps/1/users/u/terminate_connections", "[1]"), 400, "invalid_body"},
		{"ErrNoRoute", get("/apps/1/nothing", nil), 404, "not_found"},
		{"ErrMethod", rawRequest{method: "DELETE", path: "/apps/1/events"}, 405, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := s.do(t, tt.req)
			if status != tt.wantStatus {
				t.Fatalf("status %d, want %d (body %v)", status, tt.wantStatus, body)
			}
			if tt.wantKind == "" {
				return
			}
			kind, _ := body["error"].(string)
			desc, _ := body["description"].(string)
			if kind != tt.wantKind || desc == "" || len(body) != 2 || strings.Contains(desc, "Go ") || strings.Contains(desc, "struct") {
				t.Fatalf("body %v, want error %q with a description and nothing else", body, tt.wantKind)
			}
		})
	}
}

func TestEveryOperationAndStatusIsExercised(t *testing.T) {
	// The contract tests above must between them answer every operation with
	// 200 and its main error statuses; this guards against the table shrinking.
	s := newTestServer(t)
	ctx := context.Background()
	s.client.TriggerEventWithResponse(ctx, "1", nil, channelsclient.TriggerEventRequest{Name: ptr("e"), Data: ptr("d"), Channel: ptr("c")})
	s.client.TriggerBatchEventsWithResponse(ctx, "1", nil, channelsclient.TriggerBatchRequest{Batch: []channelsclient.BatchEvent{{Name: "e", Data: "d", Channel: "c"}}})
	s.client.ListChannelsWithResponse(ctx, "1", nil)
	s.client.GetChannelWithResponse(ctx, "1", "c", nil)
	s.client.ListPresenceUsersWithResponse(ctx, "1", "presence-c")
	s.client.TerminateUserConnectionsWithResponse(ctx, "1", "u")
	for _, op := range []string{"triggerEvent", "triggerBatchEvents", "listChannels", "getChannel", "listPresenceUsers", "terminateUserConnections"} {
		if !s.spec.seen[strings.ToLower(op)+" 200"] {
			t.Errorf("%s was not answered with 200", op)
		}
	}
}

func TestIsJSONContentTypeMatchesParseMediaType(t *testing.T) {
	for _, header := range []string{
		"application/json", "APPLICATION/JSON", "Application/Json", "application/json; charset=utf-8",
		"application/json ", " application/json", "application/json;", "application/jſon",
		"application/jsonx", "text/plain", "", "application/", ";",
	} {
		mt, _, err := mime.ParseMediaType(header)
		if want := err == nil && mt == "application/json"; isJSONContentType(header) != want {
			t.Errorf("isJSONContentType(%q) = %v, want %v", header, !want, want)
		}
	}
}

// TestTruncatedSignatureRefused: an auth_signature cut short (by its last hex
// digit, its last byte, or half) or lengthened is refused through the router
// with 401 and the error body, and the event reaches no one.
func TestTruncatedSignatureRefused(t *testing.T) {
	s := newTestServer(t)
	c := s.subscriber(t, "1", "", "news")
	edit := func(f func(sig string) string) func(url.Values) {
		return func(q url.Values) { q.Set("auth_signature", f(q.Get("auth_signature"))) }
	}
	tests := []struct {
		name    string
		editSig func(url.Values)
		want    int
	}{
		{"OKWholeSignature", nil, 200},
		{"ErrLastHexDigitOff", edit(func(sig string) string { return sig[:len(sig)-1] }), 401},
		{"ErrLastByteOff", edit(func(sig string) string { return sig[:len(sig)-2] }), 401},
		{"ErrHalf", edit(func(sig string) string { return sig[:len(sig)/2] }), 401},
		{"ErrFirstHexDigitOff", edit(func(sig string) string { return sig[1:] }), 401},
		{"ErrOneHexDigit", edit(func(sig string) string { return sig[:1] }), 401},
		{"ErrExtraHexDigit", edit(func(sig string) string { return sig + "0" }), 401},
		{"ErrExtraByte", edit(func(sig string) string { return sig + "00" }), 401},
	}
	for _, tt := range tests {
		for _, op := range []struct{ name, path, body, want string }{
			{"Trigger", "/apps/1/events", eventJSON("e", tt.name, "news"), "news:e:" + tt.name},
			{"Batch", "/apps/1/batch_events", `{"batch":[{"name":"b","data":"` + tt.name + `","channel":"news"}]}`, "news:b:" + tt.name},
		} {
			t.Run(tt.name+"/"+op.name, func(t *testing.T) {
				status, body := s.do(t, rawRequest{method: "POST", path: op.path, body: op.body, contentType: "application/json",
					key: "key1", secret: "secret1", editQuery: tt.editSig})
				// Drained before any check, so that a failure leaves no
				// delivery behind for the next case.
				got := strings.Join(s.received(t, c), " ")
				if status != tt.want {
					t.Fatalf("status %d, want %d (body %v, delivered %q)", status, tt.want, body, got)
				}
				if tt.want == 200 {
					if got != op.want {
						t.Fatalf("subscriber received %q, want %q", got, op.want)
					}
					return
				}
				kind, _ := body["error"].(string)
				desc, _ := body["description"].(string)
				if kind != "invalid_signature" || desc == "" || len(body) != 2 {
					t.Fatalf("body %v, want error %q with a description and nothing else", body, "invalid_signature")
				}
				if got != "" {
					t.Fatalf("refused request delivered %q", got)
				}
			})
		}
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

// A zero ChannelsOptions gets a trigger hook that does nothing, since every
// publish calls it; a hook that is set is kept.
func TestChannelsOptionsDefaults(t *testing.T) {
	if (ChannelsOptions{}).WithDefaults().OnTrigger == nil {
		t.Fatal("no trigger hook by default")
	}
	var told string
	o := ChannelsOptions{OnTrigger: func(appID, _, _, _ string) { told = appID }}.WithDefaults()
	if o.OnTrigger("1", "news", "e", "d"); told != "1" {
		t.Fatalf("the hook set was told %q, want 1", told)
	}
}
