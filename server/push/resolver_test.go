package push

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
)

// The resolver claims the pages of every publish it lists in one claim; a
// publish whose claim fails (its stored cursor is corrupt) is then claimed
// on its own, failing alone, and the publishes after it are sent.
func TestPublishThatCannotBeClaimedHoldsUpNoOther(t *testing.T) {
	ctx := t.Context()
	db, in, raw := openTestDBRaw(t)
	if err := db.ImportDevices(ctx, []storage.DeviceImport{{Device: storage.Device{ID: "apns-1", InstanceID: in.ID,
		Platform: storage.PlatformAPNs, Token: "tok-1"}, Interests: []string{"news"}}}); err != nil {
		t.Fatal(err)
	}
	publishAPNs(t, db, "pub-stuck")
	publishAPNs(t, db, "pub-ok")
	if _, err := raw.ExecContext(ctx, `UPDATE publishes SET cursor = '{corrupt' WHERE id = 'pub-stuck'`); err != nil {
		t.Fatal(err)
	}
	accept := senderFunc(func(context.Context, storage.Delivery, *Prepared) Result { return sent() })
	startDispatcher(t, db, in, Options{Senders: func(*storage.Instance) (map[storage.Platform]Sender, error) {
		return map[storage.Platform]Sender{storage.PlatformAPNs: accept}, nil
	}})
	if p := waitPublishDone(t, db, "pub-ok"); p.Sent != 1 {
		t.Fatalf("pub-ok sent %d, want its one device", p.Sent)
	}
	if p, err := db.GetPublish(ctx, in.ID, "pub-stuck"); err != nil || p.Resolved {
		t.Fatalf("pub-stuck %+v (%v), want it unresolved", p, err)
	}
}

// A publish to users reaches the user's devices with the user named in
// data.pusher.userId, encoded for that user.
func TestPublishToUsers(t *testing.T) {
	var mu sync.Mutex
	users := map[string]string{} // device -> userId in the payload
	send := func(_ context.Context, del storage.Delivery, p *Prepared) Result {
		var body struct {
			Data struct {
				Pusher Metadata `json:"pusher"`
			} `json:"data"`
		}
		if err := json.Unmarshal(p.APNsBody, &body); err != nil {
			t.Errorf("apns body %s: %v", p.APNsBody, err)
		}
		mu.Lock()
		users[del.DeviceID] = body.Data.Pusher.UserID
		mu.Unlock()
		return sent()
	}
	db, d := dispatchTo(t, Options{}, zap.NewNop(), send, "apns-alice", "apns-bob", "apns-nobody")
	for dev, user := range map[string]string{"apns-alice": "alice", "apns-bob": "bob"} {
		if err := db.SetDeviceUser(t.Context(), testInstance, storage.PlatformAPNs, dev, user); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.CreatePublish(t.Context(), storage.Publish{ID: "pub-users", InstanceID: testInstance, TargetKind: storage.TargetUsers,
		Targets: []string{"alice", "bob"}, Payload: json.RawMessage(`{"apns":{"aps":{"alert":"hi"}}}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	d.Notify()
	p := waitPublishDone(t, db, "pub-users")
	mu.Lock()
	defer mu.Unlock()
	if p.Sent != 2 || len(users) != 2 || users["apns-alice"] != "alice" || users["apns-bob"] != "bob" {
		t.Fatalf("publish sent %d; userId by device %v", p.Sent, users)
	}
}

// A publish no device is interested in is done at once, and so is one
// whose stored payload no longer parses (it resolves to no device).
func TestPublishWithoutTargetsIsDone(t *testing.T) {
	send := func(context.Context, storage.Delivery, *Prepared) Result { return sent() }
	core, logs := observer.New(zapcore.ErrorLevel)
	db, d := dispatchTo(t, Options{}, zap.New(core), send, "apns-1")
	publishTo(t, db, d, "pub-nobody", "no-such-interest")
	if p := waitPublishDone(t, db, "pub-nobody"); p.Targeted != 0 {
		t.Fatalf("targeted %d", p.Targeted)
	}
	if _, err := db.CreatePublish(t.Context(), storage.Publish{ID: "pub-broken", InstanceID: testInstance, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"fcm":"not an object"}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	d.Notify()
	if p := waitPublishDone(t, db, "pub-broken"); p.Targeted != 0 {
		t.Fatalf("broken payload: targeted %d", p.Targeted)
	}
	if logs.FilterMessage("stored publish payload is invalid").Len() != 1 {
		t.Fatalf("logged %v", logs.All())
	}
}

// Publishes still being delivered do not keep a new one from starting: with
// 64 publishes each holding a delivery at its gateway, a 65th is read and
// delivered. The held sends last until the test ends (their SendTimeout is
// an hour), so a new publish that waited for one of them would never be done.
func TestNewPublishStartsBehindBusyOnes(t *testing.T) {
	const busy = 64
	release := make(chan struct{})
	var held atomic.Int64
	send := func(ctx context.Context, del storage.Delivery, _ *Prepared) Result {
		if del.PublishID != "pub-new" {
			held.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return retry("stopping", 0)
			}
		}
		return sent()
	}
	var ids []string
	for i := range busy + 1 {
		ids = append(ids, fmt.Sprintf("apns-%02d", i))
	}
	db, d := dispatchTo(t, Options{SendTimeout: time.Hour}, zap.NewNop(), send, ids...)
	t.Cleanup(func() { close(release) })
	for i := range busy {
		publishTo(t, db, d, fmt.Sprintf("pub-%02d", i), ids[i])
	}
	wait.Until(t, "64 deliveries held", func() bool { return held.Load() == busy })
	publishTo(t, db, d, "pub-new", ids[busy])
	waitPublishDone(t, db, "pub-new")
}
