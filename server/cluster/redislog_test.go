package cluster

import (
	"net"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/hub"
)

// The Redis client's own lines go to the newest cluster's logger, named
// "redis", at debug level, never to stderr in the client's own format: the
// client has one logger for the whole process, which New points at zap
// before it builds a client. Here the client says so each time it asks a
// Sentinel that is not there for the primary.
func TestRedisClientLinesGoToTheClusterLogger(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close() // nothing listens there now: a Sentinel that is not there
	core, logs := observer.New(zapcore.DebugLevel)
	cl, err := New(zap.New(core), hub.New(zap.NewNop()), Options{URL: "redis-sentinel://" + gone + "/herald"})
	if err != nil {
		t.Fatal(err)
	}
	c := cl.(*member)
	t.Cleanup(func() { c.Close() })
	if err := c.rdb.Ping(t.Context()).Err(); err == nil {
		t.Fatal("a ping through a Sentinel that is not there was answered")
	}
	lines := logs.FilterLoggerName("redis").FilterMessageSnippet("sentinel: GetMasterAddrByName").All()
	if len(lines) == 0 {
		t.Fatalf("none of the client's lines reached the cluster's logger; it has %v", logs.All())
	}
	for _, e := range lines {
		if e.Level != zapcore.DebugLevel {
			t.Fatalf("the client's line %q is at %v, want debug", e.Message, e.Level)
		}
	}
}
