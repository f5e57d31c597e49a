package ws

import (
	"testing"

	"github.com/heraldrt/herald/server/hub"
)

// Close codes outside hub.CloseCodes are counted under CloseCodeOther (-1),
// reported last.
func TestCountersOtherCloseCode(t *testing.T) {
	var h Handler
	h.stats.connClosed(4100)
	h.stats.connClosed(1234)
	h.stats.connRejected(4999)
	c := h.Counters()
	if len(c.Closed) != len(hub.CloseCodes)+1 || len(c.Rejected) != len(hub.CloseCodes)+1 {
		t.Fatalf("%d closed and %d rejected codes, want %d", len(c.Closed), len(c.Rejected), len(hub.CloseCodes)+1)
	}
	last := len(hub.CloseCodes)
	if c.Closed[last] != (CodeCount{Code: -1, Count: 1}) || c.Rejected[last] != (CodeCount{Code: -1, Count: 1}) {
		t.Fatalf("other codes: closed %+v, rejected %+v", c.Closed[last], c.Rejected[last])
	}
	for i, code := range hub.CloseCodes {
		want := int64(0)
		if code == 4100 {
			want = 1
		}
		if c.Closed[i] != (CodeCount{Code: code, Count: want}) {
			t.Errorf("closed[%d] = %+v, want code %d counted %d", i, c.Closed[i], code, want)
		}
	}
}
