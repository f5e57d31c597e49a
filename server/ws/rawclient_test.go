package ws

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawClient speaks WebSocket frame by frame over TCP, so a test can send what
// no WebSocket library would: invalid UTF-8, reserved opcodes, broken
// fragmentation.
type rawClient struct {
	c  net.Conn
	br *bufio.Reader
}

// Frame opcodes (RFC 6455 §5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA
)

// dialRawSocket connects to the server and upgrades path (with the query).
func (s *wsServer) dialRawSocket(t testing.TB, path string) *rawClient {
	t.Helper()
	rc, err := s.tryDialRawSocket(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.c.Close() })
	return rc
}

func (s *wsServer) tryDialRawSocket(path string) (*rawClient, error) {
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "ws://"))
	if err != nil {
		return nil, err
	}
	// Generous: only a failing test waits this long.
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		return nil, fmt.Errorf("handshake answered %s", resp.Status)
	}
	return &rawClient{c: c, br: br}, nil
}

// frameBytes encodes a client frame: masked (with a key that changes the
// payload), first byte as given (FIN, RSV bits and opcode).
func frameBytes(first byte, payload []byte) []byte {
	f := []byte{first}
	switch n := len(payload); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	case n <= 0xffff:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	f = append(f, key[:]...)
	for i, b := range payload {
		f = append(f, b^key[i%4])
	}
	return f
}

// send writes one frame: fin set or not, with opcode op.
func (rc *rawClient) send(fin bool, op byte, payload []byte) error {
	first := op
	if fin {
		first |= 0x80
	}
	_, err := rc.c.Write(frameBytes(first, payload))
	return err
}

// read reads one server frame (never masked, never fragmented by Herald).
func (rc *rawClient) read() (op byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(rc.br, h[:]); err != nil {
		return 0, nil, err
	}
	if h[1]&0x80 != 0 {
		return 0, nil, errors.New("masked frame from the server")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(rc.br, ext[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err := io.ReadFull(rc.br, ext[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(ext[:])
	}
	if n > 1<<20 {
		return 0, nil, fmt.Errorf("server frame of %d bytes", n)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(rc.br, payload); err != nil {
		return 0, nil, err
	}
	return h[0] & 0x0f, payload, nil
}

// closeCode is the status code of a close frame's payload (1005: none).
func closeCode(payload []byte) int {
	if len(payload) < 2 {
		return 1005
	}
	return int(binary.BigEndian.Uint16(payload))
}

// untilClosed reads frames until the server's close frame, answers it as
// the protocol asks, and returns its code and the text frames before it.
func (rc *rawClient) untilClosed() (code int, texts []string, err error) {
	for {
		op, payload, err := rc.read()
		if err != nil {
			return 0, texts, err
		}
		switch op {
		case opClose:
			_ = rc.send(true, opClose, payload)
			return closeCode(payload), texts, nil
		case opText:
			texts = append(texts, string(payload))
		}
	}
}
