package cluster

import (
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/cluster/redisconn"
	"github.com/heraldrt/herald/server/hub"
)

// redisURLForms embed a password in every form HERALD_REDIS_URL takes,
// with a host after it: refuse, which refuses connections, and answer,
// which answers at once (New asks Sentinels and Redis Cluster nodes before
// it returns, and a refused dial is tried again for a while).
func redisURLForms(refuse, answer string) []func(pw string) string {
	return []func(pw string) string{
		func(pw string) string { return "redis://:" + pw + "@" + refuse },
		func(pw string) string { return "redis://user:" + pw + "@" + refuse + "/0" },
		func(pw string) string { return "rediss://:" + pw + "@" + refuse },
		func(pw string) string { return "redis://:" + pw + "@" + refuse + ",redis://:" + pw + "@" + refuse },
		func(pw string) string { return "redis://" + refuse + ", rediss://:" + pw + "@" + refuse + "/1" },
		func(pw string) string { return "redis-cluster://:" + pw + "@" + answer + "," + answer },
		func(pw string) string { return "redis-sentinel://:" + pw + "@" + answer + "," + answer + "/mymaster" },
	}
}

// hostlessForms are the forms without a host after the password: all there
// is after the scheme is the password, which reads as a host when it holds
// an @ (redis://:p@ss is the password p at the host ss, whatever the
// operator meant).
var hostlessForms = []func(pw string) string{
	func(pw string) string { return "redis://:" + pw },
	func(pw string) string { return "rediss://:" + pw },
	func(pw string) string { return "redis://:" + pw + ",redis://127.0.0.1:2" },
	func(pw string) string { return "redis-cluster://:" + pw },
	func(pw string) string { return "redis-sentinel://:" + pw + "/mymaster" },
	func(pw string) string { return "redis-sentinel://:" + pw },
}

// redisURLMessages is everything a node says about HERALD_REDIS_URL when
// it starts: New's error, or the URLs Start logs.
func redisURLMessages(t *testing.T, url string) string {
	c, err := New(zap.NewNop(), hub.New(zap.NewNop()), Options{URL: url})
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	return strings.Join(redisconn.RedactAll(url), " ")
}

// rotate changes each letter and digit of s into the next (z into a, 9
// into 0), except the two after a %, which stay an escape or not: a
// password of the same shape, which a parser reads the same way.
func rotate(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '%':
			i += 2
		case c >= 'a' && c <= 'z':
			b[i] = 'a' + (c-'a'+1)%26
		case c >= 'A' && c <= 'Z':
			b[i] = 'A' + (c-'A'+1)%26
		case c >= '0' && c <= '9':
			b[i] = '0' + (c-'0'+1)%10
		}
	}
	return string(b)
}

// marked is s with each letter and digit replaced by a character that
// nothing Herald says holds: "ж".
func marked(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			r = 'ж'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// No message of a node about its Redis URL holds any part of the password,
// whatever it holds (/ ? # , @ : % unencoded, or nothing but a port) and in
// every form of the URL. Two checks, since the words Herald prints may hold
// any three letters a password holds ("red", "URL"):
//   - the messages for a password and for the password rotated (each
//     letter and digit changed, the shape kept) are the same: nothing of
//     the letters and digits reaches them;
//   - the messages for the password with its letters and digits replaced by
//     a marker never hold the marker, however the URL is then read.
//
// Passwords holding "://" are left out: a list of URLs with one in a
// password reads, to anyone, as one more URL.
func FuzzRedisURLMessagesHoldNoPassword(f *testing.F) {
	for _, seed := range []string{
		"s3cret", "pa/ss", "pa?ss", "pa#ss", "pa,ss", "a,b,c", "12/345", "123?abc", "123#abc", "6379", "123456",
		"p@ss", ":x@y", "p@ss/w?r#d,x", "%zz", "%2Fsecret", "sec ret", "[::1]", "abc?client_name=def", "abc/0?db=1",
		"h:1/master", "12,34", "user:pw", "ab?dial_timeout=1s&cd",
	} {
		f.Add(seed)
	}
	// A Redis Cluster node that is not in a cluster, and to a Sentinel's
	// question an unknown command: the start stops at once, the same way
	// for every password.
	forms := redisURLForms("127.0.0.1:1", fakeClusterNode(f, "cluster_state:fail"))
	f.Fuzz(func(t *testing.T, pw string) {
		if strings.Contains(pw, "://") || !utf8.ValidString(pw) || len(pw) > 64 {
			t.Skip()
		}
		forms := forms
		if !strings.Contains(pw, "@") {
			forms = append(forms[:len(forms):len(forms)], hostlessForms...)
		}
		for _, form := range forms {
			url := form(pw)
			got := redisURLMessages(t, url)
			if rotated := redisURLMessages(t, form(rotate(pw))); got != rotated {
				t.Fatalf("the messages depend on the password's letters and digits:\n%s\n  %s\n%s\n  %s", url, got, form(rotate(pw)), rotated)
			}
			if m := redisURLMessages(t, form(marked(pw))); strings.Contains(m, "ж") {
				t.Fatalf("%s: a part of the password is shown: %s", form(marked(pw)), m)
			}
		}
	})
}
