package httpapi

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/heraldrt/herald/gen/channels"
)

// Every prefix of a trigger body is refused by the fast decoder or decoded
// as encoding/json does, without a panic.
func TestDecodeTriggerEventPrefixes(t *testing.T) {
	for _, tt := range triggerBodies {
		for i := range len(tt.body) {
			checkLikeEncodingJSON(t, []byte(tt.body[:i]))
		}
	}
}

// triggerBodies are bodies for the decoder tests: whether decodeTriggerEvent
// takes them (fast) or leaves them to encoding/json.
var triggerBodies = []struct {
	name string
	body string
	fast bool
}{
	{"SDK", `{"name":"price","channels":["news"],"data":"{\"symbol\":\"HRLD\",\"price\":42.5}"}`, true},
	{"AllMembers", `{"name":"e","data":"d","channel":"c","channels":["a","b"],"socket_id":"1.2","info":"user_count"}`, true},
	{"Whitespace", " \r\n\t{ \"name\" : \"e\" ,\n\"channels\" : [ \"a\" , \"b\" ] , \"data\":\"\" }\n", true},
	{"EmptyObject", `{}`, true},
	{"EmptyChannels", `{"channels":[]}`, true},
	{"ShortEscapes", `{"data":"\"\\\/\b\f\n\r\t"}`, true},
	{"UTF8", `{"name":"é","data":"日本語 🚀"}`, true},
	{"TrailingWhitespace", "{\"name\":\"e\"} \r\n\t", true},
	{"TrailingData", `{"name":"e"} trailing`, false},
	{"TrailingObject", `{"name":"e"}{"name":"f"}`, false},
	{"EmptyObjectTrailingData", `{}x`, false},
	{"TrailingBrace", `{"name":"e"}}`, false},
	{"UnicodeEscape", `{"data":"\u00e9"}`, false},
	{"Surrogates", `{"data":"\ud83d\ude80"}`, false},
	{"InvalidUTF8", "{\"data\":\"\xff\"}", false},
	{"ControlCharacter", "{\"data\":\"a\x01\"}", false},
	{"OtherCase", `{"Name":"e"}`, false},
	{"UnknownMember", `{"name":"e","extra":1}`, false},
	{"EscapedKey", `{"na\u006de":"e"}`, false},
	{"Repeated", `{"name":"e","name":"f"}`, false},
	{"RepeatedChannels", `{"channels":["a"],"channels":["b"]}`, false},
	{"Null", `{"name":null}`, false},
	{"NullBody", `null`, false},
	{"Number", `{"name":1}`, false},
	{"ChannelsNotArray", `{"channels":"a"}`, false},
	{"ChannelsOfNumbers", `{"channels":[1]}`, false},
	{"Array", `[]`, false},
	{"Empty", ``, false},
	{"OnlyWhitespace", "  \n", false},
	{"Unterminated", `{"name":"e"`, false},
	{"UnterminatedString", `{"name":"e`, false},
	{"TrailingComma", `{"name":"e",}`, false},
	{"TrailingCommaInArray", `{"channels":["a",]}`, false},
	{"MissingColon", `{"name" "e"}`, false},
	{"BadEscape", `{"name":"\x"}`, false},
	{"BackslashAtEnd", `{"name":"\`, false},
}

func TestDecodeTriggerEvent(t *testing.T) {
	for _, tt := range triggerBodies {
		t.Run(tt.name, func(t *testing.T) {
			var got channels.TriggerEventRequest
			if fast := decodeTriggerEvent([]byte(tt.body), &got); fast != tt.fast {
				t.Fatalf("decodeTriggerEvent took it: %v, want %v", fast, tt.fast)
			}
			checkLikeEncodingJSON(t, []byte(tt.body))
		})
	}
}

// checkLikeEncodingJSON fails when decodeTriggerEvent accepts body and decodes
// it differently from decodeJSON (encoding/json, one value and nothing after
// it: what the generated handlers bind with), or when it refuses it but still
// changes its destination.
func checkLikeEncodingJSON(t *testing.T, body []byte) {
	t.Helper()
	var want channels.TriggerEventRequest
	wantErr := decodeJSON(bytes.NewReader(body), &want)
	sentinel := "untouched"
	got := channels.TriggerEventRequest{Name: &sentinel}
	if !decodeTriggerEvent(body, &got) {
		if got.Name != &sentinel || got.Data != nil || got.Channels != nil {
			t.Fatalf("%q: refused but changed the destination: %+v", body, got)
		}
		return
	}
	if wantErr != nil {
		t.Fatalf("%q: accepted, but encoding/json fails: %v", body, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		gotJSON, _ := json.Marshal(got)
		wantJSON, _ := json.Marshal(want)
		t.Fatalf("%q:\n got %s\nwant %s", body, gotJSON, wantJSON)
	}
}

func FuzzDecodeTriggerEvent(f *testing.F) {
	for _, tt := range triggerBodies {
		f.Add([]byte(tt.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkLikeEncodingJSON(t, body)
	})
}

func BenchmarkDecodeTriggerEvent(b *testing.B) {
	body := []byte(triggerBodies[0].body)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v channels.TriggerEventRequest
			if !decodeTriggerEvent(body, &v) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v channels.TriggerEventRequest
			if err := json.NewDecoder(bytes.NewReader(body)).Decode(&v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestEmptyTriggerResultMatchesGenerated(t *testing.T) {
	generated, fast := httptest.NewRecorder(), httptest.NewRecorder()
	if err := (channels.TriggerEvent200JSONResponse{}).VisitTriggerEventResponse(generated); err != nil {
		t.Fatal(err)
	}
	if err := writeEmptyTriggerResult(fast); err != nil {
		t.Fatal(err)
	}
	if fast.Code != generated.Code || !reflect.DeepEqual(fast.Header(), generated.Header()) || fast.Body.String() != generated.Body.String() {
		t.Fatalf("got %d %v %q, the generated visitor writes %d %v %q",
			fast.Code, fast.Header(), fast.Body, generated.Code, generated.Header(), generated.Body)
	}
}

// TestDecodeTriggerEventRandomBodies encodes random requests as SDKs would
// and checks that the fast path takes those it should and decodes them as
// encoding/json does.
func TestDecodeTriggerEventRandomBodies(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	// Mostly characters the fast path handles; now and then one that
	// encoding/json writes as a \u escape.
	common := []rune("ab\"\\/\b\f\n\r\t é日🚀")
	rare := []rune("\x01\x1f<>&\u2028")
	randomString := func() string {
		r := make([]rune, rng.IntN(12))
		for i := range r {
			if rng.IntN(50) == 0 {
				r[i] = rare[rng.IntN(len(rare))]
			} else {
				r[i] = common[rng.IntN(len(common))]
			}
		}
		return string(r)
	}
	maybe := func() *string { // a member or none
		if rng.IntN(4) == 0 {
			return nil
		}
		s := randomString()
		return &s
	}
	taken := 0
	for range 5000 {
		req := channels.TriggerEventRequest{Name: maybe(), Data: maybe(), Channel: maybe(), SocketID: maybe(), Info: maybe()}
		if rng.IntN(3) > 0 {
			list := []string{}
			for range rng.IntN(4) {
				list = append(list, randomString())
			}
			req.Channels = &list
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(rng.IntN(2) == 0)
		if err := enc.Encode(req); err != nil {
			t.Fatal(err)
		}
		checkLikeEncodingJSON(t, buf.Bytes())
		var v channels.TriggerEventRequest
		if decodeTriggerEvent(buf.Bytes(), &v) {
			taken++
		} else if !bytes.Contains(buf.Bytes(), []byte(`\u`)) {
			t.Fatalf("%s: refused, but it holds no \\u escape", buf.Bytes())
		}
	}
	if taken < 1000 {
		t.Fatalf("the fast path took only %d of 5000 bodies", taken)
	}
}
