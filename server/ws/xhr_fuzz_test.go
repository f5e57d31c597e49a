package ws

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"unicode/utf8"
)

// parseSendBody takes a JSON array of strings and refuses the rest with
// the error that says why.
func TestParseSendBody(t *testing.T) {
	tests := []struct {
		body string
		want []string
		err  error
	}{
		{`[]`, []string{}, nil},
		{` ["{\"event\":\"pusher:ping\",\"data\":{}}"] `, []string{`{"event":"pusher:ping","data":{}}`}, nil},
		{`["a","\u2028\"\\"]`, []string{"a", "\u2028\"\\"}, nil},
		{``, nil, errSendEmpty},
		{" \n", nil, errSendEmpty},
		{"[\"\xff\"]", nil, errSendNotUTF8},
		{`null`, nil, errSendNotArray},
		{`{}`, nil, errSendNotArray},
		{`[1]`, nil, errSendNotArray},
		{`"a"`, nil, errSendNotArray},
		{`["x"`, nil, errSendNotArray},
	}
	for _, tt := range tests {
		got, err := parseSendBody([]byte(tt.body))
		if !errors.Is(err, tt.err) || !slices.Equal(got, tt.want) {
			t.Errorf("parseSendBody(%q) = %q, %v; want %q, %v", tt.body, got, err, tt.want, tt.err)
		}
	}
}

// parseSendBody never panics, and what it takes is UTF-8 that the frame
// appendMessages makes of it carries back unchanged, on one line.
func FuzzParseSendBody(f *testing.F) {
	for _, seed := range []string{
		`[]`, `["{\"event\":\"pusher:ping\",\"data\":{}}"]`, `["a","b"]`, `null`, `{}`, `[1]`, ``, ` `,
		"[\"\xff\"]", `["\u2028\"\\"]`, `[""]`, `["x"`, `[null]`, `["\n\u0000"]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msgs, err := parseSendBody(body)
		if err != nil {
			return
		}
		frames := make([][]byte, len(msgs))
		for i, m := range msgs {
			if !utf8.ValidString(m) {
				t.Fatalf("parseSendBody(%q) took %q, not UTF-8", body, m)
			}
			frames[i] = []byte(m)
		}
		line := appendMessages(nil, frames)
		if line[0] != 'a' || line[len(line)-1] != '\n' {
			t.Fatalf("frame %q is not a[...] ending its line", line)
		}
		var back []string
		if err := json.Unmarshal(line[1:len(line)-1], &back); err != nil {
			t.Fatalf("frame %q: %v", line, err)
		}
		if !slices.Equal(back, msgs) {
			t.Fatalf("messages %q came back as %q", msgs, back)
		}
		for _, b := range line[:len(line)-1] {
			if b == '\n' {
				t.Fatalf("frame %q holds a line end", line)
			}
		}
	})
}
