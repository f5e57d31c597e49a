package ws

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// parseSendBody takes exactly the UTF-8 JSON arrays of strings and never
// panics; the frames appendMessages makes of what it took decode back to
// the same strings.
func FuzzParseSendBody(f *testing.F) {
	for _, seed := range []string{
		`[]`, `["{\"event\":\"pusher:ping\",\"data\":{}}"]`, `["a","b"]`, `null`, `{}`, `[1]`, ``, ` `,
		"[\"\xff\"]", `["\u2028\"\\"]`, `[""]`, `["x"`, `[null]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msgs, err := parseSendBody(body)
		var want []string
		wantOK := utf8.Valid(body) && json.Unmarshal(body, &want) == nil && want != nil
		if (err == nil) != wantOK {
			t.Fatalf("parseSendBody(%q): err %v, want ok %v", body, err, wantOK)
		}
		if err != nil {
			return
		}
		frames := make([][]byte, len(msgs))
		for i, m := range msgs {
			frames[i] = []byte(m)
		}
		line := appendMessages(nil, frames)
		if line[len(line)-1] != '\n' {
			t.Fatalf("frame %q does not end its line", line)
		}
		var back []string
		if err := json.Unmarshal(line[1:len(line)-1], &back); err != nil {
			t.Fatalf("frame %q: %v", line, err)
		}
		for i := range msgs {
			if back[i] != msgs[i] {
				t.Fatalf("message %d: %q came back as %q", i, msgs[i], back[i])
			}
		}
		for _, b := range line[:len(line)-1] {
			if b == '\n' {
				t.Fatalf("frame %q holds a line end", line)
			}
		}
	})
}
