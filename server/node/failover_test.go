package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/gen/channelsclient"
	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testpg"
)

// failoverLoad is what the requests sent through a PostgreSQL failover got:
// every answer's status, the devices registered and the publishes accepted.
type failoverLoad struct {
	mu         sync.Mutex
	statuses   map[string]map[int]int // by kind of request
	registered []string               // ids of devices answered 200
	published  []string               // publish ids answered 200 (publishes to interests)
	pushed     []string               // publish ids of push_if_offline answered 200
	bad        []string               // answers neither 200 nor a proper 503
}

func (l *failoverLoad) count(kind string, status int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.statuses[kind][status]
}

// record notes one answer: 200, or 503 database_unavailable with
// Retry-After; anything else is bad.
func (l *failoverLoad) record(kind string, status int, header http.Header, body []byte, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.statuses[kind] == nil {
		l.statuses[kind] = map[int]int{}
	}
	if err != nil {
		l.bad = append(l.bad, fmt.Sprintf("%s: %v", kind, err))
		return
	}
	l.statuses[kind][status]++
	var e struct{ Error string }
	switch {
	case status == 200:
	case status == 503 && header.Get("Retry-After") != "" && json.Unmarshal(body, &e) == nil && e.Error == "database_unavailable":
	default:
		l.bad = append(l.bad, fmt.Sprintf("%s: %d %s (Retry-After %q)", kind, status, body, header.Get("Retry-After")))
	}
}

// send makes one request without the test's t (it runs in the load's
// goroutines).
func send(method, url string, body any, headers ...string) (int, http.Header, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, nil, err
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req) // against a hang, not a timing
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, out, err
}

