package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/console/traffic"
	"github.com/heraldrt/herald/server/directory"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/push"
)

type noNotifier struct{}

func (noNotifier) Published(string, *push.Payload) {}

// allAPIs serves every JSON API on one engine, as a node does.
func allAPIs(t *testing.T) string {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	db := openPushDB(t)
	publish := newPublishAPI(t, db, log, noNotifier{})
	engine := NewEngine(log)
	dir, err := directory.NewInstances(context.Background(), db, log)
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(log)
	channels := NewChannelsAPI(h, testApps, log, ChannelsOptions{})
	console := ConsoleParts{Channels: channels, History: traffic.New(traffic.Sources{Apps: traffic.HubApps(h)}, traffic.Options{})}
	Mount(engine, Routes{
		Channels:   channels,
		Publish:    publish,
		Device:     NewDeviceAPI(db, dir, log, DeviceOptions{}),
		Reporting:  NewReportingAPI(db, dir, log, ReportingOptions{}),
		Admin:      NewAdminAPI(db, h, console, log, AdminOptions{}),
		AdminToken: adminToken,
	})
	srv := httptest.NewServer(engine)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A JSON body followed by anything but whitespace is a 400 on every API; the
// same body alone, or with whitespace after it, is taken.
func TestTrailingDataRefused(t *testing.T) {
	base := allAPIs(t)
	device := "/device_api/v1/instances/" + pushInstanceID
	for _, tt := range []struct {
		name, method, path, body string
		sign                     bool   // a signed Channels request
		auth                     string // the Authorization header
	}{
		// The usual trigger body takes decodeTriggerEvent's path, one with
		// another member encoding/json's; both must refuse.
		{"TriggerFastPath", "POST", "/apps/1/events", `{"name":"e","channels":["news"],"data":"x"}`, true, ""},
		{"TriggerDecoderPath", "POST", "/apps/1/events", `{"name":"e","channels":["news"],"data":"x","extra":1}`, true, ""},
		{"Batch", "POST", "/apps/1/batch_events", `{"batch":[{"name":"e","channel":"news","data":"x"}]}`, true, ""},
		{"DeviceRegister", "POST", device + "/devices/fcm", `{"token":"trailing-data-token"}`, false, ""},
		{"Report", "POST", "/reporting_api/v2/instances/" + pushInstanceID + "/events",
			`{"event":"open","publishId":"pubid-0","deviceId":"fcm-0","timestampSecs":1700000000}`, false, ""},
		{"Publish", "POST", "/publish_api/v1/instances/" + pushInstanceID + "/publishes/interests", interestsBody("news"), false, "Bearer " + pushSecret},
		{"Admin", "POST", "/admin/v1/apps", `{}`, false, "Bearer " + adminToken},
	} {
		send := func(body string) (int, []byte) {
			req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			if tt.sign {
				if err := clientauth.ChannelsSigner("key1", "secret1")(context.Background(), req); err != nil {
					t.Fatal(err)
				}
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, b
		}
		t.Run(tt.name, func(t *testing.T) {
			for _, ok := range []string{"", " \r\n\t"} {
				if status, body := send(tt.body + ok); status/100 != 2 {
					t.Fatalf("%q: %d %s, want it taken", tt.body+ok, status, body)
				}
			}
			for _, trailing := range []string{" garbage", "{}", tt.body, "}", `"`, "\x00"} {
				status, body := send(tt.body + trailing)
				if status != http.StatusBadRequest || errKind(body) != KindInvalidRequest {
					t.Errorf("%q: %d %s, want 400 invalid_request", tt.body+trailing, status, body)
				}
			}
		})
	}
}

func TestDecodeJSON(t *testing.T) {
	type v struct{ A int }
	for _, tt := range []struct {
		name, body string
		want       error // nil: decodes
	}{
		{"OK", `{"A":1}`, nil},
		{"OKWhitespace", " \n{\"A\":1}\r\n\t ", nil},
		{"ErrEmpty", ``, io.EOF},
		{"ErrTrailingWord", `{"A":1} x`, errTrailingData},
		{"ErrSecondValue", `{"A":1}{"A":2}`, errTrailingData},
		{"ErrSecondNumber", `{"A":1} 2`, errTrailingData},
		{"ErrClosingBrace", `{"A":1}}`, errTrailingData},
		{"ErrOpenString", `{"A":1}"`, io.ErrUnexpectedEOF},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got v
			err := decodeJSON(strings.NewReader(tt.body), &got)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if tt.want == nil && got.A != 1 {
				t.Fatalf("decoded %+v", got)
			}
			// BindBody and Bind, the ways gin calls a binding, agree.
			if err := (strictJSON{}).BindBody([]byte(tt.body), &got); !errors.Is(err, tt.want) {
				t.Fatalf("BindBody: %v, want %v", err, tt.want)
			}
			req := httptest.NewRequest("POST", "/", strings.NewReader(tt.body))
			if err := (strictJSON{}).Bind(req, &got); !errors.Is(err, tt.want) {
				t.Fatalf("Bind: %v, want %v", err, tt.want)
			}
		})
	}
	// A read error after the value is the read error, not trailing data.
	r := io.MultiReader(strings.NewReader(`{"A":1} `), iotest.ErrReader(io.ErrClosedPipe))
	if err := decodeJSON(r, new(v)); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("read error after the value: %v", err)
	}
}
