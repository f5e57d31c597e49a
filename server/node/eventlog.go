package node

import (
	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/eventlog"
)

// channelHistory returns the store of the apps' channel histories: in Redis
// in cluster mode, so every node reads the same events, else in this
// node's memory (swept with the cache).
func (n *Node) channelHistory(cfg config.Config) eventlog.Store {
	limits := eventlog.Limits{MaxBytes: cfg.HistoryMaxBytes, MaxChannels: cfg.HistoryMaxChannels}
	if n.cluster != nil {
		return n.cluster.EventLog(limits) // Redis expires it itself
	}
	n.eventlog = eventlog.NewMemory(limits)
	return n.eventlog
}
