package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/heraldrt/herald/gen/channelsclient"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/storage"
)

// historyApps: app 1 keeps the last 5 events of each channel, app 2 none.
var historyApps = staticApps{
	"key1": {ID: "1", Key: "key1", Secret: "secret1", Enabled: true, HistoryEvents: 5, HistoryTTL: time.Hour},
	"key2": {ID: "2", Key: "key2", Secret: "secret2", Enabled: true},
}

func newHistoryServer(t *testing.T) *testServer {
	t.Helper()
	store := eventlog.NewMemory(eventlog.Limits{})
	return newTestServerWith(t, historyApps, func(o *ChannelsOptions) { o.History = store })
}

// history reads a page of channel's history of app 1 through the generated client.
func (s *testServer) history(t *testing.T, channel string, params channelsclient.ListChannelEventsParams) channelsclient.ChannelEvents {
	t.Helper()
	res, err := s.client.ListChannelEventsWithResponse(context.Background(), "1", channel, &params)
	if err != nil || res.JSON200 == nil {
		t.Fatalf("history of %s: %v %d %s", channel, err, res.StatusCode(), res.Body)
	}
	return *res.JSON200
}

func historyData(evs []channelsclient.HistoryEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Event+":"+e.Data)
	}
	return out
}

func TestHistoryKeepsTriggeredEvents(t *testing.T) {
	s := newHistoryServer(t)
	before := time.Now().UnixMilli()
	for i := range 4 {
		trigger(t, s, "ev", fmt.Sprint(i), "news", "sport")
	}
	res, err := s.client.TriggerBatchEventsWithResponse(context.Background(), "1", nil, channelsclient.TriggerBatchRequest{Batch: []channelsclient.BatchEvent{
		{Name: "ev", Data: "4", Channel: "news"}, {Name: "ev", Data: "5", Channel: "news"},
	}})
	if err != nil || res.StatusCode() != 200 {
		t.Fatalf("batch: %v %d %s", err, res.StatusCode(), res.Body)
	}
	after := time.Now().UnixMilli()

	// Newest first, the last five of news.
	page := s.history(t, "news", channelsclient.ListChannelEventsParams{})
	if got, want := historyData(page.Events), []string{"ev:5", "ev:4", "ev:3", "ev:2", "ev:1"}; !slices.Equal(got, want) {
		t.Fatalf("news: got %v, want %v", got, want)
	}
	if page.NextCursor != nil {
		t.Fatalf("one page holds them all, yet next_cursor is %q", *page.NextCursor)
	}
	for _, e := range page.Events {
		if e.Timestamp < before || e.Timestamp > after {
			t.Fatalf("event %s timestamp %d, want between %d and %d", e.ID, e.Timestamp, before, after)
		}
	}
	// after=<id>: only what came later, oldest first.
	third := page.Events[2].ID // ev:3
	later := s.history(t, "news", channelsclient.ListChannelEventsParams{After: &third})
	if got, want := historyData(later.Events), []string{"ev:4", "ev:5"}; !slices.Equal(got, want) {
		t.Fatalf("after %s: got %v, want %v", third, got, want)
	}
	// Pages of two, oldest first, followed by next_cursor.
	two, oldest := 2, channelsclient.OldestFirst
	var got []string
	params := channelsclient.ListChannelEventsParams{Limit: &two, Direction: &oldest}
	for range 5 {
		page := s.history(t, "news", params)
		got = append(got, historyData(page.Events)...)
		if page.NextCursor == nil {
			break
		}
		params.Cursor = page.NextCursor
	}
	if want := []string{"ev:1", "ev:2", "ev:3", "ev:4", "ev:5"}; !slices.Equal(got, want) {
		t.Fatalf("in pages of two: got %v, want %v", got, want)
	}
	if got := historyData(s.history(t, "sport", channelsclient.ListChannelEventsParams{}).Events); !slices.Equal(got, []string{"ev:3", "ev:2", "ev:1", "ev:0"}) {
		t.Fatalf("sport: got %v", got)
	}
	if got := s.history(t, "quiet", channelsclient.ListChannelEventsParams{}); len(got.Events) != 0 {
		t.Fatalf("a channel nothing was triggered on: %v", got.Events)
	}
}

