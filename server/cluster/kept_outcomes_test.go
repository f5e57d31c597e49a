package cluster

import (
	"strings"
	"testing"
)

// A history append of publishScript carries the kept messages of several
// publish calls (a group); its outcome is every one of those calls': an
// error the script answers for a group, or an answer missing or of a form
// it never gives, is set on each request of that group and no other's, and
// a call sent again ("dup", answered the first time) sets nothing.
func TestKeptOutcomesSetAGroupsErrorOnEachOfItsRequests(t *testing.T) {
	group := func() keptGroup { return keptGroup{reqs: []*keepReq{{app: "a"}, {app: "a"}, {app: "a"}}} }
	for _, tc := range []struct {
		name   string
		answer any
		// want is, per group, the text every request's error holds ("" for none).
		want []string
	}{
		{"each group's own error", []any{"ERR first", "ERR second"}, []string{"ERR first", "ERR second"}},
		{"one answer for two appends", []any{"ERR only"}, []string{"ERR only", "answers for more appends"}},
		{"an answer of another form", []any{[]any{"1"}, []any{int64(1), "x"}}, []string{"unexpected answer", "unexpected answer"}},
		{"no answer at all", nil, []string{"answers for more appends", "answers for more appends"}},
		{"the same call again", "dup", []string{"", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			groups := []keptGroup{group(), group()}
			keptOutcomes(groups, tc.answer)
			for g, want := range tc.want {
				for r, req := range groups[g].reqs {
					switch {
					case want == "" && req.err != nil:
						t.Errorf("group %d, request %d: error %v, want none", g, r, req.err)
					case want != "" && (req.err == nil || !strings.Contains(req.err.Error(), want)):
						t.Errorf("group %d, request %d: error %v, want one with %q", g, r, req.err, want)
					}
				}
			}
		})
	}
}
