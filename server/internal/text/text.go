// Package text holds the string helpers that several packages need the same
// way: cutting client-supplied text to a length before it goes into an error
// message or a log, and showing a URL without its credentials.
package text

import (
	"errors"
	"fmt"
	"net/url"
	"unicode/utf8"
)

// Truncate returns s when it has at most n bytes; otherwise its first n
// bytes, cut back to the last whole UTF-8 character, followed by "…". Error
// messages quote what a client sent through it, so a long or hostile value
// cannot make them long, and a cut never leaves half a character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// RedactURL is a URL as logs and the console show it: without user info,
// query string and fragment, where operators put credentials
// (https://user:password@…, ?token=…).
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)" // the parser's error would quote it whole
	}
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// URLError is err, returned by parsing the URL raw, as it may be shown: the
// URL as RedactURL shows it, then the parser's reason. A *url.Error quotes
// the URL whole, password and query included, so only its cause is kept.
func URLError(raw string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("%s: %w", RedactURL(raw), err)
}
