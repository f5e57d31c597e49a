package storage

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/heraldrt/herald/storage/testdb"
)

func TestRecentPublishes(t *testing.T) {
	db := testdb.New(t, Open)
	ctx := t.Context()
	if _, err := db.CreateInstance(ctx, testInstance(instanceID)); err != nil {
		t.Fatal(err)
	}
	other := "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	if _, err := db.CreateInstance(ctx, testInstance(other)); err != nil {
		t.Fatal(err)
	}
	create := func(in, id string, targets ...string) {
		t.Helper()
		if _, err := db.CreatePublish(ctx, Publish{ID: id, InstanceID: in, TargetKind: TargetInterests, Targets: targets,
			Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // distinct creation times
	}
	// Reports count only from devices the publish targets.
	var d [2]Device
	for i, token := range []string{"t1", "t2"} {
		d[i] = registerTestDevice(t, db, PlatformFCM, token)
		if err := db.AddDeviceInterest(ctx, instanceID, PlatformFCM, d[i].ID, "a"); err != nil {
			t.Fatal(err)
		}
	}
	create(instanceID, "pub-1", "a")
	create(instanceID, "pub-2", "a", "b")
	create(other, "pub-other", "a")
	create(instanceID, "pub-3", "a", "b", "c")
	for _, ev := range []ReportEvent{
		{InstanceID: instanceID, PublishID: "pub-2", DeviceID: d[0].ID, Kind: ReportDelivery},
		{InstanceID: instanceID, PublishID: "pub-2", DeviceID: d[1].ID, Kind: ReportDelivery},
		{InstanceID: instanceID, PublishID: "pub-2", DeviceID: d[0].ID, Kind: ReportOpen},
	} {
		if _, err := db.RecordReportEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}

	// pub-1's one page (both devices) is sent and recorded by node-a.
	pub1, err := db.GetPublish(ctx, instanceID, "pub-1")
	if err != nil {
		t.Fatal(err)
	}
	fcm := []Platform{PlatformFCM}
	pg, err := db.ClaimPage(ctx, pub1, PlatformFCM, map[Platform]bool{PlatformFCM: true}, "node-a", time.Now(), time.Minute, 16)
	if err != nil || pg == nil {
		t.Fatalf("ClaimPage: %v, %v", pg, err)
	}
	if _, _, err := db.CompletePages(ctx, []PageResult{{PublishID: "pub-1", Page: pg.ID, Owner: "node-a", Epoch: pg.Epoch,
		Streams: fcm, Targeted: len(pg.Targets), Sent: len(pg.Targets)}}); err != nil {
		t.Fatal(err)
	}

	t.Run("OKNodeShares", func(t *testing.T) {
		got, err := db.RecentPublishes(ctx, instanceID, 100)
		if err != nil || len(got) != 3 || got[2].ID != "pub-1" {
			t.Fatalf("got %+v, %v; want 3 publishes, pub-1 last", got, err)
		}
		want := []NodeShare{{Node: "node-a", Pages: 1, Targeted: 2, Sent: 2}}
		if !reflect.DeepEqual(got[2].Nodes, want) || len(got[1].Nodes) != 0 {
			t.Fatalf("node shares of pub-1 %+v and pub-2 %+v, want %+v and none", got[2].Nodes, got[1].Nodes, want)
		}
	})
	t.Run("OKNewestFirstWithLimit", func(t *testing.T) {
		got, err := db.RecentPublishes(ctx, instanceID, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].ID != "pub-3" || got[1].ID != "pub-2" {
			t.Fatalf("got %+v, want pub-3 then pub-2", got)
		}
		if got[0].Targets != 3 || got[0].TargetKind != TargetInterests || got[0].State != PublishAccepted || got[0].Delivered != 0 ||
			got[0].CreatedAt.IsZero() || !got[0].FinishedAt.IsZero() {
			t.Errorf("pub-3 = %+v", got[0])
		}
		if got[1].Delivered != 2 || got[1].Opened != 1 || got[1].Targets != 2 {
			t.Errorf("pub-2 = %+v, want 2 delivered and 1 opened", got[1])
		}
	})
	t.Run("OKOnlyTheInstance", func(t *testing.T) {
		got, err := db.RecentPublishes(ctx, instanceID, 100)
		if err != nil || len(got) != 3 {
			t.Fatalf("got %+v, %v; want 3 publishes", got, err)
		}
		for _, p := range got {
			if p.ID == "pub-other" {
				t.Error("a publish of another instance is listed")
			}
		}
	})
	t.Run("OKNone", func(t *testing.T) {
		got, err := db.RecentPublishes(ctx, "11111111-2222-4333-8444-555555555555", 10)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("got %#v, %v; want an empty list", got, err)
		}
	})
}
