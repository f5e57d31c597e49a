package docs

import (
	"encoding/json"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/heraldrt/herald/gen/channels"
	"github.com/heraldrt/herald/gen/publish"
)

// The cross-field rules and the payload shapes the specs state, checked on
// the embedded specs the generated packages carry: a client or a
// spec-validating proxy refuses what Herald refuses.
func TestSpecRules(t *testing.T) {
	load := func(get func() (*openapi3.T, error)) *openapi3.T {
		doc, err := get()
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	specs := map[string]*openapi3.T{"channels": load(channels.GetSpec), "publish": load(publish.GetSpec)}
	for _, tc := range []struct {
		spec, schema, body string
		valid              bool
	}{
		{"channels", "TriggerEventRequest", `{"name":"foo","data":"{}","channels":["project-3"]}`, true},
		{"channels", "TriggerEventRequest", `{"name":"foo","data":"{}","channel":"project-3"}`, true},
		{"channels", "TriggerEventRequest", `{"name":"foo","data":"{}","channel":"a","channels":["b"]}`, false},
		{"channels", "TriggerEventRequest", `{"name":"foo","data":"{}"}`, false},
		{"channels", "TriggerEventRequest", `{"data":"{}","channel":"a"}`, false},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"apns":{"aps":{"alert":"hi"}}}`, true},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"fcm":{},"web":{}}`, true},
		{"publish", "InterestsPublishRequest", `{"interests":["a"]}`, false},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"webhookUrl":"https://example.com/hook"}`, false},
		{"publish", "UsersPublishRequest", `{"users":["u"],"web":{"notification":{"title":"hi"}}}`, true},
		{"publish", "UsersPublishRequest", `{"users":["u"]}`, false},
		// The payloads are typed and open for keys of their own.
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"apns":{"aps":{"alert":{"title":"t","loc-key":"K"}},"custom":1,"headers":{"apns-priority":"5","x":"y"}}}`, true},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"apns":{"headers":{"apns-priority":"7"}}}`, false},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"apns":{"headers":{"apns-expiration":"soon"}}}`, false},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"apns":{"aps":"alert"}}`, false},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"fcm":{"notification":{"title":"t","body_loc_args":["x"]},"data":{"n":1},"extra":true}}`, true},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"fcm":{"priority":"urgent"}}`, false},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"fcm":{"notification":{"title":1}}}`, false},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"fcm":{"time_to_live":2419201}}`, false},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"web":{"notification":{"title":"t","badge":"/b.png"},"time_to_live":60}}`, true},
		{"publish", "InterestsPublishRequest", `{"interests":["a"],"web":{"notification":{"hide_notification_if_site_has_focus":"yes"}}}`, false},
	} {
		t.Run(tc.schema+" "+tc.body, func(t *testing.T) {
			ref := specs[tc.spec].Components.Schemas[tc.schema]
			if ref == nil {
				t.Fatalf("%s has no schema %s", tc.spec, tc.schema)
			}
			var v any
			if err := json.Unmarshal([]byte(tc.body), &v); err != nil {
				t.Fatal(err)
			}
			err := ref.Value.VisitJSON(v, openapi3.MultiErrors())
			if (err == nil) != tc.valid {
				t.Fatalf("valid = %v, want %v (%v)", err == nil, tc.valid, err)
			}
		})
	}
}
