package hub

import "testing"

// CloseCodes lists each code once, so that each counts in one slot.
func TestCloseCodesDistinct(t *testing.T) {
	seen := map[int]bool{}
	for _, c := range CloseCodes {
		if seen[c] {
			t.Errorf("code %d listed twice", c)
		}
		seen[c] = true
	}
}
