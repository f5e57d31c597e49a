package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	pushnotifications "github.com/pusher/push-notifications-go"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/storage/testpg"
)

// Two nodes on one PostgreSQL database share their apps: a secret rotated
// through one node's admin API is refused by the other once it reloaded
// (it checks the database every second).
func TestTwoNodesShareTheirAppsOnPostgreSQL(t *testing.T) {
	dsn := testpg.Start(t)
	a := startOpsNode(t, func(c *config.Config) { c.DB = dsn })
	b := startOpsNode(t, func(c *config.Config) { c.DB = dsn })

	if err := goClient(b, "go-sdk-key", "go-sdk-secret").Trigger("news", "before", map[string]int{"n": 1}); err != nil {
		t.Fatalf("trigger through node B before the rotation: %v", err)
	}
	status, body := call(t, http.MethodPost, "http://"+a+"/admin/v1/apps/77/rotate-secret", nil, "Authorization", "Bearer "+testAdminToken)
	if status != http.StatusOK {
		t.Fatalf("rotate-secret on node A: %d %s", status, body)
	}
	var app struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(body, &app); err != nil || app.Secret == "" || app.Secret == "go-sdk-secret" {
		t.Fatalf("rotate-secret answered %s", body)
	}
	rotated := time.Now()
	wait.Until(t, "node B refuses the old secret", func() bool {
		err := goClient(b, "go-sdk-key", "go-sdk-secret").Trigger("news", "old", map[string]int{"n": 2})
		return err != nil && strings.Contains(err.Error(), "401")
	})
	t.Logf("node B refused the old secret %v after node A rotated it", time.Since(rotated).Round(time.Millisecond))
	if err := goClient(b, "go-sdk-key", app.Secret).Trigger("news", "after", map[string]int{"n": 3}); err != nil {
		t.Fatalf("trigger through node B with the new secret: %v", err)
	}
}

// Two nodes on one PostgreSQL database dispatch its publishes: every device
// gets each of two publishes, one accepted by each node, once, though both
// nodes' dispatchers run and the targets take many pages (each publish is
// read under one node's lease; without, the other node would read pages
// too, and steal it). The share each node sent is logged.
func TestTwoNodesDispatchEachPublishOnceOnPostgreSQL(t *testing.T) {
	const devices = 6000
	dsn := testpg.Start(t)
	gw := startGateways(t)
	opts := gw.pushOptions()
	opts.PageSize = 5 // many pages, read over a while
	na, a := serveNodeWith(t, pushConfig(t, gw, dsn), Options{Push: opts})
	_, b := serveNodeWith(t, pushConfig(t, gw, dsn), Options{Push: opts})
	seedDevices(t, na.db, devices-3, "news", webTokens(t, gw))
	// Three more as the client SDKs register them, through node A's Device API.
	register(t, a, "apns", fmt.Sprintf("%064x", devices), "news")
	register(t, a, "fcm", "fcm-registered", "news")
	sub, err := gw.web.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	register(t, a, "web", sub.Token(), "news")
	// One publish through each node, with the Go SDK, at once.
	var ids []string
	for _, base := range []string{b, a} {
		beams, err := pushnotifications.New(beamsInstance, beamsSecret, pushnotifications.WithCustomBaseURL(base))
		if err != nil {
			t.Fatal(err)
		}
		publishID, err := beams.PublishToInterests([]string{"news"}, map[string]any{
			"apns": map[string]any{"aps": map[string]any{"alert": "hi"}},
			"fcm":  map[string]any{"notification": map[string]any{"title": "hi"}},
			"web":  map[string]any{"notification": map[string]any{"title": "hi"}},
		})
		if err != nil {
			t.Fatalf("publish through %s with the Go SDK: %v", base, err)
		}
		ids = append(ids, publishID)
	}
	for _, id := range ids {
		st := waitDone(t, b, id)
		if st.Targeted != devices || st.Sent != devices {
			t.Fatalf("status of %s %+v, want %d targeted and sent", id, st, devices)
		}
	}
	for name, in := range map[string]*pushtest.Inbox{"apns": gw.apns.Inbox, "fcm": gw.fcm.Inbox, "web": gw.web.Inbox} {
		tokens := in.Tokens()
		if len(tokens) != devices/3 || in.Count() != 2*devices/3 {
			t.Fatalf("%s: %d messages to %d devices, want two to each of %d", name, in.Count(), len(tokens), devices/3)
		}
		for tok, n := range tokens {
			if n != 2 {
				t.Fatalf("%s device %s got %d notifications, want one per publish", name, tok, n)
			}
		}
	}
	// The share of the work each node did, from its metrics: together
	// every device once, and no duplicates without a crash.
	var per [2]float64
	for i, u := range []string{a, b} {
		fams := scrape(t, u+"/metrics")
		for _, g := range []string{"apns", "fcm", "web"} {
			per[i] += max(0, value(fams, "herald_push_deliveries_total", "gateway", g, "outcome", "delivered"))
		}
		if d := value(fams, "herald_push_duplicates_total"); d > 0 {
			t.Errorf("node %c counted %v duplicates without a crash", 'A'+i, d)
		}
	}
	t.Logf("deliveries sent by node A: %.0f (%.0f %%), by node B: %.0f", per[0], 100*per[0]/(2*devices), per[1])
	if per[0]+per[1] != 2*devices {
		t.Errorf("the nodes' metrics count %v and %v deliveries, want %d in all", per[0], per[1], 2*devices)
	}
}
