package ws

import "runtime/debug"

// stormConnections is how many connections must have opened since memory
// was last given back for the end of a storm to give it back again.
const stormConnections = 1000

// stormWatch notices the end of a connect storm — every client of a node
// reconnecting after a deploy or a network blip — and then gives the memory
// the storm used and no longer needs back to the system.
//
// Opening a connection leaves garbage behind (the request, its headers, the
// handshake's buffers): at 10,000 connections in a couple of seconds the heap
// grows to about twice what the parked connections keep, and the runtime
// returns the difference only slowly, in the background, while the idle
// server does not allocate enough to trigger a collection that would free it.
// Resident memory then stayed at 10–11 KiB per idle connection where 5–6 are
// in use. debug.FreeOSMemory collects and returns everything free at once;
// it costs one collection and a pass over the free pages, so it runs only
// once a second has passed with no new connection after at least
// stormConnections of them.
type stormWatch struct {
	lastOpened int64 // connections opened at the previous tick
	releasedAt int64 // connections opened when memory was last given back
	release    func()
}

func newStormWatch() *stormWatch { return &stormWatch{release: debug.FreeOSMemory} }

// tick takes the count of connections opened so far, once a second.
func (w *stormWatch) tick(opened int64) {
	quiet := opened == w.lastOpened
	w.lastOpened = opened
	if quiet && opened-w.releasedAt >= stormConnections {
		w.releasedAt = opened
		w.release()
	}
}
