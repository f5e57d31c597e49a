package signing

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/clientauth"
)

func TestParseQueryWithoutSeparator(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want string // StringToSign's query line
	}{
		{"", ""},
		{"auth_key=k", "auth_key=k"},
		{"&", ""},
	} {
		p, err := ParseQuery(tt.raw)
		if err != nil {
			t.Fatalf("ParseQuery(%q): %v", tt.raw, err)
		}
		if got, want := p.StringToSign("GET", "/p"), "GET\n/p\n"+tt.want; got != want {
			t.Fatalf("ParseQuery(%q): string to sign %q, want %q", tt.raw, got, want)
		}
	}
}

func TestKey(t *testing.T) {
	for _, tt := range []struct {
		raw, want string
	}{
		{"auth_key=278d&auth_timestamp=1", "278d"},
		{"AUTH_KEY=278d", "278d"},
		{"auth_key=", ""},
		{"auth_timestamp=1", ""},
	} {
		p, err := ParseQuery(tt.raw)
		if err != nil {
			t.Fatal(err)
		}
		key, ferr := p.Key()
		if tt.want != "" && (key != tt.want || ferr != nil) {
			t.Fatalf("%q: Key() = %q, %v; want %q", tt.raw, key, ferr, tt.want)
		}
		if tt.want == "" && (ferr == nil || ferr.Kind != KindMissingParam) {
			t.Fatalf("%q: Key() = %q, %v; want %s", tt.raw, key, ferr, KindMissingParam)
		}
	}
	if got, want := fail(KindBadVersion, "auth_version must be %s.", AuthVersion).Error(), "invalid_auth_version: auth_version must be 1.0."; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

// The test vector published with the Pusher HTTP API documentation.
const (
	vectorKey    = "278d425bdf160c739803"
	vectorSecret = "7ad3773142a6692b25b8"
	vectorBody   = `{"name":"foo","channels":["project-3"],"data":"{\"some\":\"data\"}"}`
)

func TestStringToSignPublishedVector(t *testing.T) {
	p, err := ParseQuery("auth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f")
	if err != nil {
		t.Fatal(err)
	}
	want := "POST\n/apps/3/events\nauth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f"
	if got := p.StringToSign("POST", "/apps/3/events"); got != want {
		t.Fatalf("string to sign:\n got %q\nwant %q", got, want)
	}
	if got, want := HMACHex(vectorSecret, want), "da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"; got != want {
		t.Fatalf("signature: got %s, want %s", got, want)
	}
}

func TestVerifyPublishedVector(t *testing.T) {
	raw := "auth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f&auth_signature=da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"
	p, err := ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Method: "POST", Path: "/apps/3/events", RawQuery: raw, Body: []byte(vectorBody)}
	if err := Verify(req, p, vectorSecret, time.Unix(1353088179, 0)); err != nil {
		t.Fatalf("published vector refused: %v", err)
	}
}

