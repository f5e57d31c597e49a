package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/gen/channelsclient"
	"github.com/heraldrt/herald/gen/publishclient"
	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/idempotency"
)

// withKey sets the Idempotency-Key header of a request.
func withKey(key string) func(context.Context, *http.Request) error {
	return func(_ context.Context, r *http.Request) error {
		r.Header.Set(IdempotencyKeyHeader, key)
		return nil
	}
}

func TestTriggerIdempotencyKey(t *testing.T) {
	s := newTestServer(t)
	sub := s.subscriber(t, "1", "", "news", "sports")
	ctx := context.Background()
	trigger := func(key, data string, chans ...string) *channelsclient.TriggerEventResponse {
		t.Helper()
		res, err := s.client.TriggerEventWithResponse(ctx, "1", nil, channelsclient.TriggerEventRequest{
			Name: ptr("e"), Data: ptr(data), Channels: &chans, Info: ptr("subscription_count"),
		}, withKey(key))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	first := trigger("k1", "one", "news")
	if first.StatusCode() != 200 || first.HTTPResponse.Header.Get(IdempotentReplayedHeader) != "" {
		t.Fatalf("first trigger: %d %s (replayed %q)", first.StatusCode(), first.Body, first.HTTPResponse.Header.Get(IdempotentReplayedHeader))
	}
	// Another subscriber now: the replay must still say what the first answer said.
	s.subscriber(t, "1", "", "news")
	again := trigger("k1", "one", "news")
	if again.StatusCode() != 200 || string(again.Body) != string(first.Body) || again.HTTPResponse.Header.Get(IdempotentReplayedHeader) != "true" {
		t.Fatalf("repeat: %d %s (replayed %q), want the first answer %s replayed", again.StatusCode(), again.Body, again.HTTPResponse.Header.Get(IdempotentReplayedHeader), first.Body)
	}
	if got := strings.Join(s.received(t, sub), " "); got != "news:e:one" {
		t.Fatalf("subscriber received %q, want the event once", got)
	}

	reused := trigger("k1", "two", "news")
	if reused.StatusCode() != 422 || reused.JSON422 == nil || reused.JSON422.Error != KindIdempotencyKeyReused {
		t.Fatalf("same key, other body: %d %s, want 422 %s", reused.StatusCode(), reused.Body, KindIdempotencyKeyReused)
	}
	// A failed request keeps nothing: its key is free for the corrected one.
	if bad := trigger("k2", "x", "bad channel"); bad.StatusCode() != 400 {
		t.Fatalf("invalid trigger: %d %s", bad.StatusCode(), bad.Body)
	}
	if ok := trigger("k2", "three", "sports"); ok.StatusCode() != 200 {
		t.Fatalf("after a failed request with the key: %d %s, want 200", ok.StatusCode(), ok.Body)
	}
	// Without a key, nothing is remembered.
	for range 2 {
		res, err := s.client.TriggerEventWithResponse(ctx, "1", nil, channelsclient.TriggerEventRequest{Name: ptr("e"), Data: ptr("four"), Channel: ptr("news")})
		if err != nil || res.StatusCode() != 200 {
			t.Fatalf("trigger without a key: %v %v", res, err)
		}
	}
	if got := strings.Join(s.received(t, sub), " "); got != "news:e:four news:e:four sports:e:three" {
		t.Fatalf("subscriber received %q", got)
	}
	// Keys are per app: app 2's k1 is its own.
	c2, err := channelsclient.NewClientWithResponses(s.url, channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner("key2", "secret2")))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c2.TriggerEventWithResponse(ctx, "2", nil, channelsclient.TriggerEventRequest{Name: ptr("e"), Data: ptr("two"), Channel: ptr("news")}, withKey("k1"))
	if err != nil || res.StatusCode() != 200 || res.HTTPResponse.Header.Get(IdempotentReplayedHeader) != "" {
		t.Fatalf("app 2, app 1's key: %v %v", res, err)
	}
}

