package hub

import (
	"encoding/json"
	"unicode/utf8"
)

// Frames are what the server writes to a socket: JSON text of the form
// {"event":E,"channel":C,"data":D[,"user_id":U]}. The data of every event the
// server sends is a JSON string (pusher-js JSON-parses it again when it can), so
// an event triggered over HTTP is delivered with its data exactly as given.
//
// They are built by hand instead of with encoding/json because this is the
// fan-out hot path: one frame is encoded once per channel and the same bytes go
// to every subscriber.

// appendEventFrame appends the frame of event on channel (omitted when empty)
// with data (a string, written as a JSON string) and userID (omitted when empty).
func appendEventFrame(dst []byte, event, channel, data, userID string) []byte {
	dst = append(dst, `{"event":`...)
	dst = AppendJSONString(dst, event)
	if channel != "" {
		dst = append(dst, `,"channel":`...)
		dst = AppendJSONString(dst, channel)
	}
	dst = append(dst, `,"data":`...)
	dst = AppendJSONString(dst, data)
	if userID != "" {
		dst = append(dst, `,"user_id":`...)
		dst = AppendJSONString(dst, userID)
	}
	return append(dst, '}')
}

// EventFrame returns the frame of event on channel (omitted when empty) with
// data, written as a JSON string, and userID (omitted when empty).
func EventFrame(event, channel, data, userID string) []byte {
	return appendEventFrame(make([]byte, 0, 48+len(event)+len(channel)+len(data)+len(userID)), event, channel, data, userID)
}

// JSONFrame returns the frame of a server event whose data is v encoded as
// JSON and then as a JSON string, as pusher-js expects of pusher:* events. v
// must be a value that always encodes (a struct of plain fields); anything
// else panics.
func JSONFrame(event, channel string, v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic("hub: encoding server event: " + err.Error())
	}
	return EventFrame(event, channel, string(data), "")
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s to dst as a JSON string literal, as frames
// carry strings. Invalid UTF-8 becomes U+FFFD, as with encoding/json, so a
// frame is always valid JSON text; nothing below a space is left raw, nor
// U+2028 and U+2029, so a literal never ends a line early, even for a
// JavaScript parser.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break JavaScript parsers that
		// treat them as line ends; escape them as encoding/json does.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
