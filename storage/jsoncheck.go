package storage

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Bounds of the JSON Herald stores: whatever passes CheckJSON is stored
// alike by SQLite and PostgreSQL. Each database refuses some JSON that Go
// reads without complaint, each with an error of its own (a 500 to the
// client that sent it): PostgreSQL's jsonb refuses a lone surrogate escape
// ("\ud800"), the NUL escape and numbers beyond its numeric type (1e999999,
// or more than 16,383 digits after the point); SQLite's JSON functions
// refuse arrays and objects nested more than 1,000 levels deep. Push
// payloads are far from every one of these bounds.
const (
	// MaxJSONDepth is how deeply stored JSON may nest arrays and objects:
	// the outermost value is level 1.
	MaxJSONDepth = 100
	// MaxJSONNumberLength is the most characters a number of stored JSON
	// is written in.
	MaxJSONNumberLength = 100
	// maxJSONExponentDigits is the most digits of a number's exponent
	// (leading zeros aside): within PostgreSQL's numeric range, whatever
	// the mantissa's MaxJSONNumberLength digits.
	maxJSONExponentDigits = 3
)

// JSONError is CheckJSON's refusal: what is wrong and where. errors.Is
// matches it to ErrInvalidJSON, and to ErrInvalidText when it is a NUL
// character.
type JSONError struct {
	Offset int    // the byte of the JSON text where the fault is
	Reason string // e.g. "holds a lone surrogate escape (\ud800)"
	// Syntax is set when the text is no JSON at all; the other refusals
	// are of JSON that encoding/json reads.
	Syntax bool
	nul    bool
}

func (e *JSONError) Error() string {
	return fmt.Sprintf("storage: the JSON %s (at byte %d)", e.Reason, e.Offset)
}

// Is makes errors.Is(err, ErrInvalidJSON) true, and errors.Is(err,
// ErrInvalidText) for a NUL character.
func (e *JSONError) Is(target error) bool {
	return target == ErrInvalidJSON || e.nul && target == ErrInvalidText
}

// CheckJSON returns a *JSONError unless b is one JSON value that both
// databases store: valid JSON in UTF-8, without the NUL character (raw or
// escaped) or a lone surrogate escape, nesting at most MaxJSONDepth levels,
// its numbers within a 64-bit float's range (about ±1.8e308), written in at
// most MaxJSONNumberLength characters with an exponent of at most three
// digits. The APIs check what they store with it before storing, so a
// client gets one answer on either database; the writes of JSON check it
// again.
func CheckJSON(b []byte) error {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return &JSONError{Offset: i, Reason: "holds the NUL character", nul: true}
	}
	c := jsonChecker{b: b}
	c.space()
	if err := c.value(1); err != nil {
		return err
	}
	c.space()
	if c.i != len(b) {
		return c.invalid()
	}
	return nil
}

// jsonChecker reads JSON text from b[i:].
type jsonChecker struct {
	b []byte
	i int
}

func (c *jsonChecker) fail(at int, format string, args ...any) error {
	return &JSONError{Offset: at, Reason: fmt.Sprintf(format, args...)}
}

func (c *jsonChecker) invalid() error {
	return &JSONError{Offset: c.i, Reason: "is not valid JSON", Syntax: true}
}

// peek is the next byte, or 0 at the end (a raw NUL was refused before).
func (c *jsonChecker) peek() byte {
	if c.i < len(c.b) {
		return c.b[c.i]
	}
	return 0
}