func TestVerifyFailures(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"name":"e","channel":"c","data":"x"}`)
	signed := func(method, path string, body []byte, at time.Time) string {
		return clientauth.SignQuery(method, path, url.Values{}, body, vectorKey, vectorSecret, at)
	}
	edit := func(raw string, f func(url.Values)) string {
		q, _ := url.ParseQuery(raw)
		f(q)
		return q.Encode()
	}
	good := signed("POST", "/apps/3/events", body, now)
	tests := []struct {
		name     string
		method   string
		path     string
		query    string
		body     []byte
		secret   string
		wantKind string
	}{
		{"OK", "POST", "/apps/3/events", good, body, vectorSecret, ""},
		{"OKWithinSkew", "POST", "/apps/3/events", signed("POST", "/apps/3/events", body, now.Add(-599*time.Second)), body, vectorSecret, ""},
		{"OKExactlyMaxSkewPast", "POST", "/apps/3/events", signed("POST", "/apps/3/events", body, now.Add(-MaxClockSkew)), body, vectorSecret, ""},
		{"OKExactlyMaxSkewFuture", "POST", "/apps/3/events", signed("POST", "/apps/3/events", body, now.Add(MaxClockSkew)), body, vectorSecret, ""},
		{"OKGetNoBody", "GET", "/apps/3/channels", signed("GET", "/apps/3/channels", nil, now), nil, vectorSecret, ""},
		{"ErrMissingKey", "POST", "/apps/3/events", edit(good, func(q url.Values) { q.Del("auth_key") }), body, vectorSecret, KindMissingParam},
		{"ErrMissingTimestamp", "POST", "/apps/3/events", edit(good, func(q url.Values) { q.Del("auth_timestamp") }), body, vectorSecret, KindMissingParam},
		{"ErrMissingVersion", "POST", "/apps/3/events", edit(good, func(q url.Values) { q.Del("auth_version") }), body, vectorSecret, KindMissingParam},
		{"ErrMissingSignature", "POST", "/apps/3/events", edit(good, func(q url.Values) { q.Del("auth_signature") }), body, vectorSecret, KindMissingParam},
		{"ErrBadVersion", "POST", "/apps/3/events", edit(good, func(q url.Values) { q.Set("auth_version", "2.0") }), body, vectorSecret, KindBadVersion},
		{"ErrTimestampNotInteger", "POST", "/apps/3/events", edit(good, func(q url.Values) { q.Set("auth_timestamp", "soon") }), body, vectorSecret, KindBadTimestamp},
		{"ErrTimestampTooOld", "POST", "/apps/3/events", signed("POST", "/apps/3/events", body, now.Add(-601*time.Second)), body, vectorSecret, KindBadTimestamp},
		{"ErrTimestampInFuture", "POST", "/apps/3/events", signed("POST", "/apps/3/events", body, now.Add(601*time.Second)), body, vectorSecret, KindBadTimestamp},
		{"ErrMissingBodyMD5", "POST", "/apps/3/events", edit(good, func(q url.Values) { q.Del("body_md5") }), body, vectorSecret, KindBodyMD5},
		{"ErrBodyChanged", "POST", "/apps/3/events", good, []byte(`{"name":"e","channel":"c","data":"y"}`), vectorSecret, KindBodyMD5},
		{"ErrWrongSecret", "POST", "/apps/3/events", good, body, "not-the-secret", KindBadSignature},
		{"ErrOtherPath", "POST", "/apps/4/events", good, body, vectorSecret, KindBadSignature},
		{"ErrOtherMethod", "PUT", "/apps/3/events", good, body, vectorSecret, KindBadSignature},
		{"ErrSignatureNotHex", "POST", "/apps/3/events", edit(good, func(q url.Values) { q.Set("auth_signature", "zz") }), body, vectorSecret, KindBadSignature},
		{"ErrExtraParamNotSigned", "POST", "/apps/3/events", good + "&info=user_count", body, vectorSecret, KindBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			got := Verify(Request{Method: tt.method, Path: tt.path, RawQuery: tt.query, Body: tt.body}, p, tt.secret, now)
			switch {
			case tt.wantKind == "" && got != nil:
				t.Fatalf("refused: %v", got)
			case tt.wantKind != "" && got == nil:
				t.Fatalf("accepted, want %s", tt.wantKind)
			case tt.wantKind != "" && got.Kind != tt.wantKind:
				t.Fatalf("kind: got %s (%s), want %s", got.Kind, got.Description, tt.wantKind)
			}
		})
	}
}

func TestVerifyUnescapedPath(t *testing.T) {
	now := time.Now()
	// Signed over the unescaped path, sent escaped: both forms are accepted.
	query := clientauth.SignQuery("GET", "/apps/3/channels/#server-to-user-1", url.Values{}, nil, vectorKey, vectorSecret, now)
	p, _ := ParseQuery(query)
	if err := Verify(Request{Method: "GET", Path: "/apps/3/channels/%23server-to-user-1"}, p, vectorSecret, now); err != nil {
		t.Fatalf("refused: %v", err)
	}
}

func TestStringToSignSortsLowercasedKeysKeepingRepeats(t *testing.T) {
	p, err := ParseQuery("b=2&Auth_Key=k&channels%5B%5D=x&channels%5B%5D=a&a=1&auth_signature=zzz")
	if err != nil {
		t.Fatal(err)
	}
	want := "GET\n/p\na=1&auth_key=k&b=2&channels[]=x&channels[]=a"
	if got := p.StringToSign("get", "/p"); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestChannelAndUserAuth(t *testing.T) {
	// Example from the Pusher channel authorization documentation.
	got := ChannelAuth(vectorKey, vectorSecret, "1234.1234", "private-foobar", "")
	if want := "278d425bdf160c739803:58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4"; got != want {
		t.Fatalf("private auth: got %s, want %s", got, want)
	}
	data := `{"user_id":10,"user_info":{"name":"Mr. Channels"}}`
	presence := ChannelAuth(vectorKey, vectorSecret, "1234.1234", "presence-foobar", data)
	if want := "278d425bdf160c739803:31935e7d86dba64c2a90aed31fdc61869f9b22ba9d8863bba239c03ca481bc80"; presence != want {
		t.Fatalf("presence auth: got %s, want %s", presence, want)
	}
	if !VerifyChannelAuth(presence, vectorKey, vectorSecret, "1234.1234", "presence-foobar", data) {
		t.Fatal("valid presence auth refused")
	}
	for name, auth := range map[string]string{
		"OtherKey":    "other:" + strings.SplitN(got, ":", 2)[1],
		"NoColon":     vectorKey,
		"NotHex":      vectorKey + ":xyz",
		"OtherSocket": ChannelAuth(vectorKey, vectorSecret, "1.2", "private-foobar", ""),
	} {
		if VerifyChannelAuth(auth, vectorKey, vectorSecret, "1234.1234", "private-foobar", "") {
			t.Fatalf("%s: bad auth accepted", name)
		}
	}
	user := UserAuth(vectorKey, vectorSecret, "1.2", `{"id":"u"}`)
	if !VerifyUserAuth(user, vectorKey, vectorSecret, "1.2", `{"id":"u"}`) || VerifyUserAuth(user, vectorKey, vectorSecret, "1.3", `{"id":"u"}`) {
		t.Fatal("user auth check wrong")
	}
}

func FuzzVerify(f *testing.F) {
	now := time.Unix(1353088179, 0)
	f.Add("POST", "/apps/3/events", "auth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f&auth_signature=da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c", []byte(vectorBody))
	f.Add("GET", "/apps/1/channels", "a=%zz&b", []byte{})
	f.Add("GET", "/%", "auth_key=&auth_signature=%41", []byte("x"))
	f.Fuzz(func(t *testing.T, method, path, query string, body []byte) {
		p, err := ParseQuery(query)
		if err != nil {
			return
		}
		verr := Verify(Request{Method: method, Path: path, RawQuery: query, Body: body}, p, vectorSecret, now)
		if verr != nil && (verr.Kind == "" || verr.Description == "") {
			t.Fatalf("failure without kind or description: %#v", verr)
		}
		// A request we sign ourselves over the same inputs always verifies.
		values, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		signed := clientauth.SignQuery(method, path, values, body, vectorKey, vectorSecret, now)
		sp, err := ParseQuery(signed)
		if err != nil {
			t.Fatalf("own signed query does not parse: %v", err)
		}
		if verr := Verify(Request{Method: method, Path: path, RawQuery: signed, Body: body}, sp, vectorSecret, now); verr != nil && strings.ToUpper(method) == method {
			t.Fatalf("own signature refused: %v (query %q)", verr, signed)
		}
	})
}

func FuzzVerifyChannelAuth(f *testing.F) {
	f.Add("278d425bdf160c739803:58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4", "1234.1234", "private-foobar", "")
	f.Add(":", "", "", "{}")
	f.Fuzz(func(t *testing.T, auth, socketID, channel, data string) {
		ok := VerifyChannelAuth(auth, vectorKey, vectorSecret, socketID, channel, data)
		if ok && auth != ChannelAuth(vectorKey, vectorSecret, socketID, channel, data) && !strings.EqualFold(auth, ChannelAuth(vectorKey, vectorSecret, socketID, channel, data)) {
			t.Fatalf("accepted an auth string that is not the expected one: %q", auth)
		}
	})
}

func TestWithoutAuth(t *testing.T) {
	got := WithoutAuth("auth_key=k&name=e&Auth_Timestamp=1&auth_version=1.0&channels%5B%5D=a&body_md5=x&auth_signature=s&&data=d")
	if want := "name=e&channels%5B%5D=a&data=d"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
