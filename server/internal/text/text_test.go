package text

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, tt := range []struct {
		name, s string
		n       int
		want    string
	}{
		{"OKShort", "abc", 5, "abc"},
		{"OKExactly", "abcde", 5, "abcde"},
		{"OKCut", "abcdef", 5, "abcde…"},
		{"OKEmpty", "", 0, ""},
		{"OKZero", "abc", 0, "…"},
		{"OKNegative", "abc", -1, "…"},
		{"OKCutBeforeATwoByteCharacter", "abcdé", 5, "abcd…"},
		{"OKCutAfterATwoByteCharacter", "abcdéf", 6, "abcdé…"},
		{"OKCutInsideAFourByteCharacter", "ab😀", 4, "ab…"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Truncate(tt.s, tt.n)
			if got != tt.want {
				t.Fatalf("Truncate(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("Truncate(%q, %d) = %q is not valid UTF-8", tt.s, tt.n, got)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"https://user:pass@example.test:8443/a/b?token=x&y=z#frag", "https://example.test:8443/a/b"},
		{"https://user@example.test/hook", "https://example.test/hook"},
		{"http://example.test/hook?", "http://example.test/hook"},
		{"http://example.test", "http://example.test"},
		{"http://user:pass@example.test/%zz?token=x", "(unparsable URL)"},
		{"https://user:p@ss@example.test/hook", "https://example.test/hook"},
		{"example.test/hook", "example.test/hook"},
		// A password holding an unencoded / ? or #, or with no host after
		// it: the parser would read a part of it as the host, port or path.
		{"redis://:12/secret@example.test:6379", "(unparsable URL)"},
		{"redis://u:123?secret@example.test", "(unparsable URL)"},
		{"redis://:12#secret@example.test", "(unparsable URL)"},
		{"redis://:123456", "(unparsable URL)"},
		{"redis://:h:1/secret", "(unparsable URL)"},
		{"secret@example.test", "(unparsable URL)"},
		{"redis://[::1]:6379/0", "redis://[::1]:6379/0"},
	} {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A URL parse error names the URL without its password or query, and keeps
// the parser's reason without what the parser quotes of the URL.
func TestURLError(t *testing.T) {
	for raw, reason := range map[string]string{
		"redis://:p%zz@example.test:6379":                      "invalid URL escape",
		"redis://user:secret@example.test/%zz?password=secret": "invalid URL escape",
		"redis://:secret/x@example.test":                       "invalid port",
		"redis://:secret":                                      "invalid port", // its @host forgotten, or a list cut at a comma
		"redis://u:p@exa mple.test":                            "invalid character",
	} {
		_, err := url.Parse(raw)
		got := URLError(raw, err).Error()
		if strings.Contains(got, "secret") || strings.Contains(got, "p%zz") || strings.Contains(got, "mple") || !strings.HasSuffix(got, ": "+reason) {
			t.Errorf("URLError(%q) = %q: shows a secret or lost the reason %q", raw, got, reason)
		}
	}
	other := errors.New("redis: invalid database number")
	if got := URLError("redis://:secret@x/y?password=secret", other); !errors.Is(got, other) || got.Error() != "redis://x/y: redis: invalid database number" {
		t.Errorf("another error came back as %v", got)
	}
	quoting := errors.New(`redis: invalid database number: "secret"`)
	if got := URLError("redis://x/secret", quoting).Error(); got != "redis://x/secret: redis: invalid database number" {
		t.Errorf("a quoting error came back as %q", got)
	}
}
