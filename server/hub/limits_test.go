package hub

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
)

// The cap on an app's subscriptions counts every connection of the app, and
// only new subscriptions: a refused one leaves no channel and no event behind,
// and every way a subscription ends gives its slot back.
func TestAppSubscriptionCap(t *testing.T) {
	h := New(zap.NewNop())
	rec := &recorder{}
	h.SetObserver(rec)
	capped := SubscribeOptions{MaxAppSubscriptions: 3}
	a, b := connect(t, h, "1"), connect(t, h, "1")
	other := connect(t, h, "2")
	for _, s := range []struct {
		c    *Conn
		name string
	}{{a, "one"}, {a, "two"}, {b, "one"}} {
		if err := h.Subscribe(s.c, s.name, capped); err != nil {
			t.Fatalf("subscribe %s: %v", s.name, err)
		}
	}
	seen := rec.count()
	if err := h.Subscribe(b, "three", capped); !errors.Is(err, ErrTooManySubscriptions) {
		t.Fatalf("fourth subscription: %v, want ErrTooManySubscriptions", err)
	}
	if st := h.Channel("1", "three"); st.Occupied || len(h.Channels("1", "three")) != 0 {
		t.Fatalf("refused subscription left a channel: %+v", st)
	}
	if got := rec.count(); got != seen {
		t.Fatalf("refused subscription reported %v", rec.kinds[seen:])
	}
	// Subscribing again to a channel the connection is on is no new one.
	if err := h.Subscribe(a, "one", capped); err != nil {
		t.Fatalf("repeated subscription: %v", err)
	}
	// Another app has its own count.
	if err := h.Subscribe(other, "three", capped); err != nil {
		t.Fatalf("other app: %v", err)
	}
	if got := h.Subscriptions("1"); got != 3 {
		t.Fatalf("Subscriptions = %d, want 3", got)
	}

	h.Unsubscribe(a, "two")
	if err := h.Subscribe(b, "three", capped); err != nil {
		t.Fatalf("after an unsubscribe: %v", err)
	}
	h.Remove(b) // "one" and "three"
	if got := h.Subscriptions("1"); got != 1 {
		t.Fatalf("after Remove: Subscriptions = %d, want 1", got)
	}

	// A presence subscription refused for another reason gives its slot back.
	c := connect(t, h, "1")
	full := SubscribeOptions{MaxAppSubscriptions: 3, MaxMembers: 1, Member: &Member{UserID: "u1"}}
	if err := h.Subscribe(c, "presence-p", full); err != nil {
		t.Fatal(err)
	}
	full.Member = &Member{UserID: "u2"}
	if err := h.Subscribe(a, "presence-p", full); !errors.Is(err, ErrPresenceFull) {
		t.Fatalf("second member: %v, want ErrPresenceFull", err)
	}
	if err := h.Subscribe(a, "presence-q", SubscribeOptions{MaxAppSubscriptions: 3}); err == nil {
		t.Fatal("presence subscription without a member accepted")
	}
	if got := h.Subscriptions("1"); got != 2 {
		t.Fatalf("after refused presence subscriptions: Subscriptions = %d, want 2", got)
	}
	if err := h.Subscribe(a, "four", capped); err != nil {
		t.Fatalf("third slot: %v", err)
	}
	if err := h.Subscribe(a, "five", capped); !errors.Is(err, ErrTooManySubscriptions) {
		t.Fatalf("over the cap again: %v", err)
	}
	if err := h.Subscribe(a, "five", SubscribeOptions{}); err != nil {
		t.Fatalf("no cap: %v", err)
	}
	if st := h.AppStats(); st[0].Subscriptions != h.Subscriptions("1") {
		t.Fatalf("AppStats counts %d subscriptions, the cap's count is %d", st[0].Subscriptions, h.Subscriptions("1"))
	}
}

