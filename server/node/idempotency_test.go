package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pusher/pusher-http-go/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/gen/publishclient"
	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/httpapi"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// keyTransport adds an Idempotency-Key to every request it carries and
// keeps each answer's Idempotent-Replayed header: the Go server SDK takes
// an http.Client, which is how an application sets the header through it.
type keyTransport struct {
	key string

	mu       sync.Mutex
	replayed []string
}

func (k *keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(httpapi.IdempotencyKeyHeader, k.key)
	res, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		k.mu.Lock()
		k.replayed = append(k.replayed, res.Header.Get(httpapi.IdempotentReplayedHeader))
		k.mu.Unlock()
	}
	return res, err
}

// sdkWithKey is the Go server SDK on addr sending key with every request.
func sdkWithKey(addr, key string) (*pusher.Client, *keyTransport) {
	kt := &keyTransport{key: key}
	c := goClient(addr, "go-sdk-key", "go-sdk-secret")
	c.HTTPClient = &http.Client{Transport: kt, Timeout: 10 * time.Second}
	return c, kt
}

// A trigger retried with its Idempotency-Key on another node of a cluster
// reaches the subscriber once; the same key with other data is 422.
func TestClusterTriggerRetriedOnAnotherNode(t *testing.T) {
	rs := testredis.Start(t)
	prefix := fmt.Sprintf("idem%d:", time.Now().UnixNano())
	_, addrA := clusterNode(t, rs, prefix, "a")
	b, addrB := clusterNode(t, rs, prefix, "b")
	sub := subscriber(t, b.Hub(), "", "orders")

	first, ktA := sdkWithKey(addrA, "order-1")
	if err := first.Trigger("orders", "created", map[string]int{"id": 1}); err != nil {
		t.Fatal(err)
	}
	retry, ktB := sdkWithKey(addrB, "order-1")
	if err := retry.Trigger("orders", "created", map[string]int{"id": 1}); err != nil {
		t.Fatalf("the retry on node b: %v", err)
	}
	if ktA.replayed[0] != "" || ktB.replayed[0] != "true" {
		t.Fatalf("Idempotent-Replayed: %q on the first, %q on the retry; want none, then true", ktA.replayed[0], ktB.replayed[0])
	}
	err := retry.Trigger("orders", "created", map[string]int{"id": 2})
	if err == nil || !strings.Contains(err.Error(), "422") || !strings.Contains(err.Error(), httpapi.KindIdempotencyKeyReused) {
		t.Fatalf("the same key with other data: %v, want 422 %s", err, httpapi.KindIdempotencyKeyReused)
	}
	// A trigger without a key after them: once it arrives, whatever the
	// retries had sent would have arrived before it (one stream, in order).
	if err := goClient(addrA, "go-sdk-key", "go-sdk-secret").Trigger("orders", "marker", "m"); err != nil {
		t.Fatal(err)
	}
	var got string
	wait.Until(t, "node b's subscriber gets the marker", func() bool {
		got += frames(t, b.Hub(), sub)
		return strings.Contains(got, `"event":"marker"`)
	})
	if n := strings.Count(got, `"event":"created"`); n != 1 {
		t.Fatalf("the subscriber got the event %d times, want once:\n%s", n, got)
	}
}

