package upgrade

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// deadlineConn records the read deadlines set on a connection.
type deadlineConn struct {
	net.Conn
	mu        sync.Mutex
	deadlines []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadlines = append(c.deadlines, t)
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

func (c *deadlineConn) recorded() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.deadlines...)
}

// deadlineListener hands out its connections as deadlineConns.
type deadlineListener struct {
	net.Listener
	conns chan *deadlineConn
}

func (l *deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	dc := &deadlineConn{Conn: c}
	l.conns <- dc
	return dc, nil
}

// A request handed over to net/http has its read deadlines from accept,
// not from when net/http started on it: the head's HeaderTimeout and the
// body's ReadTimeout after accept, however late the hand-over. The clock
// says the connection was accepted 9 s before the request reached net/http
// (a head dribbled in just inside HeaderTimeout), where net/http's own
// deadlines would run 10 s and 30 s from then: a stalled body was cut 39 s
// after accept.
func TestHandedOverRequestHasItsDeadlinesFromAccept(t *testing.T) {
	const headerTimeout, readTimeout = 10 * time.Second, 30 * time.Second
	accepted := time.Now().Add(-9 * time.Second)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &deadlineListener{Listener: inner, conns: make(chan *deadlineConn, 1)}
	entered := make(chan struct{}, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		_, _ = io.Copy(io.Discard, r.Body) // the client closes before the end
	})
	server := NewServer(handler, Options{HeaderTimeout: headerTimeout, ReadTimeout: readTimeout, Now: func() time.Time { return accepted }})
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: headerTimeout, ReadTimeout: readTimeout}
	go func() { _ = hs.Serve(server.Listen(ln)) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	})

	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /apps/1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	dc := <-ln.conns
	<-entered // net/http has set the body's deadline before its handler runs
	got := dc.recorded()
	// readHead's, then net/http's for the head and for the whole request.
	if len(got) != 3 {
		t.Fatalf("read deadlines set before the handler ran: %v, want three", got)
	}
	if want := accepted.Add(headerTimeout); !got[0].Equal(want) || !got[1].Equal(want) {
		t.Errorf("the head's deadlines are %v and %v, want both %v (HeaderTimeout after accept)", got[0], got[1], want)
	}
	if want := accepted.Add(readTimeout); !got[2].Equal(want) {
		t.Errorf("the body's deadline is %v after accept, want %v (ReadTimeout)", got[2].Sub(accepted), readTimeout)
	}
}
