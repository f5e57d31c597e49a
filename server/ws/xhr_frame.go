package ws

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/heraldrt/herald/server/hub"
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
	anotherConnectionFrame = appendCloseFrame(nil, 2010, "Another connection still open")
)

// appendMessages appends the frame a[...] of the server frames given: a
// JSON array of strings, each the JSON text of one frame, on one line.
func appendMessages(dst []byte, frames [][]byte) []byte {
	dst = append(dst, 'a', '[')
	for i, f := range frames {
		if i > 0 {
			dst = append(dst, ',')
		}
		// Viewed as a string without a copy (string(f) would allocate one
		// per frame and session): a frame is never written once queued
		// (the hub shares its bytes among subscribers), and the view does
		// not outlive the call.
		dst = hub.AppendJSONString(dst, unsafe.String(unsafe.SliceData(f), len(f)))
	}
	return append(dst, ']', '\n')
}

// appendCloseFrame appends c[code,"reason"], how the fallback carries a
// close code.
func appendCloseFrame(dst []byte, code int, reason string) []byte {
	dst = append(dst, 'c', '[')
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, ',')
	dst = hub.AppendJSONString(dst, reason)
	return append(dst, ']', '\n')
}

// appendClose appends how the fallback closes a session with reason: its
// pusher:error, as a WebSocket sends it before closing, then its close
// frame.
func appendClose(dst []byte, reason hub.CloseReason) []byte {
	dst = appendMessages(dst, [][]byte{errorFrame(reason.Code, reason.Message)})
	return appendCloseFrame(dst, reason.Code, reason.Message)
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
