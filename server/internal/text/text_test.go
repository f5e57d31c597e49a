package text

import (
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