// Under concurrent subscribes from many connections exactly the cap's number
// get through, and the count ends where the registry is.
func TestAppSubscriptionCapConcurrent(t *testing.T) {
	h := New(zap.NewNop())
	const conns, perConn, limit = 16, 20, 100
	var ok atomic.Int64
	var wg sync.WaitGroup
	cs := make([]*Conn, conns)
	for i := range cs {
		cs[i] = connect(t, h, "1")
	}
	for i, c := range cs {
		wg.Go(func() {
			for j := range perConn {
				err := h.Subscribe(c, fmt.Sprintf("ch-%d", (i+j)%25), SubscribeOptions{MaxAppSubscriptions: limit})
				switch {
				case err == nil:
					ok.Add(1)
				case !errors.Is(err, ErrTooManySubscriptions):
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// Repeated subscriptions answer nil without taking a slot, so count the
	// registry instead of the answers.
	st := h.AppStats()[0]
	if st.Subscriptions != limit || h.Subscriptions("1") != limit {
		t.Fatalf("registry holds %d subscriptions, the count is %d; want %d (%d subscribes answered nil)",
			st.Subscriptions, h.Subscriptions("1"), limit, ok.Load())
	}
	for _, c := range cs {
		h.Remove(c)
	}
	if got := h.Subscriptions("1"); got != 0 {
		t.Fatalf("after removing every connection: %d subscriptions", got)
	}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.kinds)
}

// panicky is an observer that panics on the events of one channel.
type panicky struct{ channel string }

func (p panicky) Observe(ev Event) {
	if ev.Channel == p.channel {
		panic("observer broke on " + ev.Channel)
	}
}

// A panic of the observer, which runs under registry locks, is recovered
// where it is called: counted, and the channel stays usable for everyone.
func TestObserverPanicLeavesRegistryUsable(t *testing.T) {
	h := New(zap.NewNop())
	h.SetObserver(panicky{channel: "boom"})
	a, b := connect(t, h, "1"), connect(t, h, "1")
	subscribe(t, h, a, "boom", nil) // channel_occupied panics
	if got := h.ObserverPanics(); got != 1 {
		t.Fatalf("ObserverPanics = %d, want 1", got)
	}
	subscribe(t, h, b, "boom", nil) // the channel's lock was released
	h.publishNow(Message{AppID: "1", Channel: "boom", Event: "e", Data: "x"})
	takeFrames(t, a)
	if got := events(takeFrames(t, b)); got != "pusher_internal:subscription_succeeded,e" {
		t.Fatalf("b got %s", got)
	}
	h.Remove(a)
	h.Remove(b) // channel_vacated panics too
	if st := h.Channel("1", "boom"); st.Occupied {
		t.Fatalf("channel still occupied: %+v", st)
	}
	if got := h.ObserverPanics(); got != 2 {
		t.Fatalf("ObserverPanics = %d, want 2", got)
	}
}

// A connection of zero ConnectOptions queues up to 1 MiB
// (DefaultMaxQueueBytes), and no connection quota holds.
func TestConnectOptionsDefaults(t *testing.T) {
	if o := (ConnectOptions{}).WithDefaults(); o.MaxQueueBytes != 1<<20 || o.MaxConns != 0 {
		t.Fatalf("defaults %+v, want a 1 MiB queue and no quota", o)
	}
	c, err := New(zap.NewNop()).Connect("1", ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Send(make([]byte, 1<<20)) || c.Send([]byte("x")) {
		t.Fatal("a connection of zero options did not queue exactly 1 MiB")
	}
}

// A connection's queue takes frames up to its byte bound exactly; one byte
// more closes it with 4100.
func TestQueueBoundInclusive(t *testing.T) {
	h := New(zap.NewNop())
	c, err := h.Connect("1", ConnectOptions{MaxQueueBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	if c.CloseCode() != 0 {
		t.Fatalf("an open connection has close code %d", c.CloseCode())
	}
	if !c.Send([]byte("123456")) || !c.Send([]byte("7890")) {
		t.Fatal("frames of 10 bytes in all refused by a 10-byte queue")
	}
	if c.Send([]byte("x")) || c.CloseCode() != 4100 {
		t.Fatalf("the 11th byte: queue kept it or closed with %d, want 4100", c.CloseCode())
	}
}

// A position and its event go into the queue together (send) and count
// together against its bound: a pair one byte over it is refused and
// closes the connection with 4100, and a pair that fills it leaves room for
// nothing more.
func TestQueueBoundCountsAPositionWithItsEvent(t *testing.T) {
	h := New(zap.NewNop())
	over, err := h.Connect("1", ConnectOptions{MaxQueueBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	if over.send([]byte("12"), []byte("345678901")) || over.CloseCode() != 4100 {
		t.Fatalf("a pair of 11 bytes: queued, or closed with %d; want refused with 4100", over.CloseCode())
	}
	full, err := h.Connect("1", ConnectOptions{MaxQueueBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !full.send([]byte("123"), []byte("4567890")) {
		t.Fatal("a pair of 10 bytes refused by a 10-byte queue")
	}
	if full.Send([]byte("x")) || full.CloseCode() != 4100 {
		t.Fatalf("the 11th byte after the pair: queued, or closed with %d; want refused with 4100", full.CloseCode())
	}
}