func TestBatchIdempotencyKeyInFlight(t *testing.T) {
	ctx := context.Background()
	body := channelsclient.TriggerBatchRequest{Batch: []channelsclient.BatchEvent{{Name: "e", Data: "1", Channel: "a"}, {Name: "e", Data: "2", Channel: "a"}}}
	// While the first request is being processed (the hook runs inside
	// it), the same request with the same key is refused with 409.
	var inFlight *channelsclient.TriggerBatchEventsResponse
	var s *testServer // the hook runs once s is set, at the first request
	s = newTestServerWith(t, testApps, func(o *ChannelsOptions) {
		o.OnTrigger = func(_, _, _, data string) {
			if data != "1" || inFlight != nil {
				return
			}
			var err error
			if inFlight, err = s.client.TriggerBatchEventsWithResponse(ctx, "1", nil, body, withKey("b")); err != nil {
				t.Error(err)
			}
		}
	})
	sub := s.subscriber(t, "1", "", "a")
	res, err := s.client.TriggerBatchEventsWithResponse(ctx, "1", nil, body, withKey("b"))
	if err != nil || res.StatusCode() != 200 {
		t.Fatalf("batch: %v %v", res, err)
	}
	if inFlight == nil || inFlight.StatusCode() != 409 || inFlight.JSON409 == nil || inFlight.JSON409.Error != KindIdempotencyKeyInUse {
		t.Fatalf("repeat in flight: %+v, want 409 %s", inFlight, KindIdempotencyKeyInUse)
	}
	res, err = s.client.TriggerBatchEventsWithResponse(ctx, "1", nil, body, withKey("b"))
	if err != nil || res.StatusCode() != 200 || res.HTTPResponse.Header.Get(IdempotentReplayedHeader) != "true" {
		t.Fatalf("repeat once answered: %v %v", res, err)
	}
	if got := strings.Join(s.received(t, sub), " "); got != "a:e:1 a:e:2" {
		t.Fatalf("subscriber received %q, want the batch once", got)
	}
}

