package cluster

import (
	"bytes"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// replyCutProxy forwards connections to a Redis; once armed, the first
// connection that sends a publish gets the first line of its next reply,
// then is cut: Redis ran the publish, the node lost its answer, as when it
// timed out.
type replyCutProxy struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	cuts   atomic.Int64
}

func newReplyCutProxy(t *testing.T, target string) *replyCutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyCutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
			go p.serve(c)
		}
	}()
	return p
}

func (p *replyCutProxy) serve(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	var cut atomic.Bool
	mark := []byte(publishScript.Hash())
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if p.armed.Load() && bytes.Contains(buf[:n], mark) {
					cut.Store(true)
				}
				if _, err := up.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				up.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 && cut.Load() {
			if i := bytes.Index(buf[:n], []byte("\r\n")); i >= 0 {
				c.Write(buf[:i+2])
				p.armed.Store(false) // once: the client's retry goes through
				p.cuts.Add(1)
				return
			}
		}
		if n > 0 {
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A kept trigger whose publish's answer was lost is not refused (issue 45:
// a trigger answered 503 "nothing was sent; retry" had been delivered):
// go-redis sends the call again, which Redis recognizes by its token and
// does not run twice; the event is delivered once, kept once, and the
// publish reports no error.
func TestPublishKeptIsNotRefusedWhenItsAnswerWasLost(t *testing.T) {
	rs := testredis.Start(t)
	px := newReplyCutProxy(t, rs.Addr())
	n := startNode(t, nil, "cut:", "n1", func(o *Options) { o.URL = "redis://" + px.ln.Addr().String() + "/0" })
	store, p, sub, publish := keptNews(t, n)
	if err := publish("1"); err != nil {
		t.Fatal(err)
	}
	px.armed.Store(true)
	if err := publish("2"); err != nil {
		t.Fatalf("a publish Redis answered, whose append lost its answer: %v, want none", err)
	}
	px.armed.Store(false)
	if px.cuts.Load() == 0 {
		t.Fatal("the proxy cut no connection: the case was not tried")
	}
	if err := publish("3"); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the three ticks delivered", func() bool { return sub.count("news", "tick") >= 3 })
	if got := sub.count("news", "tick"); got != 3 {
		t.Fatalf("%d ticks delivered, want 3", got)
	}
	page, err := store.Read(t.Context(), "app", "news", p, eventlog.Query{OldestFirst: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page.Events {
		got = append(got, e.Data)
	}
	if !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("history %v, want 1 2 3", got)
	}
}
