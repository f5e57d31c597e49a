package hub

import (
	"strings"
	"testing"
)

// Frames are the JSON encoding/json would write (without HTML escaping):
// the user id when there is one, fields of any length, every string escaped
// as little as JSON allows and invalid UTF-8 replaced by U+FFFD.
func TestEventFrameBytes(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		event, channel, data, userID string
		want                         string
	}{
		{"e", "c", "d", "u", `{"event":"e","channel":"c","data":"d","user_id":"u"}`},
		{"e", "", "d", "", `{"event":"e","data":"d"}`},
		{long, "", "", "", `{"event":"` + long + `","data":""}`},
		{"e", long, "", "", `{"event":"e","channel":"` + long + `","data":""}`},
		{"e", "c", long, "", `{"event":"e","channel":"c","data":"` + long + `"}`},
		{"e", "c", "", long, `{"event":"e","channel":"c","data":"","user_id":"` + long + `"}`},
		{"e", "c", "a b~\x7f<>&", "", "{\"event\":\"e\",\"channel\":\"c\",\"data\":\"a b~\x7f<>&\"}"},
		{"e", "c", "\x80|a\xffb|\xc3", "", `{"event":"e","channel":"c","data":"\ufffd|a\ufffdb|\ufffd"}`},
		{"e", "c", "é✓😀\ufffd", "", `{"event":"e","channel":"c","data":"é✓😀` + "\ufffd" + `"}`},
		{"e", "c", "\"\\\n\x01", "", `{"event":"e","channel":"c","data":"\"\\\n\u0001"}`},
	} {
		if got := string(EventFrame(tc.event, tc.channel, tc.data, tc.userID)); got != tc.want {
			t.Errorf("EventFrame(%q, %q, %q, %q)\n got %s\nwant %s", tc.event, tc.channel, tc.data, tc.userID, got, tc.want)
		}
	}
}

// JSONFrame panics, saying so, on a value that does not encode: a bug of
// the server's own, never of a client's input.
func TestJSONFramePanicsOnAValueThatDoesNotEncode(t *testing.T) {
	var got any
	func() {
		defer func() { got = recover() }()
		JSONFrame("e", "c", struct{ C chan int }{})
	}()
	if s, _ := got.(string); !strings.HasPrefix(s, "hub: encoding server event: json: unsupported type") {
		t.Fatalf("recovered %v, want the encoding error", got)
	}
}
