package hub

import (
	"errors"
	"sync"
	"syscall"
)

// inputPoller waits for input on idle connections with one goroutine for all
// of them (epoll), so that an idle connection has no goroutine at all: a
// parked goroutine costs its stack and its g, some 2.5 KiB, more than the
// rest of an idle connection's memory in Herald. When a parked connection
// becomes readable, the poller hands it to a pooled goroutine (session.resume)
// that handles the input and parks the connection again.
//
// This epoll instance is separate from the Go runtime's poller, which keeps
// its own registration of the same sockets for the reads and writes.
type inputPoller struct {
	epfd int
	stop chan struct{} // closed when the handler shuts down
	pool *goPool       // runs the resumed connections

	mu     sync.Mutex
	parked map[int32]*session // by socket descriptor
	seq    int32              // registration tag, to ignore stale events
	done   bool               // run has ended: epfd is closed
}

// pollWaitMillis bounds one epoll_wait, so that the poller sees stop.
const pollWaitMillis = 1000

// newInputPoller starts a poller that runs until stop is closed and no
// connection is parked on it. It returns nil if epoll is not available; the
// connections then wait on a goroutine each.
func newInputPoller(stop chan struct{}, pool *goPool) *inputPoller {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	p := &inputPoller{epfd: epfd, stop: stop, pool: pool, parked: make(map[int32]*session)}
	go p.run()
	return p
}

func (p *inputPoller) run() {
	defer p.end()
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := syscall.EpollWait(p.epfd, events, pollWaitMillis)
		if err != nil && err != syscall.EINTR {
			return // not expected with a valid descriptor and buffer
		}
		for _, ev := range events[:max(n, 0)] {
			p.mu.Lock()
			sess := p.parked[ev.Fd]
			if sess != nil && sess.pollTag == ev.Pad {
				delete(p.parked, ev.Fd)
			} else {
				sess = nil // stale: the connection was closed or resumed meanwhile
			}
			p.mu.Unlock()
			if sess != nil {
				p.pool.Go(sess.resumeWoken)
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
func (p *inputPoller) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	syscall.Close(p.epfd)
	for fd, sess := range p.parked {
		delete(p.parked, fd)
		go sess.resume(false)
	}
}

// errPollerDone: the poller has stopped.
var errPollerDone = errors.New("hub: input poller stopped")

// park makes the poller resume sess once its socket is readable (at once if
// it is readable now). It fails with errSocketClosed if the socket was
// closed, or with another error if the poller cannot take it.
func (p *inputPoller) park(sess *session) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sess.sockClosed {
		return errSocketClosed
	}
	if p.done {
		return errPollerDone
	}
	op := syscall.EPOLL_CTL_MOD
	if !sess.pollAdded {
		op = syscall.EPOLL_CTL_ADD
		p.seq++
		sess.pollTag = p.seq
	}
	// One-shot: after an event the socket stays registered but disarmed
	// until parked again. RDHUP reports a client that went away.
	ev := syscall.EpollEvent{
		Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
		Fd:     sess.fd,
		Pad:    sess.pollTag,
	}
	if err := syscall.EpollCtl(p.epfd, op, int(sess.fd), &ev); err != nil {
		return err
	}
	sess.pollAdded = true
	p.parked[sess.fd] = sess
	return nil
}

// closed records that sess's socket is being closed, and reports whether the
// connection was parked, in which case the caller finishes it. Closing the
// descriptor removes it from the epoll set.
func (p *inputPoller) closed(sess *session) (wasParked bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sess.sockClosed = true
	if p.parked[sess.fd] == sess {
		delete(p.parked, sess.fd)
		return true
	}
	return false
}
