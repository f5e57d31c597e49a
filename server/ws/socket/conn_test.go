package socket

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"testing"
)

// recordConn is a net.Conn that records each Write and serves Reads from
// scripted pieces.
type recordConn struct {
	net.Conn // nil: only Read and Write are used
	writes   [][]byte
	reads    [][]byte
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

func (c *recordConn) Read(p []byte) (int, error) {
	if len(c.reads) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.reads[0])
	if c.reads[0] = c.reads[0][n:]; len(c.reads[0]) == 0 {
		c.reads = c.reads[1:]
	}
	return n, nil
}

// testFrame encodes a frame as the server sends it (masked for a client).
func testFrame(payload []byte, masked bool) []byte {
	f := []byte{0x81}
	m := byte(0)
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		f = append(f, m|byte(n))
	case n <= 0xffff:
		f = append(f, m|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, m|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	if masked {
		f = append(f, 1, 2, 3, 4)
	}
	return append(f, payload...)
}

func TestFrameTrackerFindsBoundariesAcrossPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var stream []byte
		var ends []int // offsets where a frame ends
		for range 1 + rng.IntN(4) {
			size := []int{0, 1, 125, 126, 127, 300, 65535, 65536, 70000}[rng.IntN(9)]
			stream = append(stream, testFrame(make([]byte, size), rng.IntN(2) == 0)...)
			ends = append(ends, len(stream))
		}
		var f frameTracker
		for off := 0; off < len(stream); {
			n := min(len(stream)-off, 1+rng.IntN(20))
			if rng.IntN(4) == 0 {
				n = min(len(stream)-off, 1+rng.IntN(70000))
			}
			f.advance(stream[off : off+n])
			off += n
			want := false
			for _, e := range ends {
				want = want || e == off
			}
			if f.atBoundary() != want {
				t.Fatalf("at offset %d of %d: atBoundary %v, want %v", off, len(stream), f.atBoundary(), want)
			}
		}
	}
}

func TestSockConnWritesEachFrameInOneCall(t *testing.T) {
	for _, size := range []int{0, 5, 14, 100, 125, 126, 2000, ChunkSize, 3 * ChunkSize} {
		rc := &recordConn{}
		sc := NewConn(rc, nil)
		bw := sc.LibBuffers().Writer
		var want []byte
		for range 3 {
			// As the library writes a frame: the header, the payload, a flush.
			frame := testFrame(bytes.Repeat([]byte{'x'}, size), false)
			hdr := len(frame) - size
			if _, err := bw.Write(frame[:hdr]); err != nil {
				t.Fatal(err)
			}
			if _, err := bw.Write(frame[hdr:]); err != nil {
				t.Fatal(err)
			}
			if err := bw.Flush(); err != nil {
				t.Fatal(err)
			}
			want = append(want, frame...)
			if sc.held != nil {
				t.Fatalf("payload %d: bytes held after a complete frame", size)
			}
		}
		if got := bytes.Join(rc.writes, nil); !bytes.Equal(got, want) {
			t.Fatalf("payload %d: the socket got other bytes than written", size)
		}
		// Larger frames go out with one writev, which recordConn sees as
		// one Write per buffer.
		if len(want)/3 <= ChunkSize && len(rc.writes) != 3 {
			t.Errorf("payload %d: %d writes for 3 frames, want 3", size, len(rc.writes))
		}
	}
}

