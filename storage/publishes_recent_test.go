package storage

import (
	"encoding/json"
	"testing"
	"time"
)

func TestRecentPublishes(t *testing.T) {
	db := openTestDB(t)
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
