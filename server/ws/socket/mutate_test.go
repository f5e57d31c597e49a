package socket

import (
	"bytes"
	"io"
	"testing"
	"testing/synctest"
	"time"
)

// Tests that kill mutants gremlins found alive (make mutate); the
// equivalent ones are listed in scripts/mutate-equivalent.md.

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

// Each waiting goroutine is let go once it has waited linger, counted from
// when it began to wait, not a linger after the one before it went. Fake
// time (testing/synctest): the instants are exact.
func TestGoPoolLetsEachGoAfterItsOwnLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const linger = time.Second
		p := NewPool(4, linger)
		first, second := make(chan struct{}), make(chan struct{})
		p.Go(func() { <-first })
		p.Go(func() { <-second })
		close(first)
		synctest.Wait()
		time.Sleep(linger / 2)
		close(second) // waits from linger/2 on
		synctest.Wait()
		if n := p.waiting(); n != 2 {
			t.Fatalf("%d goroutines waiting, want 2", n)
		}
		time.Sleep(linger * 3 / 4) // 1.25 linger
		synctest.Wait()
		if n := p.waiting(); n != 1 {
			t.Fatalf("at 1.25 linger: %d goroutines waiting, want 1 (the first let go)", n)
		}
		time.Sleep(linger / 2) // 1.75 linger: the second has waited 1.25 linger
		synctest.Wait()
		if n := p.waiting(); n != 0 {
			t.Fatalf("at 1.75 linger: %d goroutines waiting, want 0", n)
		}
	})
}
