package push

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldrt/herald/storage"
)

// The resolver claims the pages of every publish it lists in one claim; a
// publish whose claim fails (its stored cursor is corrupt) is then claimed
// on its own, failing alone, and the publishes after it are sent.
func TestPublishThatCannotBeClaimedHoldsUpNoOther(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "herald.db")
	db, err := storage.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	in, err := db.CreateInstance(ctx, storage.Instance{ID: testInstance, SecretKey: "secret", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ImportDevices(ctx, []storage.DeviceImport{{Device: storage.Device{ID: "apns-1", InstanceID: in.ID,
		Platform: storage.PlatformAPNs, Token: "tok-1"}, Interests: []string{"news"}}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"pub-stuck", "pub-ok"} {
		if _, err := db.CreatePublish(ctx, storage.Publish{ID: id, InstanceID: in.ID, TargetKind: storage.TargetInterests,
			Targets: []string{"news"}, Payload: json.RawMessage(`{"apns":{"aps":{"alert":"hi"}}}`)}, 0, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String()+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
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
