package push

import (
	"errors"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A result that cannot be written is written again, a second later.
func TestRecordingRetriedAfterAFailedWrite(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	calls := 0
	retrying(zap.New(core), "recording", func() error {
		calls++
		if calls == 1 {
			return errors.New("database is locked")
		}
		return nil
	})
	if calls != 2 || logs.FilterMessage("recording").Len() != 1 {
		t.Fatalf("%d writes, %d errors logged; want 2 and 1", calls, logs.Len())
	}
}
