// Package socket holds the low-level mechanics beneath the WebSocket
// transport: the hijacked connection as the WebSocket library sees it (Conn,
// which keeps no buffer while idle and corks a writer's burst into one
// write), the epoll poller that parks idle connections without a goroutine
// each (Poller), the wait for input that consumes none (WaitReadable), and
// the pool of reused goroutines that runs write loops and resumed input
// (Pool). It knows the WebSocket frame layout (RFC 6455 §5.2) but not the
// library, the Pusher protocol or the hub: it imports the standard library
// only.
package socket

import (
	"bufio"
	"net"
	"sync"
	"syscall"
)

// Socket buffering. An idle connection should cost as little memory as
// possible, so the buffers that the WebSocket library keeps for a
// connection's whole life are tiny, and Conn borrows a chunk from a pool
// only while bytes pass through it.
const (
	// libBufferSize is the size of the bufio reader and writer handed to the
	// WebSocket library (bufio's smallest reader). They only ever hold a
	// frame header and a few bytes; Conn does the real buffering.
	libBufferSize = 16
	// ChunkSize is the size of the pooled buffers: one read takes up to this
	// much from the socket, and frame pieces up to this size are gathered
	// before they are written.
	ChunkSize = 4096
)

var chunkPool = sync.Pool{New: func() any {
	b := make([]byte, 0, ChunkSize)
	return &b
}}

func getChunk() *[]byte { return chunkPool.Get().(*[]byte) }

// putChunk returns b to the pool unless it is not one of the pool's buffers.
func putChunk(b *[]byte) {
	if cap(*b) != ChunkSize {
		return
	}
	*b = (*b)[:0]
	chunkPool.Put(b)
}

// Conn is the hijacked connection as the WebSocket library sees it. It
// keeps no buffer while the connection is idle.
//
// Reads: a small read (the library's bufio filling itself) takes a chunk from
// the pool, reads what the socket has into it and serves from it; the chunk
// goes back to the pool as soon as it is empty. Reads are serialised by the
// library (its read lock) and by the caller's look at Buffered.
//
// Writes: the library writes a frame as a header into its tiny bufio writer
// and then the payload, so one frame reaches Write in two or more pieces.
// Writing each piece straight to the socket would cost a system call and a
// TCP segment per piece, so Write follows the frame boundaries (RFC 6455
// §5.2) and holds the pieces of an unfinished frame until the frame is
// complete, then writes them in one call. When Write returns at a frame
// boundary nothing is held, so every frame the library has finished writing
// is on the socket — except while the connection's writer has corked it.
//
// Corking: a writer with several frames queued corks the socket, writes them
// and uncorks it. Meanwhile complete frames are held too, up to a chunk, and
// leave together, in one system call instead of one each. Under a burst of
// events a subscriber's frames queue up, and the write call, which on
// loopback also runs the receiver's TCP processing, is most of the cost of a
// delivery.
type Conn struct {
	net.Conn

	// Read side: r[rpos:] holds bytes read from the socket but not yet
	// consumed; r is nil when there are none.
	r    *[]byte
	rpos int

	// Write side, guarded by wmu: the library serialises its own writes,
	// but Uncork writes from outside its lock. held holds written bytes not
	// yet on the socket (nil when none): the pieces of an unfinished frame
	// and, while corked, complete frames. frame tracks where the byte stream
	// is within a frame.
	wmu    sync.Mutex
	held   *[]byte
	frame  frameTracker
	corked bool

	// onClose, if set, runs when the library closes the connection.
	onClose func()
}

// NewConn wraps c; pending holds bytes the client sent after the handshake
// that net/http had already read.
func NewConn(c net.Conn, pending []byte) *Conn {
	sc := &Conn{Conn: c}
	if len(pending) > 0 {
		b := getChunk()
		*b = append(*b, pending...) // may outgrow the chunk; putChunk drops it then
		sc.r = b
	}
	return sc
}

// LibBuffers returns the reader and writer to hand to the WebSocket library
// over sc: tiny ones, as sc does the real buffering.
func (sc *Conn) LibBuffers() *bufio.ReadWriter {
	return bufio.NewReadWriter(bufio.NewReaderSize(sc, libBufferSize), bufio.NewWriterSize(sc, libBufferSize))
}

// OnClose sets f to run when the connection is closed (by the library),
// before its descriptor is. Set it before the connection is in use.
func (sc *Conn) OnClose(f func()) { sc.onClose = f }

// Close implements net.Conn.
func (sc *Conn) Close() error {
	if sc.onClose != nil {
		sc.onClose()
	}
	return sc.Conn.Close()
}

