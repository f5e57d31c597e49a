package ws

import "testing"

func TestDataString(t *testing.T) {
	for raw, want := range map[string]string{"": "", `"a\"b"`: `a"b`, `{"x":1}`: `{"x":1}`, `"bad`: `"bad`, "5": "5"} {
		if got := dataString([]byte(raw)); got != want {
			t.Errorf("dataString(%q) = %q, want %q", raw, got, want)
		}
	}
}
