package wait

import (
	"errors"
	"testing"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	Until(t, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
}

func TestNoErrorReturnsOnceCheckPasses(t *testing.T) {
	n := 0
	NoError(t, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("checked %d times, want 3", n)
	}
}
