package httpapi

import (
	"context"
	"database/sql"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/gen/publish"
	"github.com/heraldrt/herald/server/directory"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

// The shared rate limit (nodes on one database) runs here on SQLite, whose
// storage takes the same statement; its PostgreSQL form, with two nodes, is
// server/node's TestTwoNodesShareThePublishRateLimitOnPostgreSQL.

// rateDB is a SQLite database at a path of its own with the push instance.
func rateDB(t *testing.T) (*storage.DB, string) {
	t.Helper()
	path := testdb.SQLite(t)
	db := testdb.Open(t, storage.Open, path)
	if _, err := db.CreateInstance(t.Context(), storage.Instance{ID: pushInstanceID, SecretKey: pushSecret, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	return db, path
}

// rateAPI is a Publish API over db, as one node serves it, behind check
// (when not nil), with its clock at *now and its rate limit in the database
// when shared.
func rateAPI(t *testing.T, db *storage.DB, log *zap.Logger, check gin.HandlerFunc, now *time.Time, shared bool) (*gin.Engine, *PublishAPI) {
	t.Helper()
	dir, err := directory.NewInstances(t.Context(), db, log)
	if err != nil {
		t.Fatal(err)
	}
	engine := NewEngine(log)
	if check != nil {
		engine.Use(check)
	}
	api := NewPublishAPI(db, dir, nil, log, PublishOptions{})
	if api.shared {
		t.Fatal("a SQLite database taken as shared")
	}
	api.shared = shared
	api.now = func() time.Time { return *now }
	Mount(engine, Routes{Publish: api})
	return engine, api
}

// publishOnce sends one publish to interests and returns the answer.
func publishOnce(engine http.Handler) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, publishPrefix+pushInstanceID+"/publishes/interests", strings.NewReader(interestsBody("news")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+pushSecret)
	rec := httptest.NewRecorder()
	engine.ServeHTTP(rec, req)
	return rec
}

// burst sends n publishes and returns how many were answered 200, failing
// on any answer but 200 and 429; the last 429, if any, comes with it.
func burst(t *testing.T, engine http.Handler, n int) (ok int, refused *httptest.ResponseRecorder) {
	t.Helper()
	for range n {
		switch rec := publishOnce(engine); rec.Code {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			refused = rec
		default:
			t.Fatalf("publish answered %d %s", rec.Code, rec.Body)
		}
	}
	return ok, refused
}

// With the limit in the database, an instance still gets PublishRateLimit
// requests a second, and the one beyond is refused with exactly the answer
// of the limit in memory: status, headers (no Retry-After) and body.
func TestPublishRateLimitSharedAnswersAsInMemory(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	answers := map[bool]*httptest.ResponseRecorder{}
	for _, shared := range []bool{false, true} {
		db, _ := rateDB(t)
		engine, api := rateAPI(t, db, zap.NewNop(), newSpecChecker(t, publish.GetSpec).middleware, &now, shared)
		ok, refused := burst(t, engine, PublishRateLimit+1)
		if ok != PublishRateLimit || refused == nil {
			t.Fatalf("shared %v: %d of %d publishes accepted at one instant, want %d", shared, ok, PublishRateLimit+1, PublishRateLimit)
		}
		answers[shared] = refused
		// The limit is kept in one place: the memory of the node, or the
		// database.
		if got, want := api.limiter.Len(), map[bool]int{false: 1, true: 0}[shared]; got != want {
			t.Fatalf("shared %v: %d buckets in memory, want %d", shared, got, want)
		}
		if st := api.LimitStats(); st != (PublishLimitStats{Refused: 1}) {
			t.Fatalf("shared %v: limit figures %+v, want the one refusal and no database error", shared, st)
		}
	}
	mem, db := answers[false], answers[true]
	var body map[string]any
	if err := json.Unmarshal(mem.Body.Bytes(), &body); err != nil {
		t.Fatalf("429 body %s: %v", mem.Body, err)
	}
	checkStatus(t, mem.Code, body, http.StatusTooManyRequests, KindTooManyRequests)
	if body["description"] != "More than 100 requests per second on this instance; slow down." {
		t.Fatalf("description %q", body["description"])
	}
	if mem.Header().Get("Retry-After") != "" {
		t.Fatalf("the limit in memory sends Retry-After %q", mem.Header().Get("Retry-After"))
	}
	if db.Code != mem.Code || !maps.EqualFunc(db.Header(), mem.Header(), func(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }) ||
		db.Body.String() != mem.Body.String() {
		t.Fatalf("the limit in the database answers %d %v %s; in memory %d %v %s", db.Code, db.Header(), db.Body, mem.Code, mem.Header(), mem.Body)
	}
}

// Two nodes on one database take from one bucket per instance: together
// they accept PublishRateLimit publishes at one instant, not twice as many;
// the next second each can publish again. Each node's own limit (shared
// false) lets through one burst per node: the fault this guards against.
func TestPublishRateLimitSharedOverTwoNodes(t *testing.T) {
	for _, shared := range []bool{false, true} {
		now := time.Unix(1_800_000_000, 0)
		db, _ := rateDB(t)
		a, _ := rateAPI(t, db, zap.NewNop(), nil, &now, shared)
		b, _ := rateAPI(t, db, zap.NewNop(), nil, &now, shared)
		okA, _ := burst(t, a, 70)
		okB, _ := burst(t, b, 70)
		want := map[bool]int{false: 140, true: PublishRateLimit}[shared]
		if okA+okB != want {
			t.Fatalf("shared %v: nodes accepted %d + %d publishes at one instant, want %d in all", shared, okA, okB, want)
		}
		now = now.Add(100 * time.Millisecond)
		okA, _ = burst(t, a, 6)
		okB, _ = burst(t, b, 6)
		if want := map[bool]int{false: 12, true: 10}[shared]; okA+okB != want {
			t.Fatalf("shared %v: %d + %d publishes accepted 100 ms later, want %d in all", shared, okA, okB, want)
		}
	}
}

// When the database fails to take a token, the request is neither answered
// 500 nor let through unlimited: it is limited by the node's own bucket,
// counted, and logged at warn once every limitWarnEvery.
func TestPublishRateLimitSharedDatabaseFails(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	db, path := rateDB(t)
	core, logs := observer.New(zapcore.WarnLevel)
	engine, api := rateAPI(t, db, zap.New(core), nil, &now, true)
	if ok, _ := burst(t, engine, 10); ok != 10 {
		t.Fatalf("%d of 10 publishes accepted", ok)
	}

	// The buckets' table goes (another connection drops it), the rest of
	// the database works: publishes are stored as before.
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(context.Background(), "DROP TABLE publish_rate_buckets"); err != nil {
		t.Fatal(err)
	}
	ok, refused := burst(t, engine, PublishRateLimit+5)
	if ok != PublishRateLimit || refused == nil {
		t.Fatalf("%d of %d publishes accepted while the database fails, want the node's own burst of %d", ok, PublishRateLimit+5, PublishRateLimit)
	}
	if got := api.LimitStats().DatabaseErrors; got != PublishRateLimit+5 {
		t.Fatalf("%d rate limit errors counted, want %d", got, PublishRateLimit+5)
	}
	warned := func() []observer.LoggedEntry {
		return logs.FilterMessageSnippet("rate limit").FilterLevelExact(zapcore.WarnLevel).All()
	}
	if w := warned(); len(w) != 1 || w[0].ContextMap()["instance"] != pushInstanceID || w[0].ContextMap()["failures"] != uint64(1) ||
		!strings.Contains(w[0].ContextMap()["error"].(string), "publish_rate_buckets") {
		t.Fatalf("warnings %+v, want one about the first failure", w)
	}

	// Later: the node's bucket has refilled, and the failures are told again.
	now = now.Add(limitWarnEvery)
	if ok, _ := burst(t, engine, 1); ok != 1 {
		t.Fatal("no publish accepted after the refill")
	}
	if w := warned(); len(w) != 2 || w[1].ContextMap()["failures"] != uint64(PublishRateLimit+6) {
		t.Fatalf("warnings %+v, want a second one counting %d failures", w, PublishRateLimit+6)
	}
}

// A request whose client has gone (its context ended) fails to take a token
// for that reason alone: not a database failure, neither counted nor logged.
func TestPublishRateLimitSharedClientGone(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	db, _ := rateDB(t)
	core, logs := observer.New(zapcore.WarnLevel)
	engine, api := rateAPI(t, db, zap.New(core), nil, &now, true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, publishPrefix+pushInstanceID+"/publishes/pubid-none", nil)
	req.Header.Set("Authorization", "Bearer "+pushSecret)
	engine.ServeHTTP(httptest.NewRecorder(), req)
	if api.LimitStats().DatabaseErrors != 0 || logs.FilterMessageSnippet("rate limit").Len() != 0 {
		t.Fatalf("%d rate limit errors and %v logged for a request whose client went", api.LimitStats().DatabaseErrors, logs.All())
	}
}
