package identity

import (
	"errors"
	"fmt"
	"net/textproto"
	"strings"
)

// ErrUnreadable is the cause of an [Unreadable] result: an identity source
// that is present but cannot be read as one value (DESIGN.md, "Hardening":
// an unreadable source never silently leaves a smaller identity behind).
var ErrUnreadable = errors.New("identity source unreadable")

// cookieValues calls fn with the value of every cookie named name in the
// Cookie header lines, in order (lines in order, pairs in order within a
// line; duplicates of the name each count). It is the one cookie reader of
// the identity (headers, cookies and the JWT's cookie, for requests and
// admin look-ups alike).
//
// Unlike net/http's parser, which silently drops a cookie whose value holds
// a byte RFC 6265 does not allow (quotes inside, backslashes, spaces,
// commas, non-ASCII, non-UTF-8) or every cookie of a request with more than
// 3000 of them, it reads a value byte for byte as the upstream frameworks
// that accept such values do (Express, PHP, Rack): a line is split at every
// ";", each pair is trimmed of white space at both ends, cut at its first
// "=", and its name trimmed again; the value is the rest, as sent, with one
// pair of surrounding double quotes removed. For every cookie net/http
// reads, the value is the one net/http reads, so identities (and store
// keys) of such cookies do not change.
//
// Two spellings are refused (an error wrapping [ErrUnreadable]) because
// upstreams disagree about where the value ends or whose it is:
//
//   - a value that starts with a double quote but is not one quoted string
//     without quotes or backslashes inside ("a;b" split at its ";", "a\"b",
//     an unterminated quote): quote-aware parsers (Python's http.cookies)
//     read past the ";" or unescape, splitting ones stop at the ";";
//   - a pair whose name is not name but folds to it (case, percent-encoding,
//     "." or " " for "_"): PHP and ASP.NET read "SID", "%73id" or "s.id" as
//     the cookie "sid".
//
// The work is linear in the length of lines, with no allocation for
// values (they are substrings of lines).
func cookieValues(lines []string, name string, fn func(string)) error {
	for _, line := range lines {
		for line != "" {
			var pair string
			pair, line, _ = strings.Cut(line, ";")
			pair = textproto.TrimString(pair)
			if pair == "" {
				continue
			}
			n, v, _ := strings.Cut(pair, "=")
			n = textproto.TrimString(n)
			if n != name {
				if foldsTo(n, name) {
					return unreadable("cookie %s is also sent under another spelling of its name", name)
				}
				continue
			}
			if v != "" && v[0] == '"' {
				if len(v) < 2 || v[len(v)-1] != '"' || strings.ContainsAny(v[1:len(v)-1], "\"\\") {
					return unreadable("cookie %s has a quoted value that does not end where it should", name)
				}
				v = v[1 : len(v)-1]
			}
			fn(v)
		}
	}
	return nil
}

// foldsTo reports whether the cookie name n, read as a lenient framework
// reads names (percent-decoded where that is valid, any case, "." and " "
// as "_"), is name. It allocates nothing.
func foldsTo(n, name string) bool {
	j := 0
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c == '%' && i+2 < len(n) && isHex(n[i+1]) && isHex(n[i+2]) {
			c = unhex(n[i+1])<<4 | unhex(n[i+2])
			i += 2
		}
		if j == len(name) || foldByte(c) != foldByte(name[j]) {
			return false
		}
		j++
	}
	return j == len(name)
}

func foldByte(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '.' || c == ' ':
		return '_'
	}
	return c
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

func unreadable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnreadable, fmt.Sprintf(format, args...))
}
