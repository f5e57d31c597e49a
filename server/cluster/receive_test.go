package cluster

import (
	"sync/atomic"
	"testing"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// armedWriter drains its connection at once when woken, until armed: then
// its next Wake panics, as a transport with a bug would.
type armedWriter struct {
	c     *hub.Conn
	armed atomic.Bool
}

func (w *armedWriter) Wake() {
	defer w.c.WriterDone()
	if w.armed.Swap(false) {
		panic("transport bug")
	}
	for {
		_, reason, idle := w.c.Drain(nil)
		if idle || reason != nil {
			return
		}
	}
}

func (w *armedWriter) Overflow() {}

// A panic while a node handles one message from the cluster costs that
// message only: it is recovered and counted (herald_panics_total's
// part="cluster" is Stats().Panics), and the node goes on delivering the
// messages after it.
func TestPanicHandlingAClusterMessageIsCountedAndDeliveryGoesOn(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	w := &armedWriter{}
	conn, err := ns[1].hub.Connect("app", hub.ConnectOptions{Writer: w})
	if err != nil {
		t.Fatal(err)
	}
	w.c = conn
	if err := ns[1].hub.SignIn(conn, "u", nil); err != nil {
		t.Fatal(err)
	}
	reader := ns[1].connect("app")
	reader.subscribe("news", nil)
	reader.wait("news", "pusher_internal:subscription_succeeded")

	// Node 1 asks for u's connections to be closed: on node 2 closing the
	// one connection wakes its writer, which panics.
	w.armed.Store(true)
	if err := ns[0].hub.Terminate("app", "u"); err != nil {
		t.Fatal(err)
	}
	if err := ns[0].hub.Publish(hub.Message{AppID: "app", Channel: "news", Event: "after", Data: "{}"}); err != nil {
		t.Fatal(err)
	}
	reader.wait("news", "after")
	wait.Until(t, "the panic to be counted", func() bool { return ns[1].c.Stats().Panics == 1 })
	if w.armed.Load() {
		t.Fatal("the terminate message never reached the connection's writer")
	}
	if got := conn.CloseCode(); got != hub.CloseTerminated.Code {
		t.Fatalf("close code %d, want %d", got, hub.CloseTerminated.Code)
	}
	if n := ns[0].c.Stats().Panics; n != 0 {
		t.Fatalf("node 1 counted %d panics", n)
	}
}
