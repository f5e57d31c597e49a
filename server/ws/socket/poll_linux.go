package socket

import (
	"errors"
	"sync"
	"syscall"
)

// Poller waits for input on idle connections with one goroutine for all of
// them (epoll), so that an idle connection has no goroutine at all: a parked
// goroutine costs its stack and its g, some 2.5 KiB, more than the rest of an
// idle connection's memory in Herald. When a parked connection becomes
// readable, the poller hands it to a pooled goroutine (Parker.Resume) that
// handles the input and parks the connection again.
//
// This epoll instance is separate from the Go runtime's poller, which keeps
// its own registration of the same sockets for the reads and writes.
type Poller struct {
	epfd int
	stop <-chan struct{} // closed when the transport shuts down
	pool *Pool           // runs the resumed connections

	mu     sync.Mutex
	parked map[int32]*Handle // by socket descriptor
	seq    int32             // registration tag, to ignore stale events
	done   bool              // run has ended: epfd is closed
}

// pollWaitMillis bounds one epoll_wait, so that the poller sees stop.
const pollWaitMillis = 1000

// NewPoller starts a poller that runs until stop is closed and no connection
// is parked on it; it resumes connections on pool. It returns nil if epoll is
// not available; the connections then wait on a goroutine each.
func NewPoller(stop <-chan struct{}, pool *Pool) *Poller {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	p := &Poller{epfd: epfd, stop: stop, pool: pool, parked: make(map[int32]*Handle)}
	go p.run()
	return p
}

func (p *Poller) run() {
	defer p.end()
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := syscall.EpollWait(p.epfd, events, pollWaitMillis)
		if err != nil && err != syscall.EINTR {
			return // not expected with a valid descriptor and buffer
		}
		for _, ev := range events[:max(n, 0)] {
			p.mu.Lock()
			h := p.parked[ev.Fd]
			if h != nil && h.tag == ev.Pad {
				delete(p.parked, ev.Fd)
			} else {
				h = nil // stale: the connection was closed or resumed meanwhile
			}
			p.mu.Unlock()
			if h != nil {
				p.pool.Go(h.resumeReadable)
			}
		}
		select {
		case <-p.stop:
			p.mu.Lock()
			idle := len(p.parked) == 0
			p.mu.Unlock()
			if idle {
				return
			}
		default:
		}
	}
}

// end stops the poller. Connections still parked are resumed, to find they
// cannot park any more and wait on their own goroutine.
func (p *Poller) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	syscall.Close(p.epfd)
	for fd, h := range p.parked {
		delete(p.parked, fd)
		go h.owner.Resume(false)
	}
}

// errPollerDone: the poller has stopped.
var errPollerDone = errors.New("socket: input poller stopped")

// Park makes the poller resume h's connection once its socket is readable
// (at once if it is readable now). It fails with ErrClosed if the socket was
// closed, or with another error if the poller cannot take it.
func (p *Poller) Park(h *Handle) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	if p.done {
		return errPollerDone
	}
	op := syscall.EPOLL_CTL_MOD
	if !h.added {
		op = syscall.EPOLL_CTL_ADD
		p.seq++
		h.tag = p.seq
	}
	// One-shot: after an event the socket stays registered but disarmed
	// until parked again. RDHUP reports a client that went away.
	ev := syscall.EpollEvent{
		Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
		Fd:     h.fd,
		Pad:    h.tag,
	}
	if err := syscall.EpollCtl(p.epfd, op, int(h.fd), &ev); err != nil {
		return err
	}
	h.added = true
	p.parked[h.fd] = h
	return nil
}

// Closed records that h's socket is being closed, and reports whether the
// connection was parked, in which case the caller finishes it. Closing the
// descriptor removes it from the epoll set.
func (p *Poller) Closed(h *Handle) (wasParked bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h.closed = true
	if p.parked[h.fd] == h {
		delete(p.parked, h.fd)
		return true
	}
	return false
}