func (c *jsonChecker) space() {
	for c.i < len(c.b) {
		switch c.b[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

// value reads one value at nesting level depth. Recursion is bounded by
// MaxJSONDepth.
func (c *jsonChecker) value(depth int) error {
	switch ch := c.peek(); {
	case ch == '{' || ch == '[':
		if depth > MaxJSONDepth {
			return c.fail(c.i, "nests arrays and objects more than %d levels deep", MaxJSONDepth)
		}
		return c.container(depth)
	case ch == '"':
		return c.str()
	case ch == '-' || ch >= '0' && ch <= '9':
		return c.number()
	}
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(c.b[c.i:], []byte(lit)) {
			c.i += len(lit)
			return nil
		}
	}
	return c.invalid()
}

// container reads an object or an array whose members are at depth+1.
func (c *jsonChecker) container(depth int) error {
	object := c.b[c.i] == '{'
	end := byte(']')
	if object {
		end = '}'
	}
	c.i++
	c.space()
	if c.peek() == end {
		c.i++
		return nil
	}
	for {
		if object {
			if c.peek() != '"' {
				return c.invalid()
			}
			if err := c.str(); err != nil {
				return err
			}
			c.space()
			if c.peek() != ':' {
				return c.invalid()
			}
			c.i++
			c.space()
		}
		if err := c.value(depth + 1); err != nil {
			return err
		}
		c.space()
		switch c.peek() {
		case ',':
			c.i++
			c.space()
		case end:
			c.i++
			return nil
		default:
			return c.invalid()
		}
	}
}

// str reads a string: UTF-8, no control characters, valid escapes, no
// \u0000 and no half of a surrogate pair alone.
func (c *jsonChecker) str() error {
	c.i++ // the opening quote
	for {
		if c.i >= len(c.b) {
			return c.invalid()
		}
		switch ch := c.b[c.i]; {
		case ch == '"':
			c.i++
			return nil
		case ch == '\\':
			if err := c.escape(); err != nil {
				return err
			}
		case ch < 0x20:
			return c.invalid()
		case ch < utf8.RuneSelf:
			c.i++
		default:
			r, size := utf8.DecodeRune(c.b[c.i:])
			if r == utf8.RuneError && size == 1 {
				return c.fail(c.i, "is not UTF-8")
			}
			c.i += size
		}
	}
}

// escape reads one escape sequence, a surrogate pair's two at once.
func (c *jsonChecker) escape() error {
	at := c.i
	if c.i+1 >= len(c.b) {
		return c.invalid()
	}
	if c.b[c.i+1] != 'u' {
		switch c.b[c.i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			c.i += 2
			return nil
		}
		return c.invalid()
	}
	r, ok := c.hex4(c.i + 2)
	if !ok {
		return c.invalid()
	}
	c.i += 6
	switch {
	case r == 0:
		return &JSONError{Offset: at, Reason: `holds the NUL character (\u0000)`, nul: true}
	case r >= 0xdc00 && r <= 0xdfff:
		return c.fail(at, `holds a lone surrogate escape (\u%04x)`, r)
	case r >= 0xd800 && r < 0xdc00:
		if low, ok := c.hex4(c.i + 2); !ok || c.b[c.i] != '\\' || c.b[c.i+1] != 'u' || low < 0xdc00 || low > 0xdfff {
			return c.fail(at, `holds a lone surrogate escape (\u%04x)`, r)
		}
		c.i += 6
	}
	return nil
}

// hex4 parses the four hex digits at b[at:].
func (c *jsonChecker) hex4(at int) (rune, bool) {
	if at+4 > len(c.b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(c.b[at:at+4]), 16, 16)
	return rune(n), err == nil
}

// number reads a number and checks that both databases and a 64-bit float
// hold it.
func (c *jsonChecker) number() error {
	start := c.i
	if c.peek() == '-' {
		c.i++
	}
	switch ch := c.peek(); {
	case ch == '0':
		c.i++
	case ch >= '1' && ch <= '9':
		c.digits()
	default:
		return c.invalid()
	}
	if c.peek() == '.' {
		c.i++
		if c.digits() == 0 {
			return c.invalid()
		}
	}
	expDigits := 0
	if ch := c.peek(); ch == 'e' || ch == 'E' {
		c.i++
		if ch := c.peek(); ch == '+' || ch == '-' {
			c.i++
		}
		for c.peek() == '0' {
			c.i++
		}
		expDigits = c.digits()
		if expDigits == 0 && c.b[c.i-1] != '0' {
			return c.invalid()
		}
	}
	lit := c.b[start:c.i]
	if len(lit) > MaxJSONNumberLength || expDigits > maxJSONExponentDigits {
		if len(lit) > 24 {
			lit = append(lit[:20:20], "…"...)
		}
		return c.fail(start, "holds a number out of range (%s): at most %d characters, an exponent of at most %d digits", lit, MaxJSONNumberLength, maxJSONExponentDigits)
	}
	if _, err := strconv.ParseFloat(string(lit), 64); err != nil {
		return c.fail(start, "holds a number out of range (%s): beyond a 64-bit float", lit)
	}
	return nil
}

// digits skips decimal digits and returns how many.
func (c *jsonChecker) digits() int {
	n := 0
	for ch := c.peek(); ch >= '0' && ch <= '9'; ch = c.peek() {
		c.i++
		n++
	}
	return n
}
