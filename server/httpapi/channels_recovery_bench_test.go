package httpapi

import (
	"testing"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
)

// BenchmarkSignedTriggerRecovery is what recovery costs a signed trigger
// on a node of its own (issue 46), its variants run together so that they
// share the machine's drift:
//
//   - history_off: an app without history;
//   - history_unpositioned: with history, the path before recovery (the
//     event published, then appended), in a store that gives no IDs;
//   - history_on: with history, the path of a Positioned store, which a
//     node's memory store is, whatever the app's recovery window: the
//     event appended, then queued, under the hub's lock (PublishKept);
//   - recovery_on: the same with the channel's subscriber recoverable, so
//     that it also gets pusher_internal:position before the event.
//
// cpu-ns/op is the process's, the fan-out worker's delivery included.
//
//	go test -run '^$' -bench SignedTriggerRecovery -count 5 ./server/httpapi/
func BenchmarkSignedTriggerRecovery(b *testing.B) {
	b.Run("history_off", func(b *testing.B) { benchSignedTrigger(b, triggerBench{}) })
	b.Run("history_unpositioned", func(b *testing.B) {
		benchSignedTrigger(b, triggerBench{history: true, unpositioned: true})
	})
	b.Run("history_on", func(b *testing.B) { benchSignedTrigger(b, triggerBench{history: true}) })
	b.Run("recovery_on", func(b *testing.B) {
		benchSignedTrigger(b, triggerBench{history: true, recoverable: true})
	})
}

// unpositioned hides that its store is Positioned: the hub publishes and
// the API appends after, as before recovery.
type unpositioned struct{ eventlog.Store }

// benchRecovery makes a subscription recoverable (no resume).
func benchRecovery(log eventlog.Positioned, policy eventlog.Policy) *hub.Recovery {
	return &hub.Recovery{
		Log: log, Policy: policy, Window: 2 * time.Minute,
		Token: func(p eventlog.ID, mark string) string { return "token@" + p.String() + "/" + mark },
	}
}