// A Beams publish retried with its Idempotency-Key through the generated
// client is one publish, also after the node restarts on the same database.
func TestPublishRetriedAcrossRestart(t *testing.T) {
	gw := startGateways(t)
	cfg := pushConfig(t, gw, filepath.Join(t.TempDir(), "herald.db"))
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	n, err := New(context.Background(), cfg, log, Options{Push: gw.pushOptions()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	register(t, base, "fcm", "fcm-1", "news")

	client := func(base string) *publishclient.ClientWithResponses {
		c, err := publishclient.NewClientWithResponses(base, publishclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+beamsSecret)
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	body := publishclient.InterestsPublishRequest{Interests: []string{"news"}, Fcm: rawJSON(`{"notification":{"title":"once"}}`)}
	key := &publishclient.PublishToInterestsParams{IdempotencyKey: ptr("publish-1")}
	first, err := client(base).PublishToInterestsWithResponse(context.Background(), beamsInstance, key, body)
	if err != nil || first.JSON200 == nil {
		t.Fatalf("publish: %v %v", first, err)
	}
	waitDone(t, base, first.JSON200.PublishID)

	// The node stops; a new one starts on the same database file.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, base2 := serveNodeWith(t, cfg, Options{Push: gw.pushOptions()})
	again, err := client(base2).PublishToInterestsWithResponse(context.Background(), beamsInstance, key, body)
	if err != nil || again.JSON200 == nil || again.JSON200.PublishID != first.JSON200.PublishID || again.HTTPResponse.Header.Get(httpapi.IdempotentReplayedHeader) != "true" {
		t.Fatalf("the retry after a restart: %v %v, want publish %s replayed", again, err, first.JSON200.PublishID)
	}
	other, err := client(base2).PublishToInterestsWithResponse(context.Background(), beamsInstance, key,
		publishclient.InterestsPublishRequest{Interests: []string{"news"}, Fcm: rawJSON(`{"notification":{"title":"other"}}`)})
	if err != nil || other.StatusCode() != 422 {
		t.Fatalf("the key with another body: %v %v, want 422", other, err)
	}
	marker, err := client(base2).PublishToInterestsWithResponse(context.Background(), beamsInstance, nil,
		publishclient.InterestsPublishRequest{Interests: []string{"news"}, Fcm: rawJSON(`{"notification":{"title":"marker"}}`)})
	if err != nil || marker.JSON200 == nil {
		t.Fatalf("a publish without a key: %v %v", marker, err)
	}
	waitDone(t, base2, marker.JSON200.PublishID)
	if got := len(gw.fcm.For("fcm-1")); got != 2 {
		t.Fatalf("the device got %d notifications, want 2 (the publish once, the marker)", got)
	}
}

func ptr[T any](v T) *T { return &v }

func rawJSON(s string) *json.RawMessage {
	m := json.RawMessage(s)
	return &m
}

// HERALD_IDEMPOTENCY_MAX_KEYS and HERALD_IDEMPOTENCY_MAX_BYTES each bound the
// keys a node keeps: past either, the oldest key is forgotten, and a retry
// with it is a new trigger (no Idempotent-Replayed), while the newest is
// still replayed. Each answer here counts about 260 bytes (its key, "{}"
// and 256), so 600 bytes hold two.
func TestIdempotencyBoundsAreTheSettings(t *testing.T) {
	for _, tt := range []struct {
		name              string
		maxKeys, maxBytes int
	}{
		{"max keys", 2, 1 << 20},
		{"max bytes", 10_000, 600},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Config{
				DB: filepath.Join(t.TempDir(), "herald.db"), AppID: "77", AppKey: "go-sdk-key", AppSecret: "go-sdk-secret",
				IdempotencyTTL: time.Hour, IdempotencyMaxKeys: tt.maxKeys, IdempotencyMaxBytes: tt.maxBytes,
			}
			_, base := serveNode(t, cfg)
			addr := strings.TrimPrefix(base, "http://")
			trigger := func(key string) string {
				c, kt := sdkWithKey(addr, key)
				if err := c.Trigger("orders", "created", "x"); err != nil {
					t.Fatalf("trigger with key %s: %v", key, err)
				}
				return kt.replayed[0]
			}
			for _, key := range []string{"k-1", "k-2", "k-3"} {
				trigger(key)
			}
			if got := trigger("k-3"); got != "true" {
				t.Fatalf("the newest key's retry: Idempotent-Replayed %q, want true", got)
			}
			if got := trigger("k-1"); got != "" {
				t.Fatalf("the oldest key's retry: Idempotent-Replayed %q, want none (forgotten past the bound)", got)
			}
		})
	}
}
