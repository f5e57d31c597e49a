package storage

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/storage/testdb"
	"github.com/heraldrt/herald/storage/testpg"
)

// nested is JSON with depth arrays one in the other.
func nested(depth int) string { return strings.Repeat("[", depth) + strings.Repeat("]", depth) }

// The JSON CheckJSON refuses, each with the reason it gives, and the edge
// of each bound, which it accepts.
var checkJSONCases = []struct {
	name, json string
	reason     string // "" when accepted
}{
	{"Object", `{"a":[1,-2.5e-3,true,false,null,"x"],"b":{}}`, ""},
	{"Spaces", " \t\r\n{ \"a\" : [ 1 , 2 ] }\n", ""},
	{"SurrogatePair", `"\ud83d\ude00"`, ""},
	{"Escapes", `"\"\\\/\b\f\n\r\t\u00e9é"`, ""},
	{"EscapedBackslashBeforeU0000", `"\\u0000"`, ""},
	{"DepthAtTheBound", nested(MaxJSONDepth), ""},
	{"LargestFloat", `1.7976931348623157e308`, ""},
	{"SmallNumber", `-1e-999`, ""},
	{"ExponentWithZeros", `1e0000000308`, ""},
	{"NumberAtTheLength", "0." + strings.Repeat("1", MaxJSONNumberLength-2), ""},

	{"DepthPastTheBound", nested(MaxJSONDepth + 1), "more than 100 levels deep"},
	{"DepthPastSQLite", `{"a":` + nested(1001) + `}`, "more than 100 levels deep"},
	{"LoneHighSurrogate", `{"a":"\ud800"}`, `lone surrogate escape (\ud800)`},
	{"LoneLowSurrogate", `"x\udc00"`, `lone surrogate escape (\udc00)`},
	{"HighSurrogateThenHigh", `"\ud800\ud800"`, "lone surrogate"},
	{"HighSurrogateAtTheEnd", `"\ud800`, "lone surrogate"},
	{"HighSurrogateThenText", `"\ud800abcdef"`, "lone surrogate"},
	{"HugeExponent", `{"n":1e999999}`, "number out of range (1e999999)"},
	{"HugeNegativeExponent", `1e-999999`, "number out of range"},
	{"ZeroWithHugeExponent", `0e-99999`, "number out of range"},
	{"BeyondFloat", `1e309`, "beyond a 64-bit float"},
	{"LongNumber", "0." + strings.Repeat("0", MaxJSONNumberLength) + "1", "number out of range (0.000000000000000000…)"},
	{"NUL", `"a\u0000b"`, "NUL"},
	{"RawNUL", "\"a\x00b\"", "NUL"},
	{"NotUTF8", "\"a\xffb\"", "not UTF-8"},
	{"EncodedSurrogate", "\"\xed\xa0\x80\"", "not UTF-8"},

	{"Empty", ``, "not valid JSON"},
	{"Two", `1 2`, "not valid JSON"},
	{"TrailingComma", `[1,]`, "not valid JSON"},
	{"Unclosed", `{"a":1`, "not valid JSON"},
	{"BadEscape", `"\x"`, "not valid JSON"},
	{"ShortUnicode", `"\u12"`, "not valid JSON"},
	{"ControlCharacter", "\"a\tb\"", "not valid JSON"},
	{"LeadingZero", `01`, "not valid JSON"},
	{"NoFraction", `1.`, "not valid JSON"},
	{"NoExponent", `1e+`, "not valid JSON"},
	{"Plus", `+1`, "not valid JSON"},
	{"KeyNotString", `{1:2}`, "not valid JSON"},
	{"Literal", `nul`, "not valid JSON"},
}

