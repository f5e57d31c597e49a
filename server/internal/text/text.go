// Package text holds the string helpers that several packages need the same
// way: cutting client-supplied text to a length before it goes into an error
// message or a log, and showing a URL without its credentials.
package text

import (
	"errors"
	"net/url"
	"strings"
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

// RedactURL is a URL as logs, errors and the console show it: without user
// info, query string and fragment, where operators put credentials
// (https://user:password@…, ?token=…). Whatever raw holds, no part of its
// user info is shown: a URL that does not parse, or whose user info a
// parser cannot have found whole, is shown as "(unparsable URL)" (see
// UserInfoMisread).
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || misread(raw, u) {
		return "(unparsable URL)" // the parser's error, or its reading, would show a part of it
	}
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// UserInfoMisread reports a URL that parses, but whose user info may hold
// more than the parser took for it, so that a part of a password would be
// read (and shown) as the host, the port, the path or the query:
//   - an @ outside the authority: a password with an unencoded / ? or #,
//     which ends the authority early (redis://:pa/ss@host reads as the host
//     ":pa" and the path "/ss@host"), or a URL with no authority at all;
//   - a port with no host, or a host holding a colon outside brackets: a
//     password with nothing after it (redis://:secret or
//     redis://:h:1/x, its @host forgotten).
func UserInfoMisread(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && misread(raw, u)
}

// misread is UserInfoMisread of u, parsed from raw.
func misread(raw string, u *url.URL) bool {
	if h := u.Hostname(); u.Host != "" && h == "" || strings.Contains(h, ":") && !strings.HasPrefix(u.Host, "[") {
		return true
	}
	// The authority is what follows "scheme://" up to the first / ? or #,
	// as the parser cuts it.
	rest := raw[len(u.Scheme):]
	if u.Scheme != "" {
		rest = rest[1:] // the colon
	}
	end := len(raw) - len(rest) // where the authority ends: none yet
	if after, ok := strings.CutPrefix(rest, "//"); ok {
		authority := after
		if i := strings.IndexAny(authority, "/?#"); i >= 0 {
			authority = authority[:i]
		}
		end += 2 + len(authority)
	}
	return strings.LastIndexByte(raw, '@') >= end
}

// URLError is err, returned by parsing the URL raw, as it may be shown: the
// URL as RedactURL shows it, then the parser's reason in words of its own,
// without the part of the URL a parser's message quotes (net/url's and
// go-redis's quote the port, the host, the path, the options or the URL
// whole, any of which may hold a piece of a password: `invalid port ":pa"
// after host`). errors.Is and errors.As still find err.
func URLError(raw string, err error) error {
	return &urlError{shown: RedactURL(raw) + ": " + reason(err), err: err}
}

type urlError struct {
	shown string
	err   error
}

func (e *urlError) Error() string { return e.shown }
func (e *urlError) Unwrap() error { return e.err }

// reason is the kind of a URL parser's error without what it quotes: its
// message up to the first quote or colon after the package's prefix
// ("invalid port", "redis: invalid database number").
func reason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := strings.TrimPrefix(err.Error(), "net/url: ")
	prefix := ""
	if rest, ok := strings.CutPrefix(msg, "redis: "); ok {
		prefix, msg = "redis: ", rest
	}
	if i := strings.IndexAny(msg, "\":"); i >= 0 {
		msg = msg[:i]
	}
	return prefix + strings.TrimSpace(msg)
}