func TestHistoryKeepsCiphertextAsSent(t *testing.T) {
	s := newHistoryServer(t)
	const sealed = `{"nonce":"bm9uY2Vub25jZW5vbmNlbm9uY2Vub25j","ciphertext":"c2VjcmV0"}`
	trigger(t, s, "secret", sealed, "private-encrypted-room")
	page := s.history(t, "private-encrypted-room", channelsclient.ListChannelEventsParams{})
	if len(page.Events) != 1 || page.Events[0].Data != sealed {
		t.Fatalf("got %v, want the ciphertext as sent", page.Events)
	}
}

func TestHistoryRefusals(t *testing.T) {
	s := newHistoryServer(t)
	trigger(t, s, "ev", "x", "news")
	path := "/apps/1/channels/news/events"
	for _, tt := range []struct {
		name     string
		path     string
		key      string
		query    url.Values
		wantKind string
	}{
		{name: "OffForTheApp", path: "/apps/2/channels/news/events", key: "key2", wantKind: KindHistoryDisabled},
		{name: "LimitZero", query: url.Values{"limit": {"0"}}, wantKind: KindInvalidLimit},
		{name: "LimitOver100", query: url.Values{"limit": {"101"}}, wantKind: KindInvalidLimit},
		{name: "UnknownDirection", query: url.Values{"direction": {"sideways"}}, wantKind: KindInvalidParameter},
		{name: "AfterNotAnID", query: url.Values{"after": {"yesterday"}}, wantKind: KindInvalidEventID},
		{name: "CursorNotAnID", query: url.Values{"cursor": {"1-2-3"}}, wantKind: KindInvalidEventID},
		{name: "AfterAndCursor", query: url.Values{"after": {"1-0"}, "cursor": {"2-0"}}, wantKind: KindInvalidParameter},
		{name: "AfterNewestFirst", query: url.Values{"after": {"1-0"}, "direction": {"newest_first"}}, wantKind: KindInvalidParameter},
		{name: "BadChannelName", path: "/apps/1/channels/a%20b/events", wantKind: KindInvalidChannelName},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, key := cmp.Or(tt.path, path), cmp.Or(tt.key, "key1")
			secret := historyApps[key].Secret
			status, body := s.do(t, rawRequest{method: "GET", path: p, query: tt.query, key: key, secret: secret})
			if status != 400 || body["error"] != tt.wantKind {
				t.Fatalf("got %d %v, want 400 %s", status, body, tt.wantKind)
			}
		})
	}
}

func TestHistoryOffWithoutAStore(t *testing.T) {
	apps := staticApps{"key1": &storage.App{ID: "1", Key: "key1", Secret: "secret1", Enabled: true, HistoryEvents: 5, HistoryTTL: time.Hour}}
	s := newTestServerWith(t, apps, func(*ChannelsOptions) {})
	status, body := s.do(t, rawRequest{method: "GET", path: "/apps/1/channels/news/events", key: "key1", secret: "secret1"})
	if status != 400 || body["error"] != KindHistoryDisabled {
		t.Fatalf("got %d %v, want 400 %s", status, body, KindHistoryDisabled)
	}
}

// trigger publishes one event on chans of app 1 through the generated client.
func trigger(t *testing.T, s *testServer, name, data string, chans ...string) {
	t.Helper()
	res, err := s.client.TriggerEventWithResponse(context.Background(), "1", nil, channelsclient.TriggerEventRequest{Name: &name, Data: &data, Channels: &chans})
	if err != nil || res.StatusCode() != 200 {
		t.Fatalf("trigger: %v %d %s", err, res.StatusCode(), res.Body)
	}
}
