package push

import (
	"encoding/json"
	"strings"
	"testing"
)

// The limits of a payload, on both sides: a TTL of four weeks is the most
// accepted and the Web Push default; apns-expiration is Unix seconds; a
// collapse id is at most 64 bytes.
func TestPayloadLimits(t *testing.T) {
	const fourWeeks = 2_419_200
	if DefaultWebTTL != fourWeeks {
		t.Fatalf("DefaultWebTTL = %d, want four weeks (%d s)", DefaultWebTTL, fourWeeks)
	}
	ok := []struct{ apns, fcm, web string }{
		{"", `{"time_to_live":2419200}`, ""},
		{"", "", `{"time_to_live":2419200}`},
		{"", "", `{"time_to_live":0}`},
		{`{"headers":{"apns-expiration":"1800000000"}}`, "", ""},
		{`{"headers":{"apns-expiration":""}}`, "", ""},
		{`{"headers":{"apns-collapse-id":"` + strings.Repeat("c", 64) + `"}}`, "", ""},
	}
	for _, tc := range ok {
		if _, err := ParsePayload(raw(tc.apns), raw(tc.fcm), raw(tc.web)); err != nil {
			t.Errorf("%s %s %s: %v, want it accepted", tc.apns, tc.fcm, tc.web, err)
		}
	}
	refused := []struct{ apns, fcm, web, field string }{
		{"", "", `{"time_to_live":2419201}`, "web.time_to_live"},
		{"", "", `{"time_to_live":-1}`, "web.time_to_live"},
		{`{"headers":{"apns-expiration":"soon"}}`, "", "", "apns.headers.apns-expiration"},
		{`{"headers":{"apns-expiration":"-1"}}`, "", "", "apns.headers.apns-expiration"},
	}
	for _, tc := range refused {
		_, err := ParsePayload(raw(tc.apns), raw(tc.fcm), raw(tc.web))
		if pe, ok := err.(*PayloadError); !ok || pe.Field != tc.field {
			t.Errorf("%s %s %s: %v, want a PayloadError on %s", tc.apns, tc.fcm, tc.web, err, tc.field)
		}
	}
}

func raw(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// An FCM notification without data says so in data.pusher.
func TestPrepareFCMWithoutData(t *testing.T) {
	p := mustPrepare(t, "", `{"notification":{"title":"T"}}`, "")
	var req struct {
		Message struct {
			Data map[string]string `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(p.FCMRequest("t"), &req); err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	if err := json.Unmarshal([]byte(req.Message.Data["pusher"]), &meta); err != nil {
		t.Fatal(err)
	}
	wantMeta(t, meta, true, false)
}
