package ws

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/hub"
)

// Tests that kill mutants gremlins found alive (make mutate); the
// equivalent ones are listed in scripts/mutate-equivalent.md.

func TestDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.ActivityTimeout != 120*time.Second || o.PongTimeout != 30*time.Second || o.WriteTimeout != 10*time.Second ||
		o.MaxQueueBytes != hub.DefaultMaxQueueBytes || o.MaxMessageBytes != 16*1024 || o.MaxChannelsPerConn != 1000 ||
		o.SubscribeRate != 10 || o.SubscribeBurst != 100 || o.MaxSubscriptionsPerApp != 0 || o.ConnectRateLimit != 0 {
		t.Fatalf("defaults %+v", o)
	}
}

// The activity timeout goes to clients in whole seconds, rounded up, at
// least 1.
func TestActivitySeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{0: 1, time.Nanosecond: 1, time.Second: 1, time.Second + time.Nanosecond: 2,
		1500 * time.Millisecond: 2, 120 * time.Second: 120} {
		if got := activitySeconds(d); got != want {
			t.Errorf("activitySeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// A message of exactly the limit is read; a larger one is discarded to its
// end.
func TestReadMessageLimit(t *testing.T) {
	msg, tooBig, err := readMessage(strings.NewReader("12345"), 5)
	if err != nil || tooBig || string(msg) != "12345" {
		t.Fatalf("5 bytes with a 5-byte limit: %q, %v, %v", msg, tooBig, err)
	}
	r := strings.NewReader("123456")
	msg, tooBig, err = readMessage(r, 5)
	if err != nil || !tooBig || msg != nil || r.Len() != 0 {
		t.Fatalf("6 bytes with a 5-byte limit: %q, %v, %v, %d left", msg, tooBig, err, r.Len())
	}
}

func TestDataString(t *testing.T) {
	for raw, want := range map[string]string{"": "", `"a\"b"`: `a"b`, `{"x":1}`: `{"x":1}`, `"bad`: `"bad`, "5": "5"} {
		if got := dataString([]byte(raw)); got != want {
			t.Errorf("dataString(%q) = %q, want %q", raw, got, want)
		}
	}
}

// Close codes outside CloseCodes are counted under CloseCodeOther (-1),
// reported last.
func TestCountersOtherCloseCode(t *testing.T) {
	var h Handler
	h.stats.connClosed(4100)
	h.stats.connClosed(1234)
	h.stats.connRejected(4999)
	c := h.Counters()
	if len(c.Closed) != len(CloseCodes)+1 || len(c.Rejected) != len(CloseCodes)+1 {
		t.Fatalf("%d closed and %d rejected codes, want %d", len(c.Closed), len(c.Rejected), len(CloseCodes)+1)
	}
	last := len(CloseCodes)
	if c.Closed[last] != (CodeCount{Code: -1, Count: 1}) || c.Rejected[last] != (CodeCount{Code: -1, Count: 1}) {
		t.Fatalf("other codes: closed %+v, rejected %+v", c.Closed[last], c.Rejected[last])
	}
	for i, code := range CloseCodes {
		want := int64(0)
		if code == 4100 {
			want = 1
		}
		if c.Closed[i] != (CodeCount{Code: code, Count: want}) {
			t.Errorf("closed[%d] = %+v, want code %d counted %d", i, c.Closed[i], code, want)
		}
	}
}
