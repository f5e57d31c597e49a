package storage

import "bytes"

// What PostgreSQL's text cannot hold, refused on both databases (see
// ErrInvalidText).

// JSONHoldsNUL reports whether the JSON text b holds a NUL character: a raw
// one (invalid JSON anyway) or a \u0000 escape, that is one whose backslash
// is not itself escaped (`\\u0000` is a backslash followed by "u0000").
func JSONHoldsNUL(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(`\u0000`))
		if i < 0 {
			return false
		}
		i += off
		backslashes := 1 // the escape's own
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			backslashes++
		}
		if backslashes%2 == 1 {
			return true
		}
		off = i + 1
	}
}
