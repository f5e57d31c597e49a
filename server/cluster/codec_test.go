package cluster

import (
	"reflect"
	"strings"
	"testing"

	"github.com/heraldrt/herald/server/eventlog"
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

// Snapshots as joinScript writes them, after their node: a plain
// subscription, a presence one with its members and the cache channel's
// last event, a refusal, recoverable ones (nothing to resume, events
// missed, a reason they cannot be had); and malformed ones, refused.
func TestDecodeSnapshot(t *testing.T) {
	rec := func(f ...string) string { return encodeFields(0, f...)[1:] }
	id := func(ms, seq uint64) eventlog.ID { return eventlog.ID{MS: ms, Seq: seq} }
	base := hub.Snapshot{AppID: "app", Channel: "presence-r", SocketID: "1.1", Token: 7}
	with := func(change func(*hub.Snapshot)) hub.Snapshot {
		s := base
		change(&s)
		return s
	}
	for _, c := range []struct {
		name string
		f    []string
		want hub.Snapshot
	}{
		{"plain", []string{"app", "presence-r", "1.1", "7", "ok", "", "", ""}, base},
		{"presence, cached", []string{"app", "presence-r", "1.1", "7", "ok", "1", cacheValue("e", "{}"), "", "u1", `{"n":1}`, "u2", ""},
			with(func(s *hub.Snapshot) {
				s.Cached, s.CacheEvent, s.CacheData = true, "e", "{}"
				s.Members = []hub.MemberInfo{{UserID: "u1", Info: []byte(`{"n":1}`)}, {UserID: "u2", Info: []byte{}}}
			})},
		{"full", []string{"app", "presence-r", "1.1", "7", "full", "", "", ""}, with(func(s *hub.Snapshot) { s.Full = true })},
		{"recoverable", []string{"app", "presence-r", "1.1", "7", "ok", "", "", rec("5-1", "m", "")},
			with(func(s *hub.Snapshot) { s.Recovery = &hub.SnapshotRecovery{Position: id(5, 1), Mark: "m"} })},
		{"recovered", []string{"app", "presence-r", "1.1", "7", "ok", "", "", rec("5-1", "m", "ok", "3-0", "a", "{}", "4-2", "b", "[]"), "u1", "{}"},
			with(func(s *hub.Snapshot) {
				s.Recovery = &hub.SnapshotRecovery{Position: id(5, 1), Mark: "m", Events: []eventlog.Event{
					{ID: id(3, 0), Name: "a", Data: "{}"}, {ID: id(4, 2), Name: "b", Data: "[]"}}}
				s.Members = []hub.MemberInfo{{UserID: "u1", Info: []byte("{}")}}
			})},
		{"not recovered", []string{"app", "presence-r", "1.1", "7", "ok", "", "", rec("0-0", "m", "gap")},
			with(func(s *hub.Snapshot) { s.Recovery = &hub.SnapshotRecovery{Mark: "m", Reason: "gap"} })},
	} {
		got, err := decodeSnapshot(c.f)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: decoded %+v %v, want %+v", c.name, got, err, c.want)
		}
	}
	for _, bad := range [][]string{
		{"app", "presence-r", "1.1", "7", "ok", "", ""},
		{"app", "presence-r", "1.1", "7", "ok", "", "", "", "u1"},
		{"app", "presence-r", "1.1", "x", "ok", "", "", ""},
		{"app", "presence-r", "1.1", "7", "ok", "1", "e", ""},
		{"app", "presence-r", "1.1", "7", "ok", "1", rec("e", "{}", "x"), ""},
		{"app", "presence-r", "1.1", "7", "ok", "", "", "3:5-1"},
		{"app", "presence-r", "1.1", "7", "ok", "", "", rec("5-1", "m")},
		{"app", "presence-r", "1.1", "7", "ok", "", "", rec("5-1", "m", "ok", "3-0")},
		{"app", "presence-r", "1.1", "7", "ok", "", "", rec("x", "m", "")},
		{"app", "presence-r", "1.1", "7", "ok", "", "", rec("5-1", "m", "ok", "x", "a", "{}")},
	} {
		if s, err := decodeSnapshot(bad); err == nil {
			t.Errorf("%q decoded: %+v", bad, s)
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
