package node

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/httpapi"
	"github.com/heraldrt/herald/storage/testpg"
)

// Two nodes on one PostgreSQL database hold the Publish API's rate limit of
// an instance between them: publishes sent at once through both get one
// burst accepted in all, not one per node, and the rest are refused with
// 429 and the error body, without Retry-After.
//
// The nodes read the real clock, so the bucket refills while the requests
// run: at most PublishRateLimit a second of the time between the first
// request sent and the last answer, on top of the burst. The bound holds
// however slow the machine. A limit per node exceeds it: each node accepts
// a burst and refills of its own, twice the shared amount, as long as it
// has requests left to accept (with 300 a node, unless they took over 5 s).
func TestTwoNodesShareThePublishRateLimitOnPostgreSQL(t *testing.T) {
	const (
		perNode = 300 // requests sent through each node
		workers = 25  // per node, each sending perNode/workers one after another
	)
	dsn := testpg.Start(t)
	gw := startGateways(t)
	_, a := serveNodeWith(t, pushConfig(t, gw, dsn), Options{Push: gw.pushOptions()})
	_, b := serveNodeWith(t, pushConfig(t, gw, dsn), Options{Push: gw.pushOptions()})

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer client.CloseIdleConnections()
	type answer struct {
		node   string
		status int
		body   string
		retry  string
		err    error
	}
	answers := make(chan answer, 2*perNode)
	body := `{"interests":["news"],"fcm":{"notification":{"title":"hi"}}}`
	send := func(node string) answer {
		req, err := http.NewRequest(http.MethodPost, node+"/publish_api/v1/instances/"+beamsInstance+"/publishes/interests", strings.NewReader(body))
		if err != nil {
			return answer{err: err}
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+beamsSecret)
		resp, err := client.Do(req)
		if err != nil {
			return answer{node: node, err: err}
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		return answer{node, resp.StatusCode, string(out), resp.Header.Get("Retry-After"), err}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, node := range []string{a, b} {
		for range workers {
			wg.Go(func() {
				<-start
				for range perNode / workers {
					answers <- send(node)
				}
			})
		}
	}
	began := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)
	close(answers)

	accepted := map[string]int{}
	refused := 0
	wantRefusal := map[string]string{"error": httpapi.KindTooManyRequests,
		"description": fmt.Sprintf("More than %d requests per second on this instance; slow down.", httpapi.PublishRateLimit)}
	for ans := range answers {
		switch {
		case ans.err != nil:
			t.Fatalf("publish through %s: %v", ans.node, ans.err)
		case ans.status == http.StatusOK:
			var ok struct {
				PublishID string `json:"publishId"`
			}
			if err := json.Unmarshal([]byte(ans.body), &ok); err != nil || ok.PublishID == "" {
				t.Fatalf("200 from %s with %s", ans.node, ans.body)
			}
			accepted[ans.node]++
		case ans.status == http.StatusTooManyRequests:
			var e map[string]string
			if err := json.Unmarshal([]byte(ans.body), &e); err != nil || !maps.Equal(e, wantRefusal) || ans.retry != "" {
				t.Fatalf("429 from %s with Retry-After %q and %s, want none and %v", ans.node, ans.retry, ans.body, wantRefusal)
			}
			refused++
		default:
			t.Fatalf("publish through %s answered %d %s", ans.node, ans.status, ans.body)
		}
	}
	total := accepted[a] + accepted[b]
	// Whole tokens refilled between the first request and the last answer;
	// the nodes count in milliseconds, one more at most for the rounding.
	refill := int(elapsed.Milliseconds()+1) * httpapi.PublishRateLimit / 1000
	t.Logf("%d publishes sent in %v: %d accepted (%d by node A, %d by node B), %d refused; at most %d + %d refilled allowed",
		2*perNode, elapsed.Round(time.Millisecond), total, accepted[a], accepted[b], refused, httpapi.PublishRateLimit, refill)
	if total < httpapi.PublishRateLimit || total > httpapi.PublishRateLimit+refill {
		t.Fatalf("%d publishes accepted over both nodes in %v, want the burst of %d and at most %d refilled",
			total, elapsed.Round(time.Millisecond), httpapi.PublishRateLimit, refill)
	}
	// Each node's metrics count the refusals it answered, and no database
	// error.
	counted := 0.0
	for _, u := range []string{a, b} {
		fams := scrape(t, u+"/metrics")
		counted += max(0, value(fams, "herald_rate_limited_total", "limit", "publish_api"))
		if v := value(fams, "herald_publish_rate_limit_errors_total"); v != 0 {
			t.Errorf("%s: herald_publish_rate_limit_errors_total %v, want 0", u, v)
		}
	}
	if int(counted) != refused {
		t.Errorf("the nodes' metrics count %v refusals, want the %d answered", counted, refused)
	}
}
