package storage

import (
	"strings"
	"testing"
)

func TestRebindDollar(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"a = ? AND b = ?", "a = $1 AND b = $2"},
		{"a = ?1 AND b = ?2 AND c = ?1", "a = $1 AND b = $2 AND c = $1"},
		{"x = ?10, y = ?2", "x = $10, y = $2"},
		{"a = ?9 AND b = ?", "a = $9 AND b = $1"}, // every digit counts, the
		{"a = ?0 AND b = ?", "a = $0 AND b = $1"}, // first and the last too
		{"s = '?' AND t = ?", "s = '?' AND t = $1"},
		{`"we?rd" = ?`, `"we?rd" = $1`},
		{"s = 'it''s ?' AND t = ?", "s = 'it''s ?' AND t = $1"},
		{"unterminated '? ?", "unterminated '? ?"},
	} {
		if got := rebindDollar(tt.in); got != tt.want {
			t.Errorf("rebindDollar(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzRebindDollar: the rewrite only touches placeholders outside quotes,
// never panics, and leaves no placeholder behind.
func FuzzRebindDollar(f *testing.F) {
	for _, s := range []string{"a = ? AND b = ?", "x = ?12", "'?'", `"?" ?`, "''?''", "?"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got := rebindDollar(q)
		if !strings.Contains(q, "?") && got != q {
			t.Fatalf("%q without placeholders became %q", q, got)
		}
		if strings.Count(q, "'")%2 == 0 && strings.Count(q, `"`) == 0 && strings.Count(unquoted(got), "?") != 0 {
			t.Fatalf("%q left a placeholder: %q", q, got)
		}
	})
}

// unquoted is q without its '…' strings.
func unquoted(q string) string {
	var b strings.Builder
	in := false
	for _, c := range q {
		if c == '\'' {
			in = !in
			continue
		}
		if !in {
			b.WriteRune(c)
		}
	}
	return b.String()
}

func TestNameHidesThePassword(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://herald:s3cret@db:5432/herald?sslmode=disable&password=x": "postgres://herald@db:5432/herald",
		"./herald.db":            "./herald.db",
		"/data/a b?c#d%20.db":    "/data/a b?c#d%20.db",
		"postgresql://db/herald": "postgresql://db/herald",
	} {
		if got := Name(in); got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
}
