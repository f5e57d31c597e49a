package node

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/heraldrt/herald/gen/channelsclient"
	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/httpapi"
	"github.com/heraldrt/herald/server/internal/testredis"
)

// withHistory keeps the last events of each channel of the app from the
// environment, for an hour.
func withHistory(events int) func(*config.Config) {
	return func(c *config.Config) { c.AppHistoryEvents, c.AppHistoryTTL = &events, time.Hour }
}

// historyClient reads channel histories of app 77 on addr (host:port)
// through the generated client, signing as the app.
func historyClient(t *testing.T, addr string) *channelsclient.ClientWithResponses {
	t.Helper()
	c, err := channelsclient.NewClientWithResponses("http://"+addr, channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner("go-sdk-key", "go-sdk-secret")))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readHistory reads channel's events oldest first after the event after
// ("" from the first) in pages of limit, following next_cursor.
func readHistory(t *testing.T, c *channelsclient.ClientWithResponses, channel, after string, limit int) []channelsclient.HistoryEvent {
	t.Helper()
	params := channelsclient.ListChannelEventsParams{Limit: &limit}
	if after != "" {
		params.After = &after
	} else {
		oldest := channelsclient.OldestFirst
		params.Direction = &oldest
	}
	var all []channelsclient.HistoryEvent
	for range 100 {
		res, err := c.ListChannelEventsWithResponse(context.Background(), "77", channel, &params)
		if err != nil || res.JSON200 == nil {
			t.Fatalf("history of %s: %v %d %s", channel, err, res.StatusCode(), res.Body)
		}
		all = append(all, res.JSON200.Events...)
		if res.JSON200.NextCursor == nil {
			return all
		}
		oldest := channelsclient.OldestFirst
		params.After, params.Cursor, params.Direction = nil, res.JSON200.NextCursor, &oldest
	}
	t.Fatal("paging did not end")
	return nil
}

// Events triggered through each of three nodes on one Redis are read back
// on every node once each, in the order they were triggered, with the same
// ids; after=<id> gives what came later.
func TestClusterHistoryOnEveryNode(t *testing.T) {
	rs := testredis.Start(t)
	prefix := fmt.Sprintf("hist%d:", time.Now().UnixNano())
	var addrs []string
	for _, id := range []string{"a", "b", "c"} {
		_, addr := clusterNode(t, rs, prefix, id, withHistory(100))
		addrs = append(addrs, addr)
	}
	const n = 30
	for i := range n {
		// The Go server SDK, through each node in turn; each trigger is
		// answered before the next is sent, so this is their order.
		if err := goClient(addrs[i%3], "go-sdk-key", "go-sdk-secret").Trigger("feed", "tick", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	var first []channelsclient.HistoryEvent
	for i, addr := range addrs {
		got := readHistory(t, historyClient(t, addr), "feed", "", 7)
		if len(got) != n {
			t.Fatalf("node %d reads %d events, want %d", i, len(got), n)
		}
		for j, e := range got {
			if e.Event != "tick" || e.Data != fmt.Sprint(j) {
				t.Fatalf("node %d: event %d is %s %s, want tick %q", i, j, e.Event, e.Data, fmt.Sprint(j))
			}
		}
		if first == nil {
			first = got
		} else if !slices.Equal(got, first) {
			t.Fatalf("node %d reads other events or ids than node 0:\n%v\n%v", i, got, first)
		}
	}
	for i, addr := range addrs {
		later := readHistory(t, historyClient(t, addr), "feed", first[9].ID, 4)
		if !slices.Equal(later, first[10:]) {
			t.Fatalf("node %d: after the 10th event got %d events, want the 20 after it in order", i, len(later))
		}
	}
}

// On one node: the app from the environment keeps its last events; turned
// off through the admin API, its history is refused.
func TestHistoryFromEnvironmentThenOff(t *testing.T) {
	cfg := config.Config{DB: filepath.Join(t.TempDir(), "herald.db"), AppID: "77", AppKey: "go-sdk-key", AppSecret: "go-sdk-secret", AdminToken: testAdminToken}
	withHistory(3)(&cfg)
	_, base := serveNode(t, cfg)
	addr := base[len("http://"):]
	for i := range 5 {
		if err := goClient(addr, "go-sdk-key", "go-sdk-secret").Trigger("feed", "tick", i); err != nil {
			t.Fatal(err)
		}
	}
	var data []string
	for _, e := range readHistory(t, historyClient(t, addr), "feed", "", 100) {
		data = append(data, e.Data)
	}
	if want := []string{"2", "3", "4"}; !slices.Equal(data, want) {
		t.Fatalf("kept %v, want the last three %v", data, want)
	}
	if status, body := call(t, http.MethodPatch, base+"/admin/v1/apps/77", map[string]int{"historyEvents": 0}, "Authorization", "Bearer "+testAdminToken); status != 200 {
		t.Fatalf("turning history off: %d %s", status, body)
	}
	res, err := historyClient(t, addr).ListChannelEventsWithResponse(context.Background(), "77", "feed", nil)
	if err != nil || res.JSON400 == nil || res.JSON400.Error != httpapi.KindHistoryDisabled {
		t.Fatalf("history after turning it off: %v %d %s, want 400 %s", err, res.StatusCode(), res.Body, httpapi.KindHistoryDisabled)
	}
}
