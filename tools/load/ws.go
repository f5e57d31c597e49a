package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// wsConn is the little of a WebSocket client that a subscriber needs. The raw
// implementation is the default; the coder/websocket one is there to compare.
type wsConn interface {
	// ReadMessage returns the next text or binary message, answering pings
	// on the way. The slice is valid until the next call.
	ReadMessage() ([]byte, error)
	// WriteText sends one text message; safe for concurrent use.
	WriteText(p []byte) error
	// Close ends the connection without waiting for the server.
	Close()
	// Abort ends the connection the way a network failure does: no close
	// frame (and for the raw client a TCP reset, no FIN).
	Abort()
}

// closeCode names why a read failed: the WebSocket close code the server
// sent ("4100"), or "eof" / "reset" / "error" when the connection ended
// without a close frame.
func closeCode(err error) string {
	var ce *closeError
	if errors.As(err, &ce) {
		return strconv.Itoa(ce.code)
	}
	if c := websocket.CloseStatus(err); c != -1 {
		return strconv.Itoa(int(c))
	}
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case isReset(err):
		return "reset"
	}
	return "error"
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && bytes.Contains([]byte(op.Err.Error()), []byte("reset"))
}

type closeError struct {
	code   int
	reason string
}

func (e *closeError) Error() string {
	return fmt.Sprintf("closed by server: %d %s", e.code, e.reason)
}

// rawConn is a minimal client-side WebSocket (RFC 6455) over a net.Conn: no
// extensions, text frames, client frames masked. Reading costs one buffered
// read per frame and no allocation, which keeps the load tool well below the
// server in CPU when tens of thousands of sockets each receive an event.
type rawConn struct {
	nc  net.Conn
	br  *bufio.Reader
	msg []byte // the current message; reader only
	max int    // largest message accepted

	wmu  sync.Mutex
	wbuf []byte
	mask uint32
}

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// dialRaw opens a TCP connection with dial and performs the opening
// handshake for path (with query) on host.
func dialRaw(ctx context.Context, dial func(ctx context.Context) (net.Conn, error), host, path string, readBuf, maxMsg int) (*rawConn, error) {
	nc, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	req := "GET " + path + " HTTP/1.1\r\nHost: " + host +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + key +
		"\r\nSec-WebSocket-Version: 13\r\nUser-Agent: herald-load\r\n\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		nc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(nc, readBuf)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		nc.Close()
		return nil, fmt.Errorf("handshake: HTTP %d %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	if resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		nc.Close()
		return nil, errors.New("handshake: bad Sec-WebSocket-Accept")
	}
	_ = nc.SetDeadline(time.Time{})
	var seed [4]byte
	_, _ = rand.Read(seed[:])
	return &rawConn{nc: nc, br: br, max: maxMsg, mask: binary.LittleEndian.Uint32(seed[:]) | 1}, nil
}

func (c *rawConn) ReadMessage() ([]byte, error) {
	c.msg = c.msg[:0]
	for {
		var hdr [2]byte
		if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
			return nil, err
		}
		fin, op := hdr[0]&0x80 != 0, hdr[0]&0x0f
		if hdr[1]&0x80 != 0 {
			return nil, errors.New("protocol error: masked server frame")
		}
		n := uint64(hdr[1] & 0x7f)
		switch n {
		case 126:
			var ext [2]byte
			if _, err := io.ReadFull(c.br, ext[:]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(ext[:]))
		case 127:
			var ext [8]byte
			if _, err := io.ReadFull(c.br, ext[:]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(ext[:])
		}
		if op >= 8 { // control frame: ping, pong or close
			if n > 125 || !fin {
				return nil, errors.New("protocol error: bad control frame")
			}
			var p [125]byte
			if _, err := io.ReadFull(c.br, p[:n]); err != nil {
				return nil, err
			}
			switch op {
			case 8:
				ce := &closeError{code: 1005}
				if n >= 2 {
					ce.code = int(binary.BigEndian.Uint16(p[:2]))
					ce.reason = string(p[2:n])
				}
				// Echo the code, as the closing handshake asks, then hang up.
				_ = c.writeFrame(8, p[:min(n, 2)], time.Second)
				c.nc.Close()
				return nil, ce
			case 9:
				if err := c.writeFrame(10, p[:n], 10*time.Second); err != nil {
					return nil, err
				}
			}
			continue
		}
		if uint64(len(c.msg))+n > uint64(c.max) {
			return nil, fmt.Errorf("message over %d bytes", c.max)
		}
		start := len(c.msg)
		c.msg = growLen(c.msg, start+int(n))
		if _, err := io.ReadFull(c.br, c.msg[start:]); err != nil {
			return nil, err
		}
		if fin {
			return c.msg, nil
		}
	}
}

func growLen(b []byte, n int) []byte {
	if n <= cap(b) {
		return b[:n]
	}
	nb := make([]byte, n, max(n, 2*cap(b), 256))
	copy(nb, b)
	return nb
}

func (c *rawConn) WriteText(p []byte) error { return c.writeFrame(1, p, 10*time.Second) }

// writeFrame sends one masked frame. The mask only has to be unpredictable to
// browsers' scripts, not to this tool; a xorshift keeps it cheap.
func (c *rawConn) writeFrame(op byte, p []byte, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := append(c.wbuf[:0], 0x80|op)
	switch n := len(p); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xffff:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = binary.BigEndian.AppendUint64(append(b, 0x80|127), uint64(n))
	}
	c.mask ^= c.mask << 13
	c.mask ^= c.mask >> 17
	c.mask ^= c.mask << 5
	var m [4]byte
	binary.LittleEndian.PutUint32(m[:], bits.RotateLeft32(c.mask, 7))
	b = append(b, m[:]...)
	off := len(b)
	b = append(b, p...)
	for i := range p {
		b[off+i] ^= m[i&3]
	}
	c.wbuf = b
	_ = c.nc.SetWriteDeadline(time.Now().Add(timeout))
	_, err := c.nc.Write(b)
	return err
}

// Close sends a normal close frame (best effort) and closes the socket
// without waiting for the server's answer.
func (c *rawConn) Close() {
	_ = c.writeFrame(8, []byte{0x03, 0xe8}, 100*time.Millisecond)
	c.nc.Close()
}

func (c *rawConn) Abort() {
	if tc, ok := c.nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close sends RST
	}
	c.nc.Close()
}

// coderConn is the same client on github.com/coder/websocket.
type coderConn struct {
	c   *websocket.Conn
	buf bytes.Buffer
}

func dialCoder(ctx context.Context, client *http.Client, url string, maxMsg int) (*coderConn, error) {
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPClient:      client,
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(int64(maxMsg))
	return &coderConn{c: c}, nil
}

func (c *coderConn) ReadMessage() ([]byte, error) {
	_, r, err := c.c.Reader(context.Background())
	if err != nil {
		return nil, err
	}
	c.buf.Reset()
	if _, err := c.buf.ReadFrom(r); err != nil {
		return nil, err
	}
	return c.buf.Bytes(), nil
}

func (c *coderConn) WriteText(p []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.c.Write(ctx, websocket.MessageText, p)
}

func (c *coderConn) Close() { _ = c.c.CloseNow() }

func (c *coderConn) Abort() { _ = c.c.CloseNow() }
