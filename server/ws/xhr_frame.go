package ws

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// The SockJS framing of the HTTP fallback, as pusher-js's HTTP socket reads
// it: one frame a line, told apart by its first character.
var (
	openFrame      = []byte("o\n")
	heartbeatFrame = []byte("h\n")
	// streamPrelude opens every xhr_streaming response: browsers that buffer
	// the start of a response before they report progress hand the frames
	// after it over at once. pusher-js reads it as a heartbeat before the
	// open frame, and ignores it.
	streamPrelude = append(bytes.Repeat([]byte{'h'}, 2048), '\n')
	// anotherConnectionFrame answers a receiving request made while another
	// one is attached to the session (SockJS's code 2010).
	anotherConnectionFrame = closeFrame(2010, "Another connection still open")
)

// appendMessages appends the frame a[...] of the server frames given: a
// JSON array of strings, each the JSON text of one frame. Frames are JSON
// text already (no raw control characters), so only quotes and backslashes
// need escaping; anything below a space is escaped too, so that a frame
// never ends the line early.
func appendMessages(dst []byte, frames [][]byte) []byte {
	dst = append(dst, 'a', '[')
	for i, f := range frames {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		start := 0
		for j, b := range f {
			if b != '"' && b != '\\' && b >= 0x20 {
				continue
			}
			dst = append(dst, f[start:j]...)
			if b < 0x20 {
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			} else {
				dst = append(dst, '\\', b)
			}
			start = j + 1
		}
		dst = append(dst, f[start:]...)
		dst = append(dst, '"')
	}
	return append(dst, ']', '\n')
}

const hexDigits = "0123456789abcdef"

// closeFrame is c[code,"reason"], how the fallback carries a close code.
func closeFrame(code int, reason string) []byte {
	r, _ := json.Marshal(reason) // a string always encodes
	b := append([]byte("c["), strconv.Itoa(code)...)
	b = append(b, ',')
	b = append(b, r...)
	return append(b, ']', '\n')
}

// Why an xhr_send body is refused.
var (
	errSendEmpty    = errors.New("the body is empty: send a JSON array of strings")
	errSendNotUTF8  = errors.New("the body is not UTF-8")
	errSendNotArray = errors.New("the body must be a JSON array of strings, each one client message")
)

// parseSendBody reads the body of xhr_send: a JSON array of strings, each a
// client message (pusher-js sends one at a time, and [] as a heartbeat).
func parseSendBody(body []byte) ([]string, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errSendEmpty
	}
	// encoding/json would turn invalid UTF-8 into U+FFFD silently; a
	// WebSocket text message of it fails, so it is refused here too.
	if !utf8.Valid(body) {
		return nil, errSendNotUTF8
	}
	var msgs []string
	if err := json.Unmarshal(body, &msgs); err != nil || msgs == nil {
		return nil, errSendNotArray
	}
	return msgs, nil
}