func TestIdempotencyKeyInvalid(t *testing.T) {
	s := newTestServer(t)
	for _, key := range []string{"", strings.Repeat("k", idempotency.MaxKeyLength+1), "tab\tkey"} {
		res, err := s.client.TriggerEventWithResponse(context.Background(), "1", nil, channelsclient.TriggerEventRequest{Name: ptr("e"), Data: ptr("d"), Channel: ptr("c")}, withKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode() != 400 || res.JSON400 == nil || res.JSON400.Error != KindInvalidIdempotencyKey {
			t.Errorf("key %q: %d %s, want 400 %s", key, res.StatusCode(), res.Body, KindInvalidIdempotencyKey)
		}
	}
}

func TestPublishIdempotencyKey(t *testing.T) {
	s := newPublishServer(t)
	ctx := context.Background()
	body := publishclient.InterestsPublishRequest{Interests: []string{"news"}, Fcm: raw(goodFCM)}
	first, err := s.pclient.PublishToInterestsWithResponse(ctx, pushInstanceID, &publishclient.PublishToInterestsParams{IdempotencyKey: ptr("p1")}, body)
	if err != nil || first.JSON200 == nil {
		t.Fatalf("publish: %v %v", first, err)
	}
	again, err := s.pclient.PublishToInterestsWithResponse(ctx, pushInstanceID, &publishclient.PublishToInterestsParams{IdempotencyKey: ptr("p1")}, body)
	if err != nil || again.JSON200 == nil || again.JSON200.PublishID != first.JSON200.PublishID || again.HTTPResponse.Header.Get(IdempotentReplayedHeader) != "true" {
		t.Fatalf("repeat: %v %v, want publish %s replayed", again, err, first.JSON200.PublishID)
	}
	if s.notified != 1 {
		t.Fatalf("%d publishes stored, want 1", s.notified)
	}
	// The bare path is another request: the key is taken.
	bare, err := s.pclient.PublishToInterestsBareWithResponse(ctx, pushInstanceID, &publishclient.PublishToInterestsBareParams{IdempotencyKey: ptr("p1")}, body)
	if err != nil || bare.StatusCode() != 422 || bare.JSON422 == nil || bare.JSON422.Error != KindIdempotencyKeyReused {
		t.Fatalf("same key on another path: %v %v, want 422", bare, err)
	}
	users, err := s.pclient.PublishToUsersWithResponse(ctx, pushInstanceID, &publishclient.PublishToUsersParams{IdempotencyKey: ptr("p2")}, publishclient.UsersPublishRequest{Users: []string{"u"}, Fcm: raw(goodFCM)})
	if err != nil || users.JSON200 == nil || users.HTTPResponse.Header.Get(IdempotentReplayedHeader) != "" {
		t.Fatalf("publish to users, new key: %v %v", users, err)
	}
	if s.notified != 2 {
		t.Fatalf("%d publishes stored, want 2", s.notified)
	}
}

// A retry signed anew (another auth_timestamp, so another auth_signature,
// as an SDK retrying after a timeout sends it) is the same request: it is
// replayed, not refused as the key reused for another.
func TestTriggerRetrySignedAnewIsReplayed(t *testing.T) {
	s := newTestServer(t)
	sub := s.subscriber(t, "1", "", "news")
	body := []byte(`{"name":"e","data":"once","channel":"news"}`)
	send := func(at time.Time) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", s.url+"/apps/1/events", bytes.NewReader(body))
		req.URL.RawQuery = clientauth.SignQuery("POST", "/apps/1/events", url.Values{}, body, "key1", "secret1", at)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(IdempotencyKeyHeader, "retry-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	now := time.Now()
	if res := send(now.Add(-time.Minute)); res.StatusCode != 200 || res.Header.Get(IdempotentReplayedHeader) != "" {
		t.Fatalf("first: %d, replayed %q", res.StatusCode, res.Header.Get(IdempotentReplayedHeader))
	}
	if res := send(now); res.StatusCode != 200 || res.Header.Get(IdempotentReplayedHeader) != "true" {
		t.Fatalf("retry signed anew: %d, replayed %q; want the first answer replayed", res.StatusCode, res.Header.Get(IdempotentReplayedHeader))
	}
	if got := strings.Join(s.received(t, sub), " "); got != "news:e:once" {
		t.Fatalf("subscriber received %q, want the event once", got)
	}
}

// A trigger whose handler panics is answered 500 and frees its key: the
// retry with the same key is processed again, not answered with a replay
// of an empty answer.
func TestTriggerRetriedAfterAPanicIsProcessed(t *testing.T) {
	var panicked atomic.Bool
	s := newTestServerWith(t, testApps, func(o *ChannelsOptions) {
		o.OnTrigger = func(_, _, _, _ string) {
			if panicked.CompareAndSwap(false, true) {
				panic("a bug after the publish")
			}
		}
	})
	sub := s.subscriber(t, "1", "", "news")
	trigger := func() *channelsclient.TriggerEventResponse {
		t.Helper()
		res, err := s.client.TriggerEventWithResponse(context.Background(), "1", nil, channelsclient.TriggerEventRequest{
			Name: ptr("e"), Data: ptr("one"), Channels: &[]string{"news"},
		}, withKey("k"))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if first := trigger(); first.StatusCode() != 500 {
		t.Fatalf("the trigger that panicked: %d %s, want 500", first.StatusCode(), first.Body)
	}
	again := trigger()
	if again.StatusCode() != 200 || again.JSON200 == nil || again.HTTPResponse.Header.Get(IdempotentReplayedHeader) != "" {
		t.Fatalf("the retry: %d %q (replayed %q), want 200 processed anew", again.StatusCode(), again.Body, again.HTTPResponse.Header.Get(IdempotentReplayedHeader))
	}
	if got := strings.Join(s.received(t, sub), " "); got != "news:e:one news:e:one" {
		t.Fatalf("subscriber received %q, want the event from each try", got)
	}
}
