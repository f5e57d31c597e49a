package recovery

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestRecoverLogsAndCounts(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	log := zap.New(core)
	var c Counter

	func() {
		defer c.Recover(log, "message", zap.String("socket", "1.2"))
		panic("boom")
	}()
	func() {
		defer c.Recover(log, "message")
	}()

	if got := c.Count(); got != 1 {
		t.Fatalf("Count = %d, want 1 (one panic, one clean return)", got)
	}
	entries := logs.All()
	if len(entries) != 1 {
		t.Fatalf("logged %d entries, want 1", len(entries))
	}
	fields := entries[0].ContextMap()
	if fields["panic"] != "boom" || fields["socket"] != "1.2" {
		t.Fatalf("fields = %v, want panic=boom and socket=1.2", fields)
	}
	if stack, _ := fields["stack"].(string); !strings.Contains(stack, "TestRecoverLogsAndCounts") {
		t.Fatalf("stack does not name the panicking function: %q", stack)
	}
	if !strings.Contains(entries[0].Message, "message") {
		t.Fatalf("message %q does not say what was abandoned", entries[0].Message)
	}
}

func TestDoReportsPanic(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	var c Counter
	ran := false
	if c.Do(zap.New(core), "job", func() { ran = true }) {
		t.Fatal("Do reported a panic for a function that returned")
	}
	if !ran {
		t.Fatal("Do did not run the function")
	}
	if !c.Do(zap.New(core), "job", func() { panic(errors.New("job failed")) }) {
		t.Fatal("Do did not report the panic")
	}
	if c.Count() != 1 || logs.Len() != 1 {
		t.Fatalf("Count = %d, logged %d, want 1 and 1", c.Count(), logs.Len())
	}
}

// Do sits on hot paths (each push delivery): without a panic it allocates
// nothing, fields included.
func TestDoWithoutPanicAllocatesNothing(t *testing.T) {
	var c Counter
	log := zap.NewNop()
	publish, device := "pub-1", "dev-1"
	ran := 0
	f := func() { ran++ }
	allocs := testing.AllocsPerRun(100, func() {
		c.Do(log, "delivery", f, zap.String("publish", publish), zap.String("device", device))
	})
	if allocs != 0 || ran == 0 {
		t.Fatalf("Do allocated %v times per call (ran %d), want 0", allocs, ran)
	}
}
