package push

import (
	"context"
	"crypto/x509"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

const testInstance = "inst-dispatch"

// instanceMap is an InstanceLookup over fixed instances.
type instanceMap map[string]*storage.Instance

func (m instanceMap) ByID(id string) *storage.Instance { return m[id] }

// senderFunc is a Sender written as a function.
type senderFunc func(ctx context.Context, d storage.Delivery, p *Prepared) Result

func (f senderFunc) Send(ctx context.Context, d storage.Delivery, p *Prepared) Result {
	return f(ctx, d, p)
}

// openTestDB opens a fresh database holding the instance: a SQLite file,
// where a dispatcher is alone (shareddb_test.go has those of a shared one).
func openTestDB(t *testing.T, in storage.Instance) (*storage.DB, storage.Instance) {
	t.Helper()
	return openTestDBFile(t, testdb.SQLite(t), in)
}

// openTestDBRaw is openTestDB with another connection to the database's
// file, for tests that change stored rows by hand.
func openTestDBRaw(t *testing.T) (*storage.DB, storage.Instance, *sql.DB) {
	t.Helper()
	path := testdb.SQLite(t)
	db, in := openTestDBFile(t, path, storage.Instance{})
	raw, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String()+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return db, in, raw
}

// openTestDBFile opens the database file, holding the instance.
func openTestDBFile(t *testing.T, path string, in storage.Instance) (*storage.DB, storage.Instance) {
	t.Helper()
	db := testdb.Open(t, storage.Open, path)
	in.ID, in.SecretKey, in.Enabled = testInstance, "secret", true
	in, err := db.CreateInstance(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	return db, in
}

// startDispatcher runs a dispatcher on db for the instance until the test
// ends (it stops before the database and the gateways close).
func startDispatcher(t *testing.T, db *storage.DB, in storage.Instance, opts Options) *Dispatcher {
	t.Helper()
	d := New(db, instanceMap{in.ID: &in}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), opts)
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// publishTo stores a publish to the interest with a payload for every
// platform and tells the dispatcher.
func publishTo(t *testing.T, db *storage.DB, d *Dispatcher, id, interest string) {
	t.Helper()
	_, err := db.CreatePublish(t.Context(), storage.Publish{ID: id, InstanceID: testInstance, TargetKind: storage.TargetInterests,
		Targets: []string{interest}, Payload: json.RawMessage(`{"apns":{"aps":{"alert":"hi"}},"fcm":{"notification":{"title":"hi"}},"web":{"notification":{"title":"hi"}}}`)},
		0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	d.Notify()
}

// publishAPNs stores a publish to the "news" interest with an APNs payload.
func publishAPNs(t *testing.T, db *storage.DB, id string) {
	t.Helper()
	if _, err := db.CreatePublish(t.Context(), storage.Publish{ID: id, InstanceID: testInstance, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"apns":{"aps":{"alert":"hi"}}}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
}

// waitPublishDone waits until the publish is done and returns it.
func waitPublishDone(t *testing.T, db *storage.DB, id string) storage.Publish {
	t.Helper()
	var p storage.Publish
	wait.Until(t, "publish "+id+" to be done", func() bool {
		var err error
		if p, err = db.GetPublish(t.Context(), testInstance, id); err != nil {
			t.Fatal(err)
		}
		return p.State == storage.PublishDone
	})
	return p
}

// deliveryCount is the dispatcher's count of attempts on the gateway with
// the outcome (see PushCounters).
func deliveryCount(d *Dispatcher, p storage.Platform, outcome string) int64 {
	for _, c := range d.PushCounters().Deliveries {
		if c.Gateway == string(p) && c.Outcome == outcome {
			return c.Count
		}
	}
	return -1
}

// A device whose token turns out dead only on a retry (the first attempt
// met a transient 503, stored the delivery for later, and the retry from
// the deliveries table met the dead answer) is deleted and counted exactly
// as one found dead on the first attempt: the device is gone, the publish
// counts it failed, and the metrics count a dead token.
func TestDeadTokenFoundOnRetry(t *testing.T) {
	apns, err := pushtest.NewAPNs()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(apns.Close)
	fcm, err := pushtest.NewFCM()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fcm.Close)
	web := pushtest.NewWebPush()
	t.Cleanup(web.Close)
	vapid := newVAPID(t)
	web.VAPIDPublicKey = vapid.PublicKey
	roots := x509.NewCertPool()
	roots.AddCert(web.Server.Certificate()) // the fakes share one certificate
	cfg := storage.Instance{
		APNs: storage.APNsConfig{KeyPEM: apns.KeyPEM, KeyID: apns.KeyID, TeamID: apns.TeamID, Topic: "com.example.app",
			URL: apns.URL, CAPEM: apns.CAPEM},
		FCM:   storage.FCMConfig{ServiceAccountJSON: fcm.ServiceAccount, URL: fcm.URL},
		VAPID: vapid,
	}

	// Per platform, token makes a fresh token, one the gateway answers as
	// dead when dead (after one 503 when transient), and received counts
	// the messages the gateway accepted for a token.
	n := 0
	type gateway struct {
		token    func(t *testing.T, dead, transient bool) string
		received func(t *testing.T, token string) int
	}
	gateways := map[storage.Platform]gateway{
		storage.PlatformAPNs: {
			token: func(_ *testing.T, dead, transient bool) string {
				n++
				tok := fmt.Sprintf("%064x", n)
				if dead {
					apns.Dead(tok)
				}
				if transient {
					apns.Unavailable(1, tok)
				}
				return tok
			},
			received: func(_ *testing.T, tok string) int { return len(apns.For(tok)) },
		},
		storage.PlatformFCM: {
			token: func(_ *testing.T, dead, transient bool) string {
				n++
				tok := fmt.Sprintf("fcm-%d", n)
				if dead {
					fcm.Dead(tok)
				}
				if transient {
					fcm.Unavailable(1, tok)
				}
				return tok
			},
			received: func(_ *testing.T, tok string) int { return len(fcm.For(tok)) },
		},
		storage.PlatformWeb: {
			token: func(t *testing.T, dead, transient bool) string {
				sub, err := web.Subscribe()
				if err != nil {
					t.Fatal(err)
				}
				if dead {
					web.Dead(sub)
				}
				if transient {
					web.Unavailable(1, sub)
				}
				return sub.Token()
			},
			received: func(t *testing.T, tok string) int {
				s, err := DecodeWebToken(tok)
				if err != nil {
					t.Fatal(err)
				}
				return len(web.For(s.Endpoint[len(web.URL+"/push/"):]))
			},
		},
	}

	for _, platform := range platforms {
		for _, retried := range []bool{false, true} {
			name := string(platform) + "/dead on the first attempt"
			if retried {
				name = string(platform) + "/dead on the retry after a 503"
			}
			t.Run(name, func(t *testing.T) {
				db, in := openTestDB(t, cfg)
				ctx := t.Context()
				gw := gateways[platform]
				register := func(token string) storage.Device {
					dev, _, err := db.RegisterDevice(ctx, storage.Device{InstanceID: in.ID, Platform: platform, Token: token,
						BundleIdentifier: "com.example.app"})
					if err != nil {
						t.Fatal(err)
					}
					if err := db.SetDeviceInterests(ctx, in.ID, platform, dev.ID, []string{"news"}); err != nil {
						t.Fatal(err)
					}
					return dev
				}
				dead, live := register(gw.token(t, true, retried)), register(gw.token(t, false, false))
				var outcomesMu sync.Mutex
				outcomes := map[string]int64{} // instance and outcome, as OnOutcome told them
				onOutcome := func(instanceID string, outcome storage.DeliveryOutcome) {
					outcomesMu.Lock()
					defer outcomesMu.Unlock()
					outcomes[instanceID+" "+outcomeName(outcome)]++
				}
				d := startDispatcher(t, db, in, Options{Workers: 4, BaseBackoff: 10 * time.Millisecond,
					MaxBackoff: 50 * time.Millisecond, RootCAs: roots, WebPushAllowedHosts: []string{"127.0.0.1"}, OnOutcome: onOutcome})
				publishTo(t, db, d, "pub-dead", "news")
				p := waitPublishDone(t, db, "pub-dead")

				if p.Targeted != 2 || p.Sent != 1 || p.Failed != 1 {
					t.Errorf("publish targeted %d, sent %d, failed %d; want 2, 1, 1", p.Targeted, p.Sent, p.Failed)
				}
				if _, err := db.GetDevice(ctx, in.ID, platform, dead.ID); !errors.Is(err, storage.ErrNotFound) {
					t.Errorf("the device with the dead token is still stored (%v)", err)
				}
				if _, err := db.GetDevice(ctx, in.ID, platform, live.ID); err != nil {
					t.Errorf("the live device: %v", err)
				}
				if got := gw.received(t, live.Token); got != 1 {
					t.Errorf("the live device got %d notifications, want 1", got)
				}
				if got := gw.received(t, dead.Token); got != 0 {
					t.Errorf("the dead device got %d notifications, want 0", got)
				}
				if n, err := db.PendingDeliveries(ctx); err != nil || n != 0 {
					t.Errorf("%d deliveries left in the table (%v)", n, err)
				}
				wantRetried := int64(0)
				if retried {
					wantRetried = 1
				}
				for outcome, want := range map[string]int64{OutcomeDelivered: 1, OutcomeDeadToken: 1, OutcomeRetried: wantRetried, OutcomeFailed: 0} {
					if got := deliveryCount(d, platform, outcome); got != want {
						t.Errorf("%s %s attempts: %d, want %d", platform, outcome, got, want)
					}
					outcomesMu.Lock()
					told := outcomes[in.ID+" "+outcome]
					outcomesMu.Unlock()
					if told != want {
						t.Errorf("OnOutcome told of %d %s attempts of the instance, want %d", told, outcome, want)
					}
				}
				for _, pr := range [][]string{apns.Problems(), fcm.Problems(), web.Problems()} {
					if len(pr) > 0 {
						t.Errorf("a fake gateway found problems: %v", pr)
					}
				}
			})
		}
	}
}

// Pages of a stream can finish out of order: a slow delivery of page 1
// while pages 2 and 3 are all sent. Those are recorded, page 1 stays open
// (a crash now would have it taken over and sent again, not lost) and the
// publish unresolved. Once page 1 is done too, every device has its one
// notification and every page is recorded.
func TestUnfinishedPageStaysOpen(t *testing.T) {
	const pageSize, apnsDevices = 4, 10 // pages of 4, 4 and 2 devices
	db, in := openTestDB(t, storage.Instance{})
	ctx := t.Context()
	var devices []storage.DeviceImport
	for i := range apnsDevices {
		devices = append(devices, storage.DeviceImport{Device: storage.Device{ID: fmt.Sprintf("apns-%02d", i), InstanceID: in.ID,
			Platform: storage.PlatformAPNs, Token: fmt.Sprintf("tok-%d", i)}, Interests: []string{"news"}})
	}
	const sentinel = "fcm-00"
	devices = append(devices, storage.DeviceImport{Device: storage.Device{ID: sentinel, InstanceID: in.ID,
		Platform: storage.PlatformFCM, Token: "tok-fcm"}, Interests: []string{"news"}})
	if err := db.ImportDevices(ctx, devices); err != nil {
		t.Fatal(err)
	}
	const held = "apns-01" // in page 1

	var mu sync.Mutex
	sends := map[string]int{} // by device id
	apnsSent := 0             // of apns devices other than the held one
	count := func(id string) {
		mu.Lock()
		defer mu.Unlock()
		sends[id]++
		if id != held && id != sentinel {
			apnsSent++
		}
	}
	release := make(chan struct{})
	var d *Dispatcher
	senders := map[storage.Platform]Sender{
		storage.PlatformAPNs: senderFunc(func(ctx context.Context, del storage.Delivery, _ *Prepared) Result {
			if del.DeviceID == held {
				select {
				case <-release:
				case <-ctx.Done():
					return retry("stopping", 0)
				}
			}
			count(del.DeviceID)
			return sent()
		}),
		// The one fcm device is the sentinel: it answers once the recorder
		// has counted back every apns delivery but the held one (only the
		// held one and the sentinel are in flight), so its page is recorded
		// no earlier than pages 2 and 3 would be. Its stored cursor tells
		// the test that the recorder had its chance to move the apns one.
		storage.PlatformFCM: senderFunc(func(ctx context.Context, del storage.Delivery, _ *Prepared) Result {
			for {
				mu.Lock()
				others := apnsSent
				mu.Unlock()
				if others == apnsDevices-1 && d.InFlight() == 2 {
					break
				}
				select {
				case <-ctx.Done():
					return retry("stopping", 0)
				case <-time.After(time.Millisecond):
				}
			}
			count(del.DeviceID)
			return sent()
		}),
	}
	d = startDispatcher(t, db, in, Options{PageSize: pageSize, Workers: 8, BaseBackoff: 10 * time.Millisecond,
		Senders: func(*storage.Instance) (map[storage.Platform]Sender, error) { return senders, nil }})
	_, err := db.CreatePublish(ctx, storage.Publish{ID: "pub-pages", InstanceID: in.ID, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"apns":{"aps":{"alert":"hi"}},"fcm":{"notification":{"title":"hi"}}}`)},
		0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	d.Notify()

	stored := func() storage.Publish {
		p, err := db.GetPublish(ctx, in.ID, "pub-pages")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	recorded := func() (pages, targeted int) {
		shares, err := db.PublishShares(ctx, "pub-pages")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range shares {
			pages, targeted = pages+s.Pages, targeted+s.Targeted
		}
		return pages, targeted
	}
	wait.Until(t, "the sentinel's page to be recorded", func() bool {
		pages, _ := recorded()
		return pages == 3
	})
	if pages, targeted := recorded(); targeted != 4+2+1 {
		t.Fatalf("while %s of page 1 is unsent, %d pages of %d deliveries are recorded, want pages 2 and 3 and the sentinel's (7)", held, pages, targeted)
	}
	p := stored()
	if p.Resolved || p.State == storage.PublishDone {
		t.Fatalf("publish resolved %v, state %s with a delivery in flight", p.Resolved, p.State)
	}
	mu.Lock()
	if sends[held] != 0 {
		t.Fatalf("the held delivery was sent")
	}
	mu.Unlock()

	close(release)
	p = waitPublishDone(t, db, "pub-pages")
	if p.Targeted != apnsDevices+1 || p.Sent != apnsDevices+1 || p.Failed != 0 {
		t.Errorf("publish targeted %d, sent %d, failed %d; want %d sent", p.Targeted, p.Sent, p.Failed, apnsDevices+1)
	}
	if pages, targeted := recorded(); pages != 4 || targeted != apnsDevices+1 {
		t.Errorf("%d pages of %d deliveries recorded, want 4 of %d", pages, targeted, apnsDevices+1)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, dev := range devices {
		if sends[dev.Device.ID] != 1 {
			t.Errorf("%s was sent %d times, want once", dev.Device.ID, sends[dev.Device.ID])
		}
	}
	if len(sends) != len(devices) {
		t.Errorf("sent to %d devices, want %d", len(sends), len(devices))
	}
}

// A publish handed over with Published is resolved and encoded from the
// payload handed over, not from its stored copy: the resolver does not parse
// the payload again, and the senders' encodings do not read the publish back
// from the database. (The two differ here only to tell which was used.)
func TestPublishedPayloadIsNotParsedAgain(t *testing.T) {
	db, in := openTestDB(t, storage.Instance{})
	ctx := t.Context()
	err := db.ImportDevices(ctx, []storage.DeviceImport{
		{Device: storage.Device{ID: "fcm-1", InstanceID: in.ID, Platform: storage.PlatformFCM, Token: "tok-fcm"}, Interests: []string{"news"}},
		{Device: storage.Device{ID: "web-1", InstanceID: in.ID, Platform: storage.PlatformWeb, Token: "tok-web"}, Interests: []string{"news"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	record := senderFunc(func(_ context.Context, del storage.Delivery, p *Prepared) Result {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, del.DeviceID+" "+string(p.FCMRequest(del.Token)))
		return sent()
	})
	d := New(db, instanceMap{in.ID: &in}, zap.NewNop(), Options{Senders: func(*storage.Instance) (map[storage.Platform]Sender, error) {
		return map[storage.Platform]Sender{storage.PlatformFCM: record, storage.PlatformWeb: record}, nil
	}})
	if _, err := db.CreatePublish(ctx, storage.Publish{ID: "pub-handed", InstanceID: in.ID, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"web":{"data":{"from":"storage"}}}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	handed, err := ParsePayload(nil, json.RawMessage(`{"data":{"from":"handler"}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Published("pub-handed", handed) // before Start: the resolver cannot have listed it yet
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	p := waitPublishDone(t, db, "pub-handed")
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || !strings.HasPrefix(got[0], "fcm-1 ") || !strings.Contains(got[0], `"from":"handler"`) || p.Targeted != 1 {
		t.Fatalf("sends %q, %d targeted; want one to fcm-1 with the handed payload's data", got, p.Targeted)
	}
	d.mu.Lock()
	n := len(d.accepted)
	d.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d handed payloads kept after the publish finished", n)
	}
}

// dispatchTo starts a dispatcher whose senders are send for every platform,
// and registers one APNs device per id, interested in "news" and in its id.
func dispatchTo(t *testing.T, opts Options, log *zap.Logger, send senderFunc, ids ...string) (*storage.DB, *Dispatcher) {
	t.Helper()
	db, in := openTestDB(t, storage.Instance{})
	var devices []storage.DeviceImport
	for _, id := range ids {
		devices = append(devices, storage.DeviceImport{Device: storage.Device{ID: id, InstanceID: in.ID, Platform: storage.PlatformAPNs,
			Token: "tok-" + id}, Interests: []string{"news", id}})
	}
	if err := db.ImportDevices(t.Context(), devices); err != nil {
		t.Fatal(err)
	}
	opts.Senders = func(*storage.Instance) (map[storage.Platform]Sender, error) {
		return map[storage.Platform]Sender{storage.PlatformAPNs: send, storage.PlatformFCM: send, storage.PlatformWeb: send}, nil
	}
	d := New(db, instanceMap{in.ID: &in}, log, opts)
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return db, d
}

// A delivery a gateway keeps answering with a transient error is tried
// exactly MaxAttempts times, then counted failed; the publish then is done,
// nothing is left queued, and each attempt not sent is logged (at debug).
func TestDeliveryFailsAfterMaxAttempts(t *testing.T) {
	var mu sync.Mutex
	attempts := map[string]int{}
	send := func(_ context.Context, del storage.Delivery, _ *Prepared) Result {
		mu.Lock()
		defer mu.Unlock()
		attempts[del.DeviceID]++
		if del.DeviceID == "apns-down" {
			return retry("503", 0)
		}
		return sent()
	}
	core, logs := observer.New(zapcore.DebugLevel)
	// The idle polls are an hour: a retry that waited for one instead of its
	// due time would never come.
	db, d := dispatchTo(t, Options{MaxAttempts: 3, BaseBackoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, idlePoll: time.Hour},
		zap.New(core), send, "apns-down", "apns-up")
	publishTo(t, db, d, "pub-1", "news")
	p := waitPublishDone(t, db, "pub-1")
	if p.Targeted != 2 || p.Sent != 1 || p.Failed != 1 {
		t.Errorf("publish targeted %d, sent %d, failed %d; want 2, 1, 1", p.Targeted, p.Sent, p.Failed)
	}
	mu.Lock()
	if attempts["apns-down"] != 3 || attempts["apns-up"] != 1 {
		t.Errorf("attempts %v, want 3 at the device whose gateway is down, 1 at the other", attempts)
	}
	mu.Unlock()
	for outcome, want := range map[string]int64{OutcomeDelivered: 1, OutcomeRetried: 2, OutcomeFailed: 1, OutcomeDeadToken: 0} {
		if got := deliveryCount(d, storage.PlatformAPNs, outcome); got != want {
			t.Errorf("%s attempts: %d, want %d", outcome, got, want)
		}
	}
	if c := d.PushCounters(); c.QueueDepth != 0 || d.InFlight() != 0 {
		t.Errorf("queue depth %d, %d in flight after the publish is done", c.QueueDepth, d.InFlight())
	}
	if n := logs.FilterMessage("resuming deliveries claimed by an earlier run").Len(); n != 0 {
		t.Errorf("a fresh start logged %d resumed claims", n)
	}
	// The resolver forgets a publish once it is done.
	wait.Until(t, "the resolver to forget the publish", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.reading) == 0
	})
	notSent := logs.FilterMessage("delivery not sent")
	if notSent.Len() != 3 || notSent.FilterField(zap.String("device", "apns-up")).Len() != 0 {
		t.Errorf("%d attempts logged as not sent (%v), want the 3 to the device whose gateway is down", notSent.Len(), notSent.All())
	}
}

// The queue depth counts the deliveries stored for a later attempt and
// those of pages in flight at a gateway.
func TestQueueDepthCountsStoredAndInFlight(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Bool
	send := func(ctx context.Context, del storage.Delivery, _ *Prepared) Result {
		switch del.DeviceID {
		case "apns-later":
			return retry("503", time.Hour) // stored, due in an hour
		case "apns-held":
			held.Store(true)
			select {
			case <-release:
			case <-ctx.Done():
				return retry("stopping", 0)
			}
		}
		return sent()
	}
	core, logs := observer.New(zapcore.WarnLevel)
	db, d := dispatchTo(t, Options{}, zap.New(core), send, "apns-held", "apns-later")
	publishTo(t, db, d, "pub-later", "apns-later")
	wait.Until(t, "the delivery stored for later", func() bool {
		n, err := db.PendingDeliveries(t.Context())
		return err == nil && n == 1
	})
	publishTo(t, db, d, "pub-held", "apns-held")
	wait.Until(t, "a delivery held at the gateway", held.Load)
	if got := d.PushCounters().QueueDepth; got != 2 {
		t.Errorf("queue depth %d with one delivery stored and one at the gateway, want 2", got)
	}
	close(release)
	wait.Until(t, "the held delivery recorded", func() bool { return deliveryCount(d, storage.PlatformAPNs, OutcomeDelivered) == 1 })
	wait.NoError(t, func() error {
		if got := d.PushCounters().QueueDepth; got != 1 {
			return errors.New("queue depth " + itoa(got) + " with one delivery stored, want 1")
		}
		return nil
	})
	if logs.Len() != 0 {
		t.Errorf("logged %v", logs.All())
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// When the database cannot be read, the claimer, the resolver and the
// publish webhook sender log it.
func TestUnreadableStoreLogged(t *testing.T) {
	send := func(context.Context, storage.Delivery, *Prepared) Result { return sent() }
	core, logs := observer.New(zapcore.ErrorLevel)
	db, d := dispatchTo(t, Options{}, zap.New(core), send)
	db.Close()
	wake(d.wakeHooks) // rather than wait out the webhook sender's 5 s idle poll
	wait.Until(t, "errors about claiming, listing and the webhook outbox", func() bool {
		return logs.FilterMessage("claiming deliveries").Len() > 0 && logs.FilterMessage("listing publishes to resolve").Len() > 0 &&
			logs.FilterMessage("reading the publish webhook outbox").Len() > 0
	})
}

// A dispatcher that was never started closes without doing anything.
func TestCloseWithoutStart(t *testing.T) {
	db, in := openTestDB(t, storage.Instance{})
	New(db, instanceMap{in.ID: &in}, zap.NewNop(), Options{}).Close()
}

func TestDispatcherDefaults(t *testing.T) {
	o := Options{}.WithDefaults()
	if o.Workers != 128 || o.ClaimBatch != 1000 || o.MaxInFlight != 3072 || o.PageSize != 512 || o.Lease != 30*time.Second || o.MaxAttempts != 8 ||
		o.BaseBackoff != time.Second || o.MaxBackoff != 5*time.Minute || o.WebhookMaxAge != 5*time.Minute ||
		o.SendTimeout != 30*time.Second || o.WebhookClient.Timeout != 10*time.Second {
		t.Fatalf("defaults %+v (webhook client timeout %v)", o, o.WebhookClient.Timeout)
	}
}
