package push

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/storage"
)

// A sender that panics on one device fails only that delivery: the other
// devices of the publish are delivered, the publish completes with one
// failure, the panic is logged and counted, and the (single) worker goes on
// to send the next publish.
func TestSenderPanicFailsOnlyItsDelivery(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	send := func(_ context.Context, del storage.Delivery, _ *Prepared) Result {
		if del.DeviceID == "apns-boom" {
			panic("sender bug")
		}
		return sent()
	}
	db, d := dispatchTo(t, Options{Workers: 1}, zap.New(core), send, "apns-1", "apns-boom", "apns-2")
	publishTo(t, db, d, "pub-1", "news")
	p := waitPublishDone(t, db, "pub-1")
	if p.Targeted != 3 || p.Sent != 2 || p.Failed != 1 {
		t.Fatalf("publish targeted %d, sent %d, failed %d; want 3, 2, 1", p.Targeted, p.Sent, p.Failed)
	}
	if got := d.PushCounters().Panics; got != 1 {
		t.Fatalf("Panics = %d, want 1", got)
	}
	if got := deliveryCount(d, storage.PlatformAPNs, OutcomeFailed); got != 1 {
		t.Fatalf("failed deliveries counted %d, want 1", got)
	}
	if _, err := db.GetDevice(t.Context(), testInstance, storage.PlatformAPNs, "apns-boom"); err != nil {
		t.Fatalf("the device of the panicking send was deleted: %v", err)
	}
	entries := logs.FilterField(zap.String("device", "apns-boom")).All()
	if len(entries) != 1 || entries[0].ContextMap()["panic"] != "sender bug" {
		t.Fatalf("logged %v, want one entry with the panic", entries)
	}
	// The worker survived: the next publish is delivered.
	publishTo(t, db, d, "pub-2", "apns-1")
	if p := waitPublishDone(t, db, "pub-2"); p.Sent != 1 {
		t.Fatalf("the next publish sent %d, want 1", p.Sent)
	}
}

// A panic while the recorder counts one result drops only that result: the
// results around it are recorded, the panic is logged and counted, and the
// recorder goes on.
func TestRecorderPanicDropsOnlyThatResult(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	var d *Dispatcher
	injected := make(chan struct{})
	send := func(_ context.Context, del storage.Delivery, _ *Prepared) Result {
		if del.DeviceID == "apns-1" {
			// A result no delivery could produce (an unknown platform)
			// makes the recorder panic, just before this one's result.
			d.results <- outcome{job: job{d: storage.Delivery{PublishID: "pub-x", DeviceID: "bogus", Platform: "bogus"}}}
			close(injected)
		}
		return sent()
	}
	var db *storage.DB
	db, d = dispatchTo(t, Options{}, zap.New(core), send, "apns-1", "apns-2", "apns-3")
	publishTo(t, db, d, "pub-1", "news")
	p := waitPublishDone(t, db, "pub-1")
	<-injected
	if p.Targeted != 3 || p.Sent != 3 {
		t.Fatalf("publish targeted %d, sent %d; want 3 and 3", p.Targeted, p.Sent)
	}
	if got := d.PushCounters().Panics; got != 1 {
		t.Fatalf("Panics = %d, want 1", got)
	}
	entries := logs.FilterField(zap.String("device", "bogus")).All()
	if len(entries) != 1 || !strings.Contains(entries[0].Message, "delivery result") {
		t.Fatalf("logged %v, want one entry naming the dropped result", entries)
	}
	publishTo(t, db, d, "pub-2", "apns-2")
	waitPublishDone(t, db, "pub-2")
}

// A panicking OnOutcome hook costs nothing but its own report: every
// result is still counted and recorded, the publish completes, and the
// panic is logged and counted.
func TestOutcomeHookPanicKeepsTheBookkeeping(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	hook := func(string, storage.DeliveryOutcome) { panic("hook bug") }
	db, d := dispatchTo(t, Options{OnOutcome: hook}, zap.New(core), func(context.Context, storage.Delivery, *Prepared) Result { return sent() }, "apns-1", "apns-2")
	publishTo(t, db, d, "pub-1", "news")
	if p := waitPublishDone(t, db, "pub-1"); p.Targeted != 2 || p.Sent != 2 {
		t.Fatalf("publish targeted %d, sent %d; want 2 and 2", p.Targeted, p.Sent)
	}
	if got := deliveryCount(d, storage.PlatformAPNs, OutcomeDelivered); got != 2 {
		t.Fatalf("delivered counted %d, want 2", got)
	}
	if got := d.PushCounters().Panics; got != 2 {
		t.Fatalf("Panics = %d, want 2", got)
	}
	if n := d.InFlight(); n != 0 {
		t.Fatalf("%d deliveries still in flight", n)
	}
	if entries := logs.FilterMessageSnippet("delivery outcome report").All(); len(entries) != 2 {
		t.Fatalf("logged %d hook panics, want 2", len(entries))
	}
}