// A node on a PostgreSQL primary with a synchronous replica, behind a
// multi-host URL (target_session_attrs=read-write), while Device API
// registrations, triggers (plain, and push_if_offline to a user who is
// offline) and publishes to interests flow: the primary is killed, then the
// replica promoted. Nothing is answered 500: what needs the database while
// there is no primary is 503 database_unavailable with Retry-After, and
// /readyz says not ready until the replica takes writes; plain triggers
// never fail. Afterwards every registration answered 200 is on the new
// primary, every publish answered 200 (and every one stored, whatever its
// answer) is done, and each of its devices got it exactly once.
func TestPostgreSQLFailover(t *testing.T) {
	pair := testpg.StartPair(t)
	gw := startGateways(t)
	n, base := serveNodeWith(t, pushIfOfflineConfig(t, gw, pair.Database(t)), Options{Push: gw.pushOptions()})
	ctx := context.Background()
	root := base + "/device_api/v1/instances/" + beamsInstance
	for i := range 4 {
		register(t, base, "fcm", fmt.Sprintf("news-%d", i), "news")
	}
	bob := register(t, base, "fcm", "bob-fcm")
	token, err := clientauth.BeamsUserTokens{InstanceID: beamsInstance, SecretKey: beamsSecret}.Generate("bob")
	if err != nil {
		t.Fatal(err)
	}
	if status, out := call(t, "PUT", root+"/devices/fcm/"+bob.id+"/user", nil, "Authorization", "Bearer "+token); status != 200 {
		t.Fatalf("set user: %d %s", status, out)
	}
	channels, err := channelsclient.NewClientWithResponses(base, channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner("go-sdk-key", "go-sdk-secret")))
	if err != nil {
		t.Fatal(err)
	}
	ready := func() int {
		status, _, _, err := send("GET", base+"/readyz", nil)
		if err != nil {
			return 0
		}
		return status
	}

	load := &failoverLoad{statuses: map[string]map[int]int{}}
	stop := make(chan struct{})
	running := func() bool {
		select {
		case <-stop:
			return false
		default:
			return true
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; running(); i++ {
			status, h, out, err := send("POST", root+"/devices/fcm", map[string]any{"token": fmt.Sprintf("reg-%d", i)})
			load.record("register", status, h, out, err)
			var res struct{ ID string }
			if status == 200 && json.Unmarshal(out, &res) == nil {
				load.mu.Lock()
				load.registered = append(load.registered, res.ID)
				load.mu.Unlock()
			}
		}
	})
	wg.Go(func() {
		for running() {
			status, h, out, err := send("POST", base+"/publish_api/v1/instances/"+beamsInstance+"/publishes/interests",
				map[string]any{"interests": []string{"news"}, "fcm": map[string]any{"notification": map[string]string{"title": "news"}}},
				"Authorization", "Bearer "+beamsSecret)
			load.record("publish", status, h, out, err)
			var res struct{ PublishID string }
			if status == 200 && json.Unmarshal(out, &res) == nil {
				load.mu.Lock()
				load.published = append(load.published, res.PublishID)
				load.mu.Unlock()
			}
			// Paced well under the instance's 100 publishes a second,
			// which push_if_offline's publishes share.
			time.Sleep(30 * time.Millisecond)
		}
	})
	wg.Go(func() {
		fcm := json.RawMessage(`{"notification":{"title":"for bob"}}`)
		for running() {
			res, err := channels.TriggerEventWithResponse(ctx, "77", nil, channelsclient.TriggerEventRequest{
				Name: ptr("message"), Data: ptr("{}"), Channel: ptr("chat")})
			if err != nil {
				load.record("trigger", 0, nil, nil, err)
			} else if res.StatusCode() != 200 {
				load.record("trigger", res.StatusCode(), res.HTTPResponse.Header, res.Body, fmt.Errorf("a trigger that needs no database: %d %s", res.StatusCode(), res.Body))
			} else {
				load.record("trigger", 200, nil, nil, nil)
			}
			res, err = channels.TriggerEventWithResponse(ctx, "77", nil, channelsclient.TriggerEventRequest{
				Name: ptr("message"), Data: ptr("{}"), Channel: ptr("#server-to-user-bob"), PushIfOffline: &channelsclient.PushIfOffline{Fcm: &fcm}})
			if err != nil {
				load.record("push_if_offline", 0, nil, nil, err)
				continue
			}
			load.record("push_if_offline", res.StatusCode(), res.HTTPResponse.Header, res.Body, nil)
			if res.JSON200 != nil && res.JSON200.PublishID != nil {
				load.mu.Lock()
				load.pushed = append(load.pushed, *res.JSON200.PublishID)
				load.mu.Unlock()
			}
			time.Sleep(30 * time.Millisecond) // as publishes
		}
	})
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)
	// progressed waits until every kind of request got more 200s.
	progressed := func(what string, more int) {
		t.Helper()
		from := map[string]int{}
		for _, k := range []string{"register", "publish", "trigger", "push_if_offline"} {
			from[k] = load.count(k, 200)
		}
		wait.Until(t, what, func() bool {
			for k, c := range from {
				if load.count(k, 200) < c+more {
					return false
				}
			}
			return true
		})
	}

	// noBad fails the test at the first answer that is neither 200 nor a
	// proper 503.
	noBad := func() {
		t.Helper()
		load.mu.Lock()
		defer load.mu.Unlock()
		if len(load.bad) > 0 {
			t.Fatalf("%d answers neither 200 nor 503 database_unavailable, e.g. %s", len(load.bad), strings.Join(load.bad[:min(len(load.bad), 5)], "; "))
		}
	}
	badOr := func(cond func() bool) func() bool {
		return func() bool {
			load.mu.Lock()
			bad := len(load.bad) > 0
			load.mu.Unlock()
			return bad || cond()
		}
	}

	progressed("requests before the failover", 5)
	noBad()
	pair.KillPrimary()
	wait.Until(t, "the node is not ready without a primary", func() bool { return ready() == 503 })
	wait.Until(t, "registrations answered 503 without a primary", badOr(func() bool { return load.count("register", 503) > 0 }))
	noBad()
	pair.Promote()
	wait.Until(t, "the node is ready again by itself", func() bool { return ready() == 200 })
	progressed("requests after the failover", 5)
	stopLoad()
	noBad()
	t.Logf("answers: %v", load.statuses)
	for _, id := range load.registered {
		if status, out := call(t, "GET", root+"/devices/fcm/"+id, nil); status != 200 {
			t.Fatalf("device %s, registered with 200, is not on the new primary: %d %s", id, status, out)
		}
	}
	// Every publish stored, whether answered 200 or 503 (a commit whose
	// answer was lost), is done, and each device got it once.
	var stored []storage.PublishSummary
	wait.Until(t, "every stored publish is done", func() bool {
		list, err := n.db.RecentPublishes(ctx, beamsInstance, 10000)
		if err != nil {
			return false
		}
		for _, p := range list {
			if p.State != storage.PublishDone {
				return false
			}
		}
		stored = list
		return true
	})
	isStored := map[string]bool{}
	for _, p := range stored {
		isStored[p.ID] = true
	}
	got := func(token string) map[string]int {
		ids := map[string]int{}
		for _, m := range gw.fcm.For(token) {
			ids[pusherMeta(t, m).PublishID]++
		}
		return ids
	}
	for who, c := range map[string]struct {
		tokens []string
		ids    []string
	}{
		"news":            {tokens: []string{"news-0", "news-1", "news-2", "news-3"}, ids: load.published},
		"push_if_offline": {tokens: []string{"bob-fcm"}, ids: load.pushed},
	} {
		for _, token := range c.tokens {
			ids := got(token)
			for _, id := range c.ids {
				if ids[id] != 1 {
					t.Fatalf("%s: device %s got publish %s %d times, answered 200: want once", who, token, id, ids[id])
				}
			}
			for id, k := range ids {
				if k != 1 || !isStored[id] {
					t.Fatalf("%s: device %s got publish %s %d times (stored: %v)", who, token, id, k, isStored[id])
				}
			}
		}
	}
}