func TestCheckJSON(t *testing.T) {
	for _, tt := range checkJSONCases {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckJSON([]byte(tt.json))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("CheckJSON refused it: %v", err)
				}
				if !json.Valid([]byte(tt.json)) {
					t.Fatal("accepted, but encoding/json says it is not JSON")
				}
				return
			}
			var je *JSONError
			if !errors.As(err, &je) || !errors.Is(err, ErrInvalidJSON) || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("CheckJSON = %v, want a *JSONError matching ErrInvalidJSON, saying %q", err, tt.reason)
			}
			if je.Syntax != (tt.reason == "not valid JSON") {
				t.Fatalf("Syntax = %v for %v", je.Syntax, err)
			}
			if got, want := errors.Is(err, ErrInvalidText), tt.reason == "NUL"; got != want {
				t.Fatalf("errors.Is(err, ErrInvalidText) = %v, want %v (NUL alone)", got, want)
			}
		})
	}
}

// What CheckJSON refuses is refused by a publish's write with
// ErrInvalidJSON on SQLite as on PostgreSQL (HERALD_TEST_DB=postgres), where
// the database would otherwise refuse it with an error of its own (a lone
// surrogate, a number beyond PostgreSQL's numeric: PostgreSQL; more than
// 1,000 levels: SQLite) and nothing is stored; what it accepts at each
// bound's edge is stored by both and read back as sent.
func TestUnstorableJSONIsRefused(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	for i, tt := range checkJSONCases {
		v := tt.json
		if tt.name == "DepthAtTheBound" {
			v = nested(MaxJSONDepth - 3) // inside the payload's three levels
		}
		payload := `{"fcm":{"data":{"k":` + v + `}}}`
		if !json.Valid([]byte(payload)) {
			continue // syntax: the API's JSON decoding refuses it before
		}
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("json-publish-%d", i)
			_, err := db.CreatePublish(ctx, Publish{ID: id, InstanceID: instanceID, TargetKind: TargetUsers, Targets: []string{"u1"},
				Payload: json.RawMessage(payload)}, 0, time.Time{})
			if tt.reason != "" {
				checkErr(t, "CreatePublish", err, ErrInvalidJSON)
				_, err = db.GetPublish(ctx, instanceID, id)
				checkErr(t, "GetPublish", err, ErrNotFound)
				return
			}
			checkErr(t, "CreatePublish", err, nil)
			p, err := db.GetPublish(ctx, instanceID, id)
			checkErr(t, "GetPublish", err, nil)
			var got, want any
			if err := errors.Join(json.Unmarshal(p.Payload, &got), json.Unmarshal([]byte(payload), &want)); err != nil {
				t.Fatal(err)
			}
			check(t, "payload read back", got, want)
		})
	}
}

// FuzzCheckJSON: what CheckJSON accepts is JSON to encoding/json and is
// taken by SQLite's JSON functions, and with HERALD_TEST_DB=postgres by
// PostgreSQL's jsonb, as the CHECKs on the JSON columns take it.
func FuzzCheckJSON(f *testing.F) {
	for _, tt := range checkJSONCases {
		f.Add(tt.json)
	}
	f.Add(`{"apns":{"aps":{"alert":"hi"}},"fcm":{"notification":{"title":"t"}}}`)
	lite, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { lite.Close() })
	var pg *sql.DB
	if testdb.OnPostgres() {
		if pg, err = sql.Open("pgx", testpg.Start(f)); err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { pg.Close() })
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckJSON([]byte(s)) != nil {
			return
		}
		if !json.Valid([]byte(s)) {
			t.Fatalf("CheckJSON accepted %q, which encoding/json refuses", s)
		}
		var typ string
		if err := lite.QueryRow(`SELECT json_type(?)`, s).Scan(&typ); err != nil {
			t.Fatalf("CheckJSON accepted %q, which SQLite refuses: %v", s, err)
		}
		if pg != nil {
			if err := pg.QueryRow(`SELECT jsonb_typeof($1::jsonb)`, s).Scan(&typ); err != nil {
				t.Fatalf("CheckJSON accepted %q, which PostgreSQL refuses: %v", s, err)
			}
		}
	})
}
