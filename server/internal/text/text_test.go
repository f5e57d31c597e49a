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
	} {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A URL parse error names the URL without its password or query, and keeps
// the parser's reason.
func TestURLError(t *testing.T) {
	for _, raw := range []string{"redis://:p%zz@example.test:6379", "redis://user:secret@example.test/%zz?password=secret"} {
		_, err := url.Parse(raw)
		got := URLError(raw, err).Error()
		if strings.Contains(got, "secret") || strings.Contains(got, "p%zz") || !strings.Contains(got, "invalid URL escape") {
			t.Errorf("URLError(%q) = %q: shows a secret or lost the reason", raw, got)
		}
	}
	other := errors.New("redis: invalid database number")
	if got := URLError("redis://:secret@x/y?password=secret", other); !errors.Is(got, other) || got.Error() != "redis://x/y: redis: invalid database number" {
		t.Errorf("another error came back as %v", got)
	}
}
