package hub

import (
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/eventlog"
)

// publishesCluster is a joinsCluster that records what it is given to
// publish.
type publishesCluster struct {
	joinsCluster
	published [][]Message
}

func (f *publishesCluster) Publish(ms ...Message) error {
	f.mu.Lock()
	f.published = append(f.published, ms)
	f.mu.Unlock()
	return nil
}

// recordingKeeper is a cluster's history (a Keeper): it records each
// PublishKept call and answers kept and err.
type recordingKeeper struct {
	eventlog.Store // never called
	kept           bool
	err            error
	calls          []keptCall
}

type keptCall struct {
	p   eventlog.Policy
	now time.Time
	ms  []Message
}

func (k *recordingKeeper) PublishKept(p eventlog.Policy, now time.Time, ms []Message) (bool, error) {
	k.calls = append(k.calls, keptCall{p, now, ms})
	return k.kept, k.err
}

// In cluster mode a kept publish goes to the cluster's history when the
// store is one (a Keeper: the events are published and appended in one
// round trip), with the policy, the time and a copy of the messages, and
// its answer is the hub's; with any other store — a node's own log
// included — the messages are published through the cluster as they are,
// reported not kept (the caller appends them), and nothing is appended
// here.
func TestAClusteredKeptPublishGoesThroughTheKeeper(t *testing.T) {
	p := eventlog.Policy{Events: 10, TTL: time.Hour}
	now := time.UnixMilli(1_700_000_000_000)
	msgs := func() []Message {
		return []Message{{AppID: "app", Channel: "news", Event: "a", Data: "1"}, {AppID: "app", Channel: "news", Event: "b", Data: "2"}}
	}
	for _, answer := range []struct {
		kept bool
		err  error
	}{{true, nil}, {false, errors.New("cluster unavailable")}} {
		h := New(zap.NewNop())
		t.Cleanup(h.Close)
		fc := &publishesCluster{}
		h.SetCluster(fc)
		k := &recordingKeeper{kept: answer.kept, err: answer.err}
		ms := msgs()
		kept, err := h.PublishKept(k, p, now, ms...)
		if kept != answer.kept || !errors.Is(err, answer.err) {
			t.Fatalf("PublishKept answered %v, %v; the keeper %v, %v", kept, err, answer.kept, answer.err)
		}
		if len(k.calls) != 1 || k.calls[0].p != p || !k.calls[0].now.Equal(now) || !slices.Equal(k.calls[0].ms, msgs()) {
			t.Fatalf("the keeper got %+v, want one call of the policy, the time and the messages", k.calls)
		}
		ms[0].Data = "changed by the caller"
		if k.calls[0].ms[0].Data != "1" {
			t.Fatal("the keeper got the caller's slice, not a copy")
		}
		if len(fc.published) != 0 {
			t.Fatalf("published through the cluster besides the keeper: %v", fc.published)
		}
	}

	h := New(zap.NewNop())
	t.Cleanup(h.Close)
	fc := &publishesCluster{}
	h.SetCluster(fc)
	local := eventlog.NewMemory(eventlog.Limits{})
	kept, err := h.PublishKept(local, p, now, msgs()...)
	if kept || err != nil {
		t.Fatalf("with a node's own log in cluster mode: kept %v, err %v; want not kept, published", kept, err)
	}
	if len(fc.published) != 1 || !slices.Equal(fc.published[0], msgs()) {
		t.Fatalf("published through the cluster: %v, want the two messages once", fc.published)
	}
	page, err := local.Read(t.Context(), "app", "news", p, eventlog.Query{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 0 {
		t.Fatalf("the node's own log holds %d events; in cluster mode the caller appends", len(page.Events))
	}
}
