package storage

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/storage/testdb"
)

func TestClaimWebhooksKeepsPerURLOrder(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	items := []OutboxWebhook{
		{AppID: "1", URL: "http://a", Key: "x", Body: []byte(`1`)},
		{AppID: "1", URL: "http://a", Key: "y", Body: []byte(`2`)},
		{AppID: "1", URL: "http://b", Body: []byte(`3`)},
	}
	if _, err := db.EnqueueWebhooks(ctx, items, 0); err != nil {
		t.Fatal(err)
	}
	// The first request to a failed and waits; the second must wait behind it,
	// although its key is another.
	if err := db.RetryWebhookAt(ctx, items[0].ID, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	due, err := db.ClaimWebhooks(ctx, time.Now(), time.Hour, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 1 || string(due[0].Body) != "3" {
		t.Fatalf("claimed now: %+v, want only the request to b", due)
	}
	if err := db.DeleteWebhook(ctx, due[0].ID); err != nil {
		t.Fatal(err)
	}
	due, err = db.ClaimWebhooks(ctx, time.Now().Add(2*time.Minute), time.Hour, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 2 || string(due[0].Body) != "1" || string(due[1].Body) != "2" || due[0].Attempts != 1 {
		t.Fatalf("claimed later: %+v, want both requests to a in order", due)
	}
	if n, _ := db.CountWebhookOutbox(ctx); n != 2 {
		t.Fatalf("outbox holds %d", n)
	}
	for _, w := range due {
		if err := db.DeleteWebhook(ctx, w.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := db.NextWebhookDue(ctx, time.Now(), 1); ok || err != nil {
		t.Fatalf("empty outbox still has a next due (%v)", err)
	}
}

func TestClaimedWebhooksAreNotClaimedTwice(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	items := []OutboxWebhook{
		{AppID: "1", URL: "http://a", Key: "x", Body: []byte(`1`)},
		{AppID: "1", URL: "http://a", Key: "y", Body: []byte(`2`)},
	}
	if _, err := db.EnqueueWebhooks(ctx, items, 0); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	// A claim of none (no sender free) claims none, and is no error.
	if none, err := db.ClaimWebhooks(ctx, now, time.Minute, 0, 1); err != nil || len(none) != 0 {
		t.Fatalf("a claim of none: %+v (%v)", none, err)
	}
	first, err := db.ClaimWebhooks(ctx, now, time.Minute, 1, 1)
	if err != nil || len(first) != 1 || first[0].ID != items[0].ID {
		t.Fatalf("first claim: %+v (%v), want the first request", first, err)
	}
	// With one request per URL at a time, the claimed request holds back the
	// second: the URL is being served.
	if again, err := db.ClaimWebhooks(ctx, now, time.Minute, 10, 1); err != nil || len(again) != 0 {
		t.Fatalf("claim while the first is held: %+v (%v), want none", again, err)
	}
	// Given back unsent, both are due again, in order.
	if err := db.ReleaseWebhooks(ctx, []int64{first[0].ID}); err != nil {
		t.Fatal(err)
	}
	both, err := db.ClaimWebhooks(ctx, now, time.Minute, 10, 2)
	if err != nil || len(both) != 2 || both[0].ID != items[0].ID || both[1].ID != items[1].ID {
		t.Fatalf("claim after release: %+v (%v), want both in order", both, err)
	}
	// Both given back at once are both due again.
	if err := db.ReleaseWebhooks(ctx, []int64{both[0].ID, both[1].ID}); err != nil {
		t.Fatal(err)
	}
	if again, err := db.ClaimWebhooks(ctx, now, time.Minute, 10, 2); err != nil || len(again) != 2 {
		t.Fatalf("claim after releasing both: %+v (%v), want both", again, err)
	}
	// A claim that runs out (its holder died) makes them due again.
	later, err := db.ClaimWebhooks(ctx, now.Add(time.Minute), time.Minute, 10, 2)
	if err != nil || len(later) != 2 {
		t.Fatalf("claim after the lease: %+v (%v), want both", later, err)
	}
	// A node starting alone takes its previous run's claims back at once,
	// and a failed request keeps its retry time.
	if err := db.RetryWebhookAt(ctx, later[0].ID, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ClaimWebhooks(ctx, now.Add(time.Minute), time.Minute, 10, 2); err != nil {
		t.Fatal(err)
	}
	if err := db.ReleaseAllWebhookClaims(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := db.ClaimWebhooks(ctx, now.Add(2*time.Hour), time.Minute, 10, 2); err != nil || len(got) != 2 || got[0].Attempts != 1 {
		t.Fatalf("after the retry time: %+v (%v), want both, the first retried once", got, err)
	}
	if next, ok, err := db.NextWebhookDue(ctx, time.Now(), 2); err != nil || !ok || !next.Equal(fromMillis(now.Add(2*time.Hour+time.Minute).UnixMilli())) {
		t.Fatalf("next due %v %v (%v), want the end of the last claim", next, ok, err)
	}
}

func TestReleaseAllWebhookClaimsMakesThemDueAtOnce(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	items := []OutboxWebhook{{AppID: "1", URL: "http://a", Body: []byte(`1`)}, {AppID: "1", URL: "http://b", Body: []byte(`2`)}}
	if _, err := db.EnqueueWebhooks(ctx, items, 0); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if got, err := db.ClaimWebhooks(ctx, now, time.Hour, 10, 1); err != nil || len(got) != 2 {
		t.Fatalf("claim: %+v (%v)", got, err)
	}
	// The claimant crashed: nothing is due until the claims run out ...
	if got, err := db.ClaimWebhooks(ctx, now, time.Hour, 10, 1); err != nil || len(got) != 0 {
		t.Fatalf("claimed again: %+v (%v), want none", got, err)
	}
	// ... unless the restarted node takes them back.
	if err := db.ReleaseAllWebhookClaims(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := db.ClaimWebhooks(ctx, now, time.Hour, 10, 1); err != nil || len(got) != 2 {
		t.Fatalf("after taking the claims back: %+v (%v), want both", got, err)
	}
}

// The cap keeps each app at its newest requests, dropping the oldest in the
// same write and saying how many per app; requests being sent are not
// dropped, and other apps are not touched.
func TestEnqueueWebhooksCapsEachApp(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	req := func(app, body string) OutboxWebhook {
		return OutboxWebhook{AppID: app, URL: "http://" + app, Key: body, Body: []byte(body)}
	}
	// bodies claims every request, as seen an hour later, and lists them per
	// app.
	bodies := func() map[string]string {
		t.Helper()
		got, err := db.ClaimWebhooks(ctx, time.Now().Add(time.Hour), time.Second, 100, 100)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, w := range got {
			out[w.AppID] = strings.TrimSpace(out[w.AppID] + " " + string(w.Body))
		}
		return out
	}
	if dropped, err := db.EnqueueWebhooks(ctx, []OutboxWebhook{req("1", "a"), req("1", "b"), req("2", "x")}, 3); err != nil || dropped != nil {
		t.Fatalf("under the cap: dropped %v (%v), want none", dropped, err)
	}
	// The first request of app 1 is being sent.
	if got, err := db.ClaimWebhooks(ctx, time.Now(), time.Minute, 1, 1); err != nil || len(got) != 1 || string(got[0].Body) != "a" {
		t.Fatalf("claim: %+v (%v)", got, err)
	}
	dropped, err := db.EnqueueWebhooks(ctx, []OutboxWebhook{req("1", "c"), req("1", "d"), req("2", "y"), req("1", "e")}, 3)
	if err != nil || len(dropped) != 1 || dropped["1"] != 2 {
		t.Fatalf("over the cap: dropped %v (%v), want 2 of app 1", dropped, err)
	}
	if got := bodies(); got["1"] != "a d e" || got["2"] != "x y" {
		t.Fatalf("kept %q, want app 1's request being sent and its newest, and all of app 2", got)
	}
	// A batch larger than the cap keeps its newest requests.
	if dropped, err := db.EnqueueWebhooks(ctx, []OutboxWebhook{req("3", "1"), req("3", "2"), req("3", "3"), req("3", "4")}, 2); err != nil || dropped["3"] != 2 {
		t.Fatalf("large batch: dropped %v (%v)", dropped, err)
	}
	// No cap: nothing dropped.
	if dropped, err := db.EnqueueWebhooks(ctx, []OutboxWebhook{req("1", "f"), req("1", "g")}, 0); err != nil || dropped != nil {
		t.Fatalf("without a cap: dropped %v (%v)", dropped, err)
	}
	if n, _ := db.CountWebhookOutbox(ctx); n != 3+2+2+2 {
		t.Fatalf("outbox holds %d, want 9", n)
	}
}

// The cap counts the app's requests, not the span of their ids: requests of
// other apps between them do not make it drop any.
func TestEnqueueWebhooksCapCountsTheAppsRequests(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	for i := range 5 {
		items := []OutboxWebhook{{AppID: "1", URL: "http://a", Body: []byte{'0' + byte(i)}}, {AppID: "2", URL: "http://b", Body: []byte("x")}}
		if dropped, err := db.EnqueueWebhooks(ctx, items, 5); err != nil || dropped != nil {
			t.Fatalf("batch %d: dropped %v (%v), want none", i, dropped, err)
		}
	}
	if dropped, err := db.EnqueueWebhooks(ctx, []OutboxWebhook{{AppID: "1", URL: "http://a", Body: []byte("5")}}, 5); err != nil || dropped["1"] != 1 {
		t.Fatalf("sixth request: dropped %v (%v), want 1", dropped, err)
	}
}

// One request over the cap, the app's ids one after the other, drops one.
func TestEnqueueWebhooksCapOneOver(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	for i := range 4 {
		dropped, err := db.EnqueueWebhooks(ctx, []OutboxWebhook{{AppID: "1", URL: "http://a", Body: []byte{'0' + byte(i)}}}, 3)
		want := 0 // the first three fit
		if i == 3 {
			want = 1
		}
		if err != nil || dropped["1"] != want {
			t.Fatalf("request %d: dropped %v (%v), want %d", i+1, dropped, err, want)
		}
	}
}

// Up to perURL requests of a URL, each with its own key, are claimed at once,
// oldest first, and never more, however many claims are made; one waiting
// for its retry holds back the later ones, even with room left; the limit
// takes the oldest of all URLs.
func TestClaimWebhooksUpToPerURL(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	var items []OutboxWebhook
	for i := range 20 {
		items = append(items, OutboxWebhook{AppID: "1", URL: "http://a", Key: itoa(i), Body: []byte(itoa(i))})
	}
	items = append(items, OutboxWebhook{AppID: "1", URL: "http://b", Key: "0", Body: []byte("b0")}, OutboxWebhook{AppID: "1", URL: "http://b", Key: "1", Body: []byte("b1")})
	if _, err := db.EnqueueWebhooks(ctx, items, 0); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claim := func(limit int) string { t.Helper(); return claimBodies(t, db, now, limit, 3) }
	if got := claim(4); got != "0 1 2 b0" {
		t.Fatalf("first claim %q, want a's three oldest and b's oldest", got)
	}
	if got := claim(10); got != "b1" {
		t.Fatalf("second claim %q, want only b's other request", got)
	}
	if got := claim(10); got != "" {
		t.Fatalf("third claim %q, want none", got)
	}
	// 0 is delivered: one more of a is due.
	if err := db.DeleteWebhook(ctx, items[0].ID); err != nil {
		t.Fatal(err)
	}
	if got := claim(10); got != "3" {
		t.Fatalf("after a delivery %q, want 3", got)
	}
	// 1 failed and waits; 2 and 3 go on, but nothing after 1 starts.
	if err := db.RetryWebhookAt(ctx, items[1].ID, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteWebhook(ctx, items[2].ID); err != nil {
		t.Fatal(err)
	}
	if got := claim(10); got != "" {
		t.Fatalf("behind a retry %q, want none", got)
	}
	if next, ok, err := db.NextWebhookDue(ctx, now, 3); err != nil || !ok || !next.Equal(fromMillis(now.Add(time.Minute).UnixMilli())) {
		t.Fatalf("next due %v %v (%v), want the retry, not the requests it holds back", next, ok, err)
	}
	got, err := db.ClaimWebhooks(ctx, now.Add(time.Minute), time.Minute, 10, 3)
	if err != nil || len(got) != 2 || string(got[0].Body) != "1" || string(got[1].Body) != "4" {
		t.Fatalf("at the retry %+v (%v), want 1 and 4 (3 is still claimed)", got, err)
	}
}

// The requests of a URL with the same key go one at a time, in order, while
// other keys go past them; only the 2×perURL oldest requests of a URL are
// looked at.
func TestClaimWebhooksOneAtATimePerKey(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	var items []OutboxWebhook
	for _, k := range strings.Fields("a a b a c b") {
		items = append(items, OutboxWebhook{AppID: "1", URL: "http://u", Key: k, Body: []byte(k + itoa(len(items)))})
	}
	for i := range 4 { // a run that fills the window of 2×2
		items = append(items, OutboxWebhook{AppID: "1", URL: "http://u", Key: "d", Body: []byte("d" + itoa(i))})
	}
	items = append(items, OutboxWebhook{AppID: "1", URL: "http://u", Key: "e", Body: []byte("e")})
	if _, err := db.EnqueueWebhooks(ctx, items, 0); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claim := func() string { t.Helper(); return claimBodies(t, db, now, 10, 2) }
	if next, ok, err := db.NextWebhookDue(ctx, now, 2); err != nil || !ok || !next.Equal(fromMillis(now.UnixMilli())) {
		t.Fatalf("next due %v %v (%v), want now", next, ok, err)
	}
	if got := claim(); got != "a0 b2" {
		t.Fatalf("first claim %q, want the oldest of a and of b", got)
	}
	if got := claim(); got != "" {
		t.Fatalf("second claim %q, want none: two in flight", got)
	}
	// Only a claim running out (or a request finishing) frees the next.
	if next, ok, err := db.NextWebhookDue(ctx, now, 2); err != nil || !ok || !next.Equal(fromMillis(now.Add(time.Hour).UnixMilli())) {
		t.Fatalf("next due %v %v (%v), want the end of the claims", next, ok, err)
	}
	for _, step := range []struct {
		done int // index of the request delivered
		want string
	}{
		{0, "a1"}, // a's next
		{2, "c4"}, // b5 is free too, but c4 is older
		{1, "a3"},
		{4, "b5"},
		{3, "d0"},
		{5, ""},     // e is past the 4 oldest, all of d, which has d0 in flight
		{6, "d1 e"}, // now it is among them
	} {
		if err := db.DeleteWebhook(ctx, items[step.done].ID); err != nil {
			t.Fatal(err)
		}
		if got := claim(); got != step.want {
			t.Fatalf("after %s was delivered: claimed %q, want %q", items[step.done].Body, got, step.want)
		}
	}
}

// Expired requests are dropped unless they are being sent, and counted per
// app.
func TestDropExpiredWebhooks(t *testing.T) {
	ctx := context.Background()
	db := openOutboxDB(t)
	items := []OutboxWebhook{
		{AppID: "1", URL: "http://a", Body: []byte("1")},
		{AppID: "1", URL: "http://a", Body: []byte("2")},
		{AppID: "2", URL: "http://b", Body: []byte("3")},
	}
	if _, err := db.EnqueueWebhooks(ctx, items, 0); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if dropped, err := db.DropExpiredWebhooks(ctx, items[0].CreatedAt, now); err != nil || dropped != nil {
		t.Fatalf("nothing older: dropped %v (%v)", dropped, err)
	}
	if got, err := db.ClaimWebhooks(ctx, now, time.Minute, 1, 1); err != nil || len(got) != 1 {
		t.Fatalf("claim: %+v (%v)", got, err)
	}
	dropped, err := db.DropExpiredWebhooks(ctx, now.Add(time.Second), now)
	if err != nil || len(dropped) != 2 || dropped["1"] != 1 || dropped["2"] != 1 {
		t.Fatalf("dropped %v (%v), want one of each app, not the claimed one", dropped, err)
	}
	if n, _ := db.CountWebhookOutbox(ctx); n != 1 {
		t.Fatalf("outbox holds %d, want the claimed request", n)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// openOutboxDB opens a fresh database, closed when the test ends.
func openOutboxDB(t *testing.T) *DB {
	t.Helper()
	return testdb.New(t, Open)
}

// BenchmarkEnqueueWebhooks writes batches of ten requests of one app into an
// outbox that already holds 10,000 of them: without a cap, with a cap the app
// is far under, and at the cap (10,000, the default), which then drops ten old
// requests per batch.
func BenchmarkEnqueueWebhooks(b *testing.B) {
	for _, bb := range []struct {
		name string
		cap  int
	}{{"uncapped", 0}, {"under_cap", 100000}, {"at_cap", 10000}} {
		b.Run(bb.name, func(b *testing.B) {
			ctx := context.Background()
			db := testdb.Open(b, Open, testdb.SQLite(b))
			for range 10 {
				if _, err := db.EnqueueWebhooks(ctx, outboxBatch(1000), 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				if _, err := db.EnqueueWebhooks(ctx, outboxBatch(10), bb.cap); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// outboxBatch is n requests of app 1 to one URL.
func outboxBatch(n int) []OutboxWebhook {
	body := []byte(`{"time_ms":1,"events":[{"name":"channel_occupied","channel":"a-channel-name"}]}`)
	items := make([]OutboxWebhook, n)
	for i := range items {
		items[i] = OutboxWebhook{AppID: "1", URL: "http://a.test/hook", Body: body}
	}
	return items
}

// BenchmarkClaimWebhooks claims and gives back the requests of 30 URLs with
// 10,000 requests queued, 8 per URL, at most 64 at once.
func BenchmarkClaimWebhooks(b *testing.B) {
	ctx := context.Background()
	db := testdb.Open(b, Open, testdb.SQLite(b))
	items := outboxBatch(10000)
	for i := range items {
		items[i].URL, items[i].Key = "http://a.test/"+itoa(i%30), itoa(i)
	}
	if _, err := db.EnqueueWebhooks(ctx, items, 0); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		got, err := db.ClaimWebhooks(ctx, time.Now(), time.Minute, 64, 8)
		if err != nil || len(got) != 64 {
			b.Fatalf("claimed %d (%v)", len(got), err)
		}
		ids := make([]int64, len(got))
		for i, w := range got {
			ids[i] = w.ID
		}
		if err := db.ReleaseWebhooks(ctx, ids); err != nil {
			b.Fatal(err)
		}
	}
}

// claimBodies claims up to limit requests at now (an hour's lease, perURL at
// most per URL) and returns their bodies, space-separated, in claim order.
func claimBodies(t *testing.T, db *DB, now time.Time, limit, perURL int) string {
	t.Helper()
	got, err := db.ClaimWebhooks(t.Context(), now, time.Hour, limit, perURL)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range got {
		out = append(out, string(w.Body))
	}
	return strings.Join(out, " ")
}
