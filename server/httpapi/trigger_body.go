package httpapi

import (
	"strings"
	"unicode/utf8"

	"github.com/heraldrt/herald/gen/channels"
)

// decodeTriggerEvent decodes a trigger body in the shape SDKs send into v
// without reflection, and reports whether it did; when it did not, v is
// untouched and the caller decodes with encoding/json as the generated code
// does. The shape: JSON whitespace, then one object whose members are
// TriggerEventRequest's six, spelled exactly and each at most once, with
// string values (an array of strings for channels); strings may use the
// short escapes (\" \\ \/ \b \f \n \r \t) and otherwise hold valid UTF-8
// without control characters. Anything else (\u escapes, null, numbers,
// other members or spellings, repeats, syntax errors) is left to
// encoding/json, which then decides both the value and the error.
//
// Like decodeJSON, the binding every other body goes through, it takes one
// value with nothing but whitespace after it; a body with more is left to
// decodeJSON, which refuses it. For every body it accepts, v is exactly what
// decodeJSON gives: FuzzDecodeTriggerEvent checks it.
func decodeTriggerEvent(body []byte, v *channels.TriggerEventRequest) bool {
	d := jsonScanner{b: body}
	if !d.consume('{') {
		return false
	}
	// One allocation for all the strings the request points to.
	vals := new(struct {
		name, data, channel, socketID, info string
		channels                            []string
	})
	var out channels.TriggerEventRequest
	if d.consume('}') {
		if !d.atEnd() {
			return false
		}
		*v = out
		return true
	}
	for {
		key, ok := d.key()
		if !ok || !d.consume(':') {
			return false
		}
		switch string(key) { // compared without allocating
		case "channels":
			if out.Channels != nil {
				return false
			}
			list, ok := d.stringArray()
			if !ok {
				return false
			}
			vals.channels = list
			out.Channels = &vals.channels
		default:
			var dst *string
			var field **string
			switch string(key) {
			case "name":
				dst, field = &vals.name, &out.Name
			case "data":
				dst, field = &vals.data, &out.Data
			case "channel":
				dst, field = &vals.channel, &out.Channel
			case "socket_id":
				dst, field = &vals.socketID, &out.SocketID
			case "info":
				dst, field = &vals.info, &out.Info
			default:
				return false
			}
			if *field != nil {
				return false
			}
			s, ok := d.string()
			if !ok {
				return false
			}
			*dst, *field = s, dst
		}
		if d.consume('}') {
			if !d.atEnd() {
				return false
			}
			*v = out
			return true
		}
		if !d.consume(',') {
			return false
		}
	}
}

// jsonScanner reads the restricted JSON of decodeTriggerEvent from b.
type jsonScanner struct {
	b []byte
	i int
}

// consume skips whitespace and then c, reporting whether c was there.
func (d *jsonScanner) consume(c byte) bool {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
			continue
		case c:
			d.i++
			return true
		}
		return false
	}
	return false
}

// atEnd skips whitespace and reports whether nothing else is left.
func (d *jsonScanner) atEnd() bool {
	for ; d.i < len(d.b); d.i++ {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
		default:
			return false
		}
	}
	return true
}

// key reads a member name, a string of ASCII without escapes, and returns
// its bytes (a slice of b) for the caller to compare.
func (d *jsonScanner) key() ([]byte, bool) {
	if !d.consume('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// string reads a string value as a new string.
func (d *jsonScanner) string() (string, bool) {
	if !d.consume('"') {
		return "", false
	}
	// First find the closing quote, checking the escapes, so the value can
	// be built with one allocation.
	start, escapes := d.i, 0
	for {
		if d.i >= len(d.b) {
			return "", false
		}
		c := d.b[d.i]
		if c == '"' {
			break
		}
		if c < 0x20 {
			return "", false
		}
		if c == '\\' {
			if d.i+1 >= len(d.b) || unescape(d.b[d.i+1]) == 0 {
				return "", false
			}
			escapes++
			d.i++
		}
		d.i++
	}
	raw := d.b[start:d.i]
	d.i++ // the closing quote
	// encoding/json replaces invalid UTF-8 with U+FFFD; leave that to it.
	// Escapes are ASCII, so checking the raw bytes checks the value.
	if !utf8.Valid(raw) {
		return "", false
	}
	if escapes == 0 {
		return string(raw), true
	}
	var s strings.Builder
	s.Grow(len(raw) - escapes)
	for j := 0; j < len(raw); j++ {
		c := raw[j]
		if c == '\\' {
			j++
			c = unescape(raw[j])
		}
		s.WriteByte(c)
	}
	return s.String(), true
}

// unescape returns the byte a short escape \c stands for, or 0 when \c is not
// one of them (\u escapes are not handled here).
func unescape(c byte) byte {
	switch c {
	case '"', '\\', '/':
		return c
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return 0
}

// stringArray reads an array of strings; [] is an empty, non-nil slice, as
// encoding/json makes it.
func (d *jsonScanner) stringArray() ([]string, bool) {
	if !d.consume('[') {
		return nil, false
	}
	list := make([]string, 0, 4)
	if d.consume(']') {
		return list, true
	}
	for {
		s, ok := d.string()
		if !ok {
			return nil, false
		}
		list = append(list, s)
		if d.consume(']') {
			return list, true
		}
		if !d.consume(',') {
			return nil, false
		}
	}
}
