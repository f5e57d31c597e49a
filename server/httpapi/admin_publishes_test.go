package httpapi

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/heraldrt/herald/gen/adminclient"
	"github.com/heraldrt/herald/storage"
)

func TestAdminInstancePublishes(t *testing.T) {
	s := newAdminServer(t)
	ctx := context.Background()
	const id = "7a3c9b9f-4d2e-4b66-8b1f-2d3e4f5a6b7c"
	if res, err := s.client.CreateInstanceWithResponse(ctx, adminclient.InstanceCreate{ID: ptr(id)}); err != nil || res.JSON201 == nil {
		t.Fatalf("create instance: %v %s", err, res.Body)
	}
	create := func(pid string, kind storage.PublishTargetKind, targets ...string) storage.Publish {
		t.Helper()
		p, err := s.db.CreatePublish(ctx, storage.Publish{ID: pid, InstanceID: id, TargetKind: kind, Targets: targets,
			Payload: json.RawMessage(`{"fcm":{"notification":{"title":"hi"}}}`)}, 0, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // distinct creation times
		return p
	}
	first := create("pubid-first", storage.TargetInterests, "news", "sports")
	// No device has the interests: its one empty page finishes it.
	if _, err := s.db.StartPublish(ctx, first); err != nil {
		t.Fatal(err)
	}
	fcm := map[storage.Platform]bool{storage.PlatformFCM: true}
	pg, err := s.db.ClaimPage(ctx, first, storage.PlatformFCM, fcm, "node-a", time.Now(), time.Minute, 512)
	if err != nil || pg == nil {
		t.Fatalf("claim: %+v %v", pg, err)
	}
	done, _, err := s.db.CompletePages(ctx, []storage.PageResult{{PublishID: first.ID, Page: pg.ID, Owner: "node-a", Epoch: pg.Epoch,
		Streams: []storage.Platform{storage.PlatformFCM}}})
	if err != nil || len(done) != 1 || done[0].State != storage.PublishDone {
		t.Fatalf("complete: %+v %v", done, err)
	}
	create("pubid-second", storage.TargetUsers, "user-1")
	// Reports count from a device of the publish's user.
	d1, _, err := s.db.RegisterDevice(ctx, storage.Device{InstanceID: id, Platform: storage.PlatformFCM, Token: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.SetDeviceUser(ctx, id, storage.PlatformFCM, d1.ID, "user-1"); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []storage.ReportEvent{
		{InstanceID: id, PublishID: "pubid-second", DeviceID: d1.ID, Kind: storage.ReportDelivery},
		{InstanceID: id, PublishID: "pubid-second", DeviceID: d1.ID, Kind: storage.ReportOpen},
	} {
		if _, err := s.db.RecordReportEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("OKNewestFirst", func(t *testing.T) {
		res, err := s.client.ListInstancePublishesWithResponse(ctx, id, nil)
		if err != nil || res.JSON200 == nil {
			t.Fatalf("list: %v %d %s", err, res.StatusCode(), res.Body)
		}
		got := res.JSON200.Publishes
		if len(got) != 2 || got[0].PublishID != "pubid-second" || got[1].PublishID != "pubid-first" {
			t.Fatalf("publishes %s", res.Body)
		}
		second, first := got[0], got[1]
		if second.TargetKind != "users" || second.Targets != 1 || second.State != "accepted" ||
			second.Delivered != 1 || second.Opened != 1 || second.FinishedAt != nil {
			t.Errorf("second %+v", second)
		}
		if first.TargetKind != "interests" || first.Targets != 2 || first.State != "done" ||
			first.Targeted != 0 || first.FinishedAt == nil || first.Delivered != 0 {
			t.Errorf("first %+v", first)
		}
		// Which node sent how much: the one page node-a recorded.
		if first.Nodes == nil || len(*first.Nodes) != 1 || (*first.Nodes)[0] != (adminclient.PublishNodeShare{Node: "node-a", Pages: 1}) ||
			second.Nodes == nil || len(*second.Nodes) != 0 {
			t.Errorf("nodes of the publishes %s", res.Body)
		}
	})
	t.Run("OKLimit", func(t *testing.T) {
		res, err := s.client.ListInstancePublishesWithResponse(ctx, id, &adminclient.ListInstancePublishesParams{Limit: ptr(1)})
		if err != nil || res.JSON200 == nil || len(res.JSON200.Publishes) != 1 || res.JSON200.Publishes[0].PublishID != "pubid-second" {
			t.Fatalf("list: %v %s", err, res.Body)
		}
	})
	for _, tt := range []struct {
		name   string
		call   func() (int, []byte, error)
		status int
		kind   string
	}{
		{"ErrNoToken", func() (int, []byte, error) {
			r, err := s.anon.ListInstancePublishesWithResponse(ctx, id, nil)
			return r.StatusCode(), r.Body, err
		}, 401, "unauthorized"},
		{"ErrLimitZero", func() (int, []byte, error) {
			r, err := s.client.ListInstancePublishesWithResponse(ctx, id, &adminclient.ListInstancePublishesParams{Limit: ptr(0)})
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_limit"},
		{"ErrLimitTooLarge", func() (int, []byte, error) {
			r, err := s.client.ListInstancePublishesWithResponse(ctx, id, &adminclient.ListInstancePublishesParams{Limit: ptr(101)})
			return r.StatusCode(), r.Body, err
		}, 400, "invalid_limit"},
		{"ErrNotFound", func() (int, []byte, error) {
			r, err := s.client.ListInstancePublishesWithResponse(ctx, "00000000-0000-0000-0000-000000000000", nil)
			return r.StatusCode(), r.Body, err
		}, 404, "instance_not_found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body, err := tt.call()
			if err != nil {
				t.Fatal(err)
			}
			if status != tt.status || errKind(body) != tt.kind {
				t.Fatalf("got %d %s, want %d %s", status, body, tt.status, tt.kind)
			}
		})
	}
	for _, st := range []string{"200", "400", "401", "404"} {
		if !s.spec.seen["listinstancepublishes "+st] {
			t.Errorf("listInstancePublishes never answered %s: %v", st, s.spec.seen)
		}
	}
}
