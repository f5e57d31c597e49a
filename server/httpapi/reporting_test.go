package httpapi

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/gen/reportingclient"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

// A delivery report keeps the device's flags; an open drops them.
func TestReportFlagsKeptForDeliveriesOnly(t *testing.T) {
	path := testdb.SQLite(t) // read below as a file
	db := testdb.Open(t, storage.Open, path)
	if _, err := db.CreateInstance(context.Background(), storage.Instance{ID: pushInstanceID, SecretKey: pushSecret, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	// A device the publish targets, so that its reports are stored.
	d, _, err := db.RegisterDevice(context.Background(), storage.Device{InstanceID: pushInstanceID, Platform: storage.PlatformFCM, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddDeviceInterest(context.Background(), pushInstanceID, storage.PlatformFCM, d.ID, "news"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreatePublish(context.Background(), storage.Publish{ID: "p", InstanceID: pushInstanceID, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newPushEngine(t, db, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), nil))
	t.Cleanup(srv.Close)
	s := &pushServer{url: srv.URL}
	for _, ev := range []string{"delivery", "open"} {
		body := `{"event":"` + ev + `","publishId":"p","deviceId":"` + d.ID + `","timestampSecs":1700000000,"appInBackground":true,"hasDisplayableContent":true,"hasData":false}`
		status, res, _ := s.do(t, pushRequest{method: "POST", path: "/reporting_api/v2/instances/" + pushInstanceID + "/events", body: body, contentType: "application/json"})
		checkStatus(t, status, res, 200, "")
	}
	raw, err := sql.Open("sqlite", path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rows, err := raw.Query(`SELECT event, app_in_background, has_displayable_content, has_data FROM report_events ORDER BY event`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var kind string
		var bg, disp, data sql.NullBool
		if err := rows.Scan(&kind, &bg, &disp, &data); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %v/%v %v/%v %v/%v", kind, bg.Valid, bg.Bool, disp.Valid, disp.Bool, data.Valid, data.Bool))
	}
	if want := "delivery true/true true/true true/false|open false/false false/false false/false"; strings.Join(got, "|") != want {
		t.Fatalf("stored %q, want %q", strings.Join(got, "|"), want)
	}
}

// A report counts only for a publish of the instance that targeted the
// device, once per device and kind; one that does not count is answered 200
// all the same.
func TestReportEvents(t *testing.T) {
	s := newPushServer(t)
	ctx := context.Background()
	yes, no := true, false
	d1, d2, other := s.registerFCM(t, "t1"), s.registerFCM(t, "t2"), s.registerFCM(t, "t3")
	for id, interest := range map[string]string{d1: "news", d2: "news", other: "sports"} {
		if err := s.db.AddDeviceInterest(ctx, pushInstanceID, storage.PlatformFCM, id, interest); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.db.CreatePublish(ctx, storage.Publish{ID: "pubid-1", InstanceID: pushInstanceID, TargetKind: storage.TargetInterests,
		Targets: []string{"news"}, Payload: json.RawMessage(`{"fcm":{}}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []reportingclient.ReportEvent{
		{Event: "delivery", PublishID: "pubid-1", DeviceID: d1, TimestampSecs: 1_700_000_000, AppInBackground: &yes, HasDisplayableContent: &yes, HasData: &no},
		{Event: "Delivery", PublishID: "pubid-1", DeviceID: d2, TimestampSecs: 1_700_000_001, UserID: ptr("alice")},
		{Event: "delivery", PublishID: "pubid-1", DeviceID: d2, TimestampSecs: 1_700_000_002}, // a retry counts once
		{Event: "OPEN", PublishID: "pubid-1", DeviceID: d1, TimestampSecs: 1_700_000_010},
		{Event: "open", PublishID: "pubid-1", DeviceID: d1, TimestampSecs: 1_700_000_011},        // so does an open
		{Event: "delivery", PublishID: "pubid-1", DeviceID: other, TimestampSecs: 1_700_000_003}, // not a target
		{Event: "delivery", PublishID: "pubid-1", DeviceID: "fcm-nobody", TimestampSecs: 1_700_000_003},
		{Event: "delivery", PublishID: "pubid-made-up", DeviceID: d1, TimestampSecs: 1_700_000_004},
	} {
		res, err := s.reports.ReportEventWithResponse(ctx, pushInstanceID, ev)
		if err != nil || res.StatusCode() != 200 || strings.TrimSpace(string(res.Body)) != "{}" {
			t.Fatalf("report %+v: %v %d %s", ev, err, res.StatusCode(), res.Body)
		}
	}
	delivered, opened, err := s.db.PublishReportCounts(ctx, pushInstanceID, "pubid-1")
	if err != nil || delivered != 2 || opened != 1 {
		t.Fatalf("counts: delivered %d opened %d (%v), want 2 and 1", delivered, opened, err)
	}
	if delivered, opened, _ = s.db.PublishReportCounts(ctx, pushInstanceID, "pubid-made-up"); delivered != 0 || opened != 0 {
		t.Fatalf("a made-up publish counts delivered %d opened %d", delivered, opened)
	}
	delivered, opened, _ = s.db.DeviceReportCounts(ctx, pushInstanceID, d1)
	if delivered != 1 || opened != 1 {
		t.Fatalf("device d1 counts: delivered %d opened %d, want 1 and 1", delivered, opened)
	}
	if delivered, _, _ = s.db.DeviceReportCounts(ctx, pushInstanceID, other); delivered != 0 {
		t.Fatalf("a device the publish did not target counts %d deliveries", delivered)
	}
}

func TestReportErrors(t *testing.T) {
	s := newPushServer(t)
	path := "/reporting_api/v2/instances/" + pushInstanceID + "/events"
	post := func(body string) pushRequest {
		return pushRequest{method: "POST", path: path, body: body, contentType: "application/json"}
	}
	with := func(r pushRequest, f func(*pushRequest)) pushRequest { f(&r); return r }
	good := `{"event":"delivery","publishId":"p","deviceId":"d","timestampSecs":1700000000}`
	tests := []struct {
		name     string
		req      pushRequest
		status   int
		wantKind string
	}{
		{"OK", post(good), 200, ""},
		{"OKOpenCapitalised", post(`{"event":"Open","publishId":"p","deviceId":"d","timestampSecs":1700000000}`), 200, ""},
		{"OKUnknownFieldsIgnored", post(`{"event":"delivery","publishId":"p2","deviceId":"d","timestampSecs":1700000000,"appInBackground":true,"hasDisplayableContent":false,"hasData":true,"userId":"u","sdk":{"v":1}}`), 200, ""},
		{"OKContentTypeCharset", with(post(good), func(r *pushRequest) { r.contentType = "application/json;charset=utf-8" }), 200, ""},
		{"ErrWrongContentType", with(post(good), func(r *pushRequest) { r.contentType = "text/plain" }), 400, "invalid_content_type"},
		{"ErrMissingContentType", with(post(good), func(r *pushRequest) { r.contentType = "" }), 400, "invalid_content_type"},
		{"ErrInstanceNotUUID", with(post(good), func(r *pushRequest) { r.path = "/reporting_api/v2/instances/abc/events" }), 400, "invalid_instance_id"},
		{"ErrUnknownInstance", with(post(good), func(r *pushRequest) { r.path = "/reporting_api/v2/instances/" + unknownInstanceID + "/events" }), 404, "instance_not_found"},
		{"ErrNoBody", with(post(""), func(r *pushRequest) { r.contentType = "" }), 400, "invalid_request"},
		{"ErrNotObject", post(`[1,2]`), 400, "invalid_request"},
		{"ErrNotJSON", post(`{"event":`), 400, "invalid_request"},
		{"ErrMissingEvent", post(`{"publishId":"p","deviceId":"d","timestampSecs":1}`), 400, "missing_event"},
		{"ErrInvalidEvent", post(`{"event":"click","publishId":"p","deviceId":"d","timestampSecs":1}`), 400, "invalid_event"},
		{"ErrMissingPublishID", post(`{"event":"open","deviceId":"d","timestampSecs":1}`), 400, "missing_publish_id"},
		{"ErrMissingDeviceID", post(`{"event":"open","publishId":"p","timestampSecs":1}`), 400, "missing_device_id"},
		{"ErrMissingTimestamp", post(`{"event":"open","publishId":"p","deviceId":"d"}`), 400, "missing_timestamp"},
		{"ErrNegativeTimestamp", post(`{"event":"open","publishId":"p","deviceId":"d","timestampSecs":-5}`), 400, "invalid_timestamp"},
		{"ErrTimestampString", post(`{"event":"open","publishId":"p","deviceId":"d","timestampSecs":"now"}`), 400, "invalid_request"},
		{"ErrPublishIDTooLong", post(`{"event":"open","publishId":"` + strings.Repeat("p", 129) + `","deviceId":"d","timestampSecs":1}`), 400, "invalid_publish_id"},
		{"ErrUserIDTooLong", post(`{"event":"open","publishId":"p","deviceId":"d","timestampSecs":1,"userId":"` + strings.Repeat("u", 165) + `"}`), 400, "invalid_user_id"},
		{"ErrBodyTooLarge", post(`{"event":"open","pad":"` + strings.Repeat(" ", MaxReportBodyBytes) + `"}`), 413, "body_too_large"},
		{"ErrMethod", pushRequest{method: "GET", path: path}, 405, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body, header := s.do(t, tt.req)
			checkStatus(t, status, body, tt.status, tt.wantKind)
			if status < 404 && header.Get("Access-Control-Allow-Origin") != "*" {
				t.Fatalf("no CORS header on %d", status)
			}
		})
	}
	if !s.rspec.seen["reportevent 200"] || !s.rspec.seen["reportevent 400"] || !s.rspec.seen["reportevent 404"] || !s.rspec.seen["reportevent 413"] {
		t.Errorf("statuses answered: %v", s.rspec.seen)
	}
}
