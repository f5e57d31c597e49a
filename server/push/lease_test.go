package push

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/storage"
)

// A publish this node lost to another and took back between two listings
// is read again from the stored cursor, under its new lease epoch: node a
// reads a page, stalls past its lease, node b takes the publish over and
// records pages past a's, stalls in turn, and a takes it back. a's next
// listing drops the reading it had (its page in flight is not recorded,
// which would move the cursor back) and starts one from where b left the
// cursor, whose pages are recorded. The dispatcher is driven by hand, not
// started, and the leases run out by writing them in the database: nothing
// waits on a clock.
func TestRegainedPublishIsReadAgain(t *testing.T) {
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
	var devices []storage.DeviceImport
	for i := range 10 {
		devices = append(devices, storage.DeviceImport{Device: storage.Device{ID: fmt.Sprintf("apns-%02d", i), InstanceID: in.ID,
			Platform: storage.PlatformAPNs, Token: fmt.Sprintf("tok-%d", i)}, Interests: []string{"news"}})
	}
	if err := db.ImportDevices(ctx, devices); err != nil {
		t.Fatal(err)
	}
	const id = "pub-regained"
	if _, err := db.CreatePublish(ctx, storage.Publish{ID: id, InstanceID: in.ID, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"apns":{"aps":{"alert":"hi"}}}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	// runOut ends the publish's lease, whoever holds it: its holder stalled.
	raw, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String()+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	runOut := func() {
		t.Helper()
		if _, err := raw.ExecContext(ctx, `UPDATE publishes SET lease_until_ms = 0 WHERE id = ?`, id); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() storage.Publish {
		t.Helper()
		p, err := db.GetPublish(ctx, in.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	d := New(db, instanceMap{in.ID: &in}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), Options{Owner: "node-a", PageSize: 4})
	// sendAll answers every delivery queued for APNs as sent, as the
	// workers would, and returns their device ids.
	sendAll := func() []string {
		var ids []string
		for {
			select {
			case j := <-d.queues[storage.PlatformAPNs]:
				d.apply(nil, outcome{job: j, res: sent()})
				ids = append(ids, j.d.DeviceID)
			default:
				return ids
			}
		}
	}
	listed := func() *reading {
		t.Helper()
		active := d.listPublishes(ctx)
		if len(active) != 1 || active[0].publish.ID != id {
			t.Fatalf("listed %d publishes, want %s alone", len(active), id)
		}
		return active[0]
	}

	first := listed()
	st := first.streams[storage.PlatformAPNs]
	d.readPage(ctx, first, storage.PlatformAPNs, st)
	if st.cursor != "apns-03" || len(st.open) != 1 || st.open[0].result.LeaseEpoch != first.publish.LeaseEpoch {
		t.Fatalf("a's first page: cursor %q, %d open pages, want apns-03 and one under the reading's epoch %d",
			st.cursor, len(st.open), first.publish.LeaseEpoch)
	}

	runOut()
	b, err := db.ClaimPublishes(ctx, "node-b", time.Now(), time.Minute, 10)
	if err != nil || len(b) != 1 || b[0].LeaseEpoch == first.publish.LeaseEpoch {
		t.Fatalf("node b claimed %+v (%v): want the publish under a new epoch", b, err)
	}
	if _, dup, err := db.CompletePages(ctx, []storage.PageResult{{PublishID: id, Owner: "node-b", LeaseEpoch: b[0].LeaseEpoch,
		Stream: storage.PlatformAPNs, Cursor: "apns-05", Targeted: 6, Sent: 6}}); err != nil || dup != 0 {
		t.Fatalf("node b's page: %d duplicated, %v", dup, err)
	}

	runOut()
	second := listed()
	if second == first {
		t.Fatal("a went on with the reading of its first tenure after taking the publish back")
	}
	if second.publish.LeaseEpoch == first.publish.LeaseEpoch || second.publish.LeaseEpoch == b[0].LeaseEpoch {
		t.Fatalf("a's reading is under epoch %d after epochs %d (a) and %d (b)", second.publish.LeaseEpoch, first.publish.LeaseEpoch, b[0].LeaseEpoch)
	}
	d.mu.Lock()
	current := d.reading[id]
	d.mu.Unlock()
	if current != second {
		t.Fatal("the dispatcher keeps another reading than the one listed")
	}
	st2 := second.streams[storage.PlatformAPNs]
	if st2.cursor != "apns-05" || len(st2.open) != 0 {
		t.Fatalf("a's new reading starts at %q with %d open pages, want b's stored cursor apns-05 and none", st2.cursor, len(st2.open))
	}

	// a's page of its first tenure comes back, then one of its second.
	if got := sendAll(); len(got) != 4 {
		t.Fatalf("a's first page sent %v", got)
	}
	d.readPage(ctx, second, storage.PlatformAPNs, st2)
	if got := sendAll(); fmt.Sprint(got) != "[apns-06 apns-07 apns-08 apns-09]" {
		t.Fatalf("a's page after taking the publish back sent %v, want the devices after b's cursor", got)
	}
	d.write(nil)
	p := stored()
	if c := p.StreamCursor(storage.PlatformAPNs); c != "apns-09" || p.Targeted != 10 || p.Sent != 10 {
		t.Fatalf("stored cursor %q, targeted %d, sent %d; want apns-09, 10 and 10 (b's 6 and a's second page)", c, p.Targeted, p.Sent)
	}
}
