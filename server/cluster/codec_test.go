package cluster

import (
	"strings"
	"testing"

	"github.com/heraldrt/herald/server/hub"
)

func TestCodecRoundTrip(t *testing.T) {
	answer := encodeFields(kindSnapshot, "n1", "app")[1:]
	if !startsWithField(answer, "n1") || startsWithField(answer, "n") || startsWithField(encodeFields(kindSnapshot, "n10")[1:], "n1") {
		t.Fatal("startsWithField does not tell a node's answers from another's")
	}
	m := hub.Message{AppID: "a:1", Channel: "private-x", Event: "e", Data: "12:ab\x00ü", UserID: "u", ExcludeSocketID: "1.2", Cache: true}
	enc := encodeEvent(m)
	f, err := fields(enc[1:])
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeEvent(f)
	if err != nil || got != m {
		t.Fatalf("round trip %+v %v", got, err)
	}
	// Each field long in turn: the encoder sizes its buffer from them all.
	for i := range 6 {
		long := []string{"a", "c", "e", "d", "u", "1.2"}
		long[i] = strings.Repeat("x", 200)
		m := hub.Message{AppID: long[0], Channel: long[1], Event: long[2], Data: long[3], UserID: long[4], ExcludeSocketID: long[5]}
		f, err := fields(encodeEvent(m)[1:])
		if err != nil {
			t.Fatalf("field %d long: %v", i, err)
		}
		if got, err := decodeEvent(f); err != nil || got != m {
			t.Fatalf("field %d long: round trip %+v %v", i, got, err)
		}
	}
	for _, bad := range []string{
		"5:ab", "3:ab", "x:ab", ":", "-1:", "99999999999999:a",
		"0x", "12", // no colon at all
		"000000000001:x", // a length of more than 11 digits
	} {
		if _, err := fields(bad); err == nil {
			t.Errorf("fields(%q) accepted", bad)
		}
	}
}

func FuzzFields(f *testing.F) {
	f.Add(encodeEvent(hub.Message{AppID: "a", Channel: "c", Event: "e", Data: "d"})[1:])
	f.Add("3:abc0:")
	f.Fuzz(func(t *testing.T, s string) {
		out, err := fields(s)
		if err != nil {
			return
		}
		re := encodeFields('E', out...)
		if re[1:] != s {
			t.Fatalf("re-encoding %q gives %q", s, re[1:])
		}
	})
}