// Read implements net.Conn.
func (sc *Conn) Read(p []byte) (int, error) {
	if sc.r == nil {
		if len(p) >= ChunkSize {
			return sc.Conn.Read(p) // large read: straight into the caller's buffer
		}
		b := getChunk()
		n, err := sc.Conn.Read((*b)[:cap(*b)])
		if n <= 0 {
			putChunk(b)
			return 0, err
		}
		// A net.Conn returns data or an error, not both; an error after data
		// comes back on the next read.
		*b = (*b)[:n]
		sc.r, sc.rpos = b, 0
	}
	n := copy(p, (*sc.r)[sc.rpos:])
	sc.rpos += n
	if sc.rpos == len(*sc.r) {
		putChunk(sc.r)
		sc.r, sc.rpos = nil, 0
	}
	return n, nil
}

// Buffered reports whether bytes read from the socket wait to be consumed.
func (sc *Conn) Buffered() bool { return sc.r != nil }

// Write implements net.Conn.
func (sc *Conn) Write(p []byte) (int, error) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.frame.advance(p)
	if sc.corked || !sc.frame.atBoundary() {
		if sc.held == nil {
			sc.held = getChunk()
		}
		if len(*sc.held)+len(p) <= ChunkSize {
			*sc.held = append(*sc.held, p...)
			return len(p), nil
		}
		// Too much to hold: write what there is, the frame carries on.
	}
	if sc.held == nil {
		return sc.Conn.Write(p)
	}
	var err error
	if len(*sc.held)+len(p) <= ChunkSize {
		*sc.held = append(*sc.held, p...)
		_, err = sc.Conn.Write(*sc.held)
	} else {
		// One writev. Not for small frames: the socket keeps the iovec
		// array it builds for the connection's life.
		bufs := net.Buffers{*sc.held, p}
		_, err = bufs.WriteTo(sc.Conn)
	}
	putChunk(sc.held)
	sc.held = nil
	if err != nil {
		// Whether any of p went out is unknown; the connection is done either
		// way, as the library closes it on a write error.
		return 0, err
	}
	return len(p), nil
}

// Hold keeps b to be written in front of the next write: the handshake's
// response head, which then leaves with the first frame in one system call.
// Call it before the connection is in use.
func (sc *Conn) Hold(b []byte) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	if sc.held == nil {
		sc.held = getChunk()
	}
	*sc.held = append(*sc.held, b...) // may outgrow the chunk; putChunk drops it then
}

// Cork makes Write hold complete frames, up to a chunk, until Uncork.
func (sc *Conn) Cork() {
	sc.wmu.Lock()
	sc.corked = true
	sc.wmu.Unlock()
}

// Uncork ends a cork and writes the frames held. Bytes of a frame the
// library is still writing (a pong from the reader, say) stay held; that
// frame's last Write sends them.
func (sc *Conn) Uncork() error {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.corked = false
	if sc.held == nil || !sc.frame.atBoundary() {
		return nil
	}
	_, err := sc.Conn.Write(*sc.held)
	putChunk(sc.held)
	sc.held = nil
	return err
}

// frameTracker follows a stream of WebSocket frames (RFC 6455 §5.2) to know
// whether it stands between two frames.
type frameTracker struct {
	header  [14]byte // the header being read, up to its longest form
	headerN int      // bytes of header seen; 0 between frames and in payloads
	payload uint64   // payload bytes still to come
}

// advance moves the tracker over p, the next bytes of the stream.
func (f *frameTracker) advance(p []byte) {
	for len(p) > 0 {
		if f.payload > 0 {
			n := uint64(len(p))
			if n > f.payload {
				n = f.payload
			}
			f.payload -= n
			p = p[n:]
			continue
		}
		f.header[f.headerN] = p[0]
		f.headerN++
		p = p[1:]
		if size, payload, ok := parseFrameHeader(f.header[:f.headerN]); ok && f.headerN == size {
			f.headerN, f.payload = 0, payload
		}
	}
}

// atBoundary reports whether the stream so far ends with a complete frame.
func (f *frameTracker) atBoundary() bool { return f.headerN == 0 && f.payload == 0 }

// parseFrameHeader reads the start of a frame header: once h holds enough of
// it, the header's full size and the payload length.
func parseFrameHeader(h []byte) (size int, payload uint64, ok bool) {
	if len(h) < 2 {
		return 0, 0, false
	}
	size = 2
	if h[1]&0x80 != 0 {
		size += 4 // masking key
	}
	switch l := h[1] & 0x7f; l {
	case 126:
		size += 2
		if len(h) < 4 {
			return 0, 0, false
		}
		payload = uint64(h[2])<<8 | uint64(h[3])
	case 127:
		size += 8
		if len(h) < 10 {
			return 0, 0, false
		}
		for _, b := range h[2:10] {
			payload = payload<<8 | uint64(b)
		}
	default:
		payload = uint64(l)
	}
	return size, payload, true
}

// FD is c's descriptor, or -1 when it has none.
func FD(c net.Conn) int32 {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := int32(-1)
	if rc.Control(func(d uintptr) { fd = int32(d) }) != nil {
		return -1
	}
	return fd
}
