// Package recovery keeps a panic in the handling of one client's input, one
// job or one delivery from taking the process down: it is logged with its
// stack and counted, and only the work that panicked is abandoned.
package recovery

import (
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"go.uber.org/zap"
)

// Counter counts the panics recovered in one part of a node; its zero value is
// ready. The metrics export it as herald_panics_total{part=…}.
type Counter struct{ n atomic.Int64 }

// Count is the number of panics recovered so far.
func (c *Counter) Count() int64 { return c.n.Load() }

// Recover must be deferred directly (`defer c.Recover(log, "…")`): it stops a
// panic of the deferring function, logs it at error level with its stack and
// what was being done, and counts it. It reports nothing when there was no
// panic. After it the deferring function returns its named results as they
// stand, so callers that must clean up (close a connection, give a job back)
// do that in an earlier defer or check Recovered with a named result.
func (c *Counter) Recover(log *zap.Logger, what string, fields ...zap.Field) {
	if v := recover(); v != nil {
		c.record(log, what, v, fields)
	}
}

// Do runs f and recovers a panic of it like Recover; it reports whether f
// panicked, for callers that abandon the work then (close the connection,
// drop the job).
func (c *Counter) Do(log *zap.Logger, what string, f func(), fields ...zap.Field) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			c.record(log, what, v, fields)
		}
	}()
	f()
	return false
}

func (c *Counter) record(log *zap.Logger, what string, v any, fields []zap.Field) {
	c.n.Add(1)
	// A copy: appending to fields would make the callers' variadic slice
	// escape, a heap allocation on every Do of a hot path (one per push
	// delivery) for the sake of a rare panic.
	all := make([]zap.Field, 0, len(fields)+2)
	all = append(all, fields...)
	all = append(all, zap.String("panic", fmt.Sprint(v)), zap.ByteString("stack", debug.Stack()))
	log.Error("recovered from a panic; only this "+what+" is abandoned", all...)
}