// The handshake's response head, held, leaves with the first frame in one
// write; nothing is held after it.
func TestSockConnHeldHeadLeavesWithTheFirstFrame(t *testing.T) {
	rc := &recordConn{}
	sc := NewConn(rc, nil)
	head := []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")
	sc.Hold(head)
	if len(rc.writes) != 0 {
		t.Fatal("Hold wrote at once")
	}
	bw := sc.LibBuffers().Writer
	first, second := testFrame([]byte("established"), false), testFrame([]byte("next"), false)
	for _, f := range [][]byte{first, second} {
		if _, err := bw.Write(f[:2]); err != nil { // as the library does: the header, then the payload
			t.Fatal(err)
		}
		if _, err := bw.Write(f[2:]); err != nil {
			t.Fatal(err)
		}
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	want := [][]byte{append(append([]byte{}, head...), first...), second}
	if len(rc.writes) != 2 || !bytes.Equal(rc.writes[0], want[0]) || !bytes.Equal(rc.writes[1], want[1]) {
		t.Fatalf("writes %q, want %q", rc.writes, want)
	}
	if sc.held != nil {
		t.Fatal("bytes held after the frames")
	}
}

func TestSockConnCorkedFramesLeaveTogether(t *testing.T) {
	rc := &recordConn{}
	sc := NewConn(rc, nil)
	bw := sc.LibBuffers().Writer
	writeFrame := func(frame []byte) {
		t.Helper()
		if _, err := bw.Write(frame[:2]); err != nil {
			t.Fatal(err)
		}
		if _, err := bw.Write(frame[2:]); err != nil {
			t.Fatal(err)
		}
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	small := func(b byte) []byte { return testFrame(bytes.Repeat([]byte{b}, 100), false) }

	// Three small frames while corked: nothing reaches the socket until
	// uncork, then all three in one write.
	sc.Cork()
	var want []byte
	for _, b := range []byte("abc") {
		writeFrame(small(b))
		want = append(want, small(b)...)
	}
	if len(rc.writes) != 0 {
		t.Fatalf("%d socket writes while corked, want 0", len(rc.writes))
	}
	if err := sc.Uncork(); err != nil {
		t.Fatal(err)
	}
	if len(rc.writes) != 1 || !bytes.Equal(rc.writes[0], want) {
		t.Fatalf("uncork: %d writes, want the three frames in one", len(rc.writes))
	}

	// More than a chunk while corked: what is held goes out with the frame
	// that does not fit, in order, and nothing is lost.
	rc.writes = nil
	sc.Cork()
	want = want[:0]
	for _, f := range [][]byte{small('d'), testFrame(bytes.Repeat([]byte{'e'}, ChunkSize), false), small('f')} {
		writeFrame(f)
		want = append(want, f...)
	}
	if err := sc.Uncork(); err != nil {
		t.Fatal(err)
	}
	if got := bytes.Join(rc.writes, nil); !bytes.Equal(got, want) {
		t.Fatal("corked frames over a chunk: the socket got other bytes than written")
	}
	if sc.held != nil {
		t.Fatal("bytes held after uncork")
	}

	// A frame half written when the cork ends stays held until it is whole.
	rc.writes = nil
	sc.Cork()
	g := small('g')
	if _, err := sc.Write(g[:10]); err != nil {
		t.Fatal(err)
	}
	if err := sc.Uncork(); err != nil {
		t.Fatal(err)
	}
	if len(rc.writes) != 0 {
		t.Fatal("uncork wrote part of a frame")
	}
	if _, err := sc.Write(g[10:]); err != nil {
		t.Fatal(err)
	}
	if len(rc.writes) != 1 || !bytes.Equal(rc.writes[0], g) {
		t.Fatalf("the completed frame: %d writes, want it in one", len(rc.writes))
	}
}

func TestSockConnReadsThroughPooledChunks(t *testing.T) {
	msg := testFrame([]byte(`{"event":"pusher:ping","data":{}}`), true)
	big := bytes.Repeat([]byte{'y'}, 2*ChunkSize)
	rc := &recordConn{reads: [][]byte{append(bytes.Clone(msg), msg...), big}}
	sc := NewConn(rc, []byte("early"))
	br := sc.LibBuffers().Reader

	got := make([]byte, 5)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "early" {
		t.Fatalf("pending bytes: %q, %v", got, err)
	}
	got = make([]byte, 2*len(msg))
	if _, err := io.ReadFull(br, got); err != nil || !bytes.Equal(got, append(bytes.Clone(msg), msg...)) {
		t.Fatalf("messages: %q, %v", got, err)
	}
	if br.Buffered() != 0 || sc.Buffered() {
		t.Fatal("input still buffered after reading all of it")
	}
	got = make([]byte, len(big))
	if _, err := io.ReadFull(br, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("large read: %v", err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the end: %v, want EOF", err)
	}
}

func TestSockConnIdleHoldsNoBuffer(t *testing.T) {
	rc := &recordConn{reads: [][]byte{[]byte("abc")}}
	sc := NewConn(rc, nil)
	rw := sc.LibBuffers()
	if _, err := io.ReadFull(rw.Reader, make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Writer.Write(testFrame([]byte("hello"), false)); err != nil {
		t.Fatal(err)
	}
	if err := rw.Writer.Flush(); err != nil {
		t.Fatal(err)
	}
	if sc.r != nil || sc.held != nil {
		t.Fatal("an idle Conn holds a pooled buffer")
	}
}

// discardConn is a net.Conn whose writes go nowhere.
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkFrameWrite compares writing a 200-byte frame as the WebSocket
// library does, through Conn (the sub-benchmark keeps its old name, sockConn)
// and through the 2 KiB bufio writer it used to get.
func BenchmarkFrameWrite(b *testing.B) {
	frame := testFrame(bytes.Repeat([]byte{'x'}, 200), false)
	run := func(b *testing.B, bw *bufio.Writer) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = bw.Write(frame[:2])
			_, _ = bw.Write(frame[2:])
			_ = bw.Flush()
		}
	}
	b.Run("sockConn", func(b *testing.B) { run(b, NewConn(discardConn{}, nil).LibBuffers().Writer) })
	b.Run("bufio2KiB", func(b *testing.B) { run(b, bufio.NewWriterSize(discardConn{}, 2048)) })
}

// A connection with no bytes left over from the handshake has no input
// buffered, so the transport parks it instead of reading at once.
func TestNewConnWithoutPendingBytesHasNothingBuffered(t *testing.T) {
	for _, pending := range [][]byte{nil, {}} {
		if sc := NewConn(&recordConn{}, pending); sc.Buffered() || sc.r != nil {
			t.Fatalf("pending %q: Buffered %v, want false and no chunk held", pending, sc.Buffered())
		}
	}
	if sc := NewConn(&recordConn{}, []byte("x")); !sc.Buffered() {
		t.Fatal("one pending byte: not Buffered")
	}
}

// readCounter counts the reads that reach the socket.
type readCounter struct {
	*recordConn
	reads int
}

func (c *readCounter) Read(p []byte) (int, error) {
	c.reads++
	return c.recordConn.Read(p)
}

// The library reads a message through its 16-byte bufio reader: the first
// small read takes a whole chunk from the socket, and the rest of the
// message is served from it, not read from the socket again.
func TestSockConnSmallReadTakesAChunkFromTheSocket(t *testing.T) {
	msg := testFrame(bytes.Repeat([]byte{'m'}, 100), true)
	rc := &readCounter{recordConn: &recordConn{reads: [][]byte{bytes.Clone(msg)}}}
	sc := NewConn(rc, nil)
	br := sc.LibBuffers().Reader
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(br, got[:2]); err != nil { // the header's first bytes
		t.Fatal(err)
	}
	if !sc.Buffered() {
		t.Fatal("the rest of the message is not buffered after the first small read")
	}
	if _, err := io.ReadFull(br, got[2:]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("read other bytes than the message")
	}
	if rc.reads != 1 {
		t.Fatalf("%d reads from the socket for one %d-byte message that came in one piece, want 1", rc.reads, len(msg))
	}
}

// frameOfSize is a server frame (unmasked) of exactly n bytes, header
// included; n is at least 130 (a 4-byte header).
func frameOfSize(n int, b byte) []byte {
	f := testFrame(bytes.Repeat([]byte{b}, n-4), false)
	if len(f) != n {
		panic("frameOfSize: header is not 4 bytes")
	}
	return f
}

// Exactly a chunk is still "up to a chunk": corked frames that fill the
// chunk to the byte are held until uncork, and a frame of exactly a chunk
// whose header was held is written in one call.
func TestSockConnExactlyAChunk(t *testing.T) {
	t.Run("Corked", func(t *testing.T) {
		rc := &recordConn{}
		sc := NewConn(rc, nil)
		small := testFrame(bytes.Repeat([]byte{'a'}, 100), false)
		rest := frameOfSize(ChunkSize-len(small), 'b')
		sc.Cork()
		for _, f := range [][]byte{small, rest} {
			if _, err := sc.Write(f); err != nil {
				t.Fatal(err)
			}
		}
		if len(rc.writes) != 0 {
			t.Fatalf("%d socket writes while corked with exactly a chunk held, want 0", len(rc.writes))
		}
		if err := sc.Uncork(); err != nil {
			t.Fatal(err)
		}
		if len(rc.writes) != 1 || !bytes.Equal(rc.writes[0], append(bytes.Clone(small), rest...)) {
			t.Fatalf("uncork: %d writes, want both frames in one", len(rc.writes))
		}
	})
	t.Run("OneFrame", func(t *testing.T) {
		rc := &recordConn{}
		sc := NewConn(rc, nil)
		frame := frameOfSize(ChunkSize, 'c')
		for _, piece := range [][]byte{frame[:4], frame[4:]} { // as the library writes it: header, payload
			if _, err := sc.Write(piece); err != nil {
				t.Fatal(err)
			}
		}
		if len(rc.writes) != 1 || !bytes.Equal(rc.writes[0], frame) {
			t.Fatalf("a %d-byte frame went out in %d writes, want 1", len(frame), len(rc.writes))
		}
	})
}

// A corked socket holds at most a chunk: the frame that would take it past
// goes out at once with what was held, before the cork ends.
func TestSockConnCorkHoldsAtMostAChunk(t *testing.T) {
	rc := &recordConn{}
	sc := NewConn(rc, nil)
	small := testFrame(bytes.Repeat([]byte{'a'}, 100), false)
	big := frameOfSize(ChunkSize, 'b')
	sc.Cork()
	for _, f := range [][]byte{small, big} {
		if _, err := sc.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	if got := bytes.Join(rc.writes, nil); !bytes.Equal(got, append(bytes.Clone(small), big...)) {
		t.Fatalf("before uncork the socket got %d bytes, want the %d of both frames", len(got), len(small)+len(big))
	}
	if sc.held != nil {
		t.Fatal("bytes still held after more than a chunk was written")
	}
	if err := sc.Uncork(); err != nil {
		t.Fatal(err)
	}
}
