package canonjson

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrInvalidPointer is wrapped by every error that [ParsePointer] returns.
var ErrInvalidPointer = errors.New("canonjson: invalid JSON pointer")

// A Pointer is a parsed RFC 6901 JSON pointer naming a value to leave out of
// the canonical form, such as /meta/sent_at or /items/0/ts.
//
// A reference token applied to an object names the member with that decoded
// name; applied to an array it names the element at that index, written as
// RFC 6901 requires ("0" or digits without a leading zero; "-" names nothing).
// A pointer that names nothing in a given document is ignored.
//
// The zero Pointer is the root pointer "", which [ParsePointer] refuses;
// [Append] ignores it. A Pointer is immutable and safe for concurrent use.
type Pointer struct {
	s    string
	toks []token
}

type token struct {
	name  []byte // decoded: ~1 is '/', ~0 is '~'
	index int    // array index, or -1 when name is not one
}

// ParsePointer parses s as an RFC 6901 JSON pointer in its string form (not
// the URI fragment form). It refuses the root pointer "" (removing the whole
// document makes no sense), a pointer that does not start with '/', a '~' not
// followed by '0' or '1', and invalid UTF-8. Errors wrap [ErrInvalidPointer].
func ParsePointer(s string) (Pointer, error) {
	switch {
	case s == "":
		return Pointer{}, fmt.Errorf("%w %q: the root pointer cannot be ignored", ErrInvalidPointer, s)
	case s[0] != '/':
		return Pointer{}, fmt.Errorf("%w %q: must start with \"/\"", ErrInvalidPointer, s)
	case !utf8.ValidString(s):
		return Pointer{}, fmt.Errorf("%w %q: invalid UTF-8", ErrInvalidPointer, s)
	}
	toks := make([]token, 0, strings.Count(s, "/"))
	for raw := range strings.SplitSeq(s[1:], "/") {
		name := make([]byte, 0, len(raw))
		for i := 0; i < len(raw); i++ {
			c := raw[i]
			if c != '~' {
				name = append(name, c)
				continue
			}
			// One left-to-right pass is RFC 6901's "~1 then ~0" order:
			// "~01" decodes to "~1", never to "/".
			if i+1 == len(raw) || (raw[i+1] != '0' && raw[i+1] != '1') {
				return Pointer{}, fmt.Errorf("%w %q: '~' must be followed by '0' or '1'", ErrInvalidPointer, s)
			}
			if raw[i+1] == '0' {
				name = append(name, '~')
			} else {
				name = append(name, '/')
			}
			i++
		}
		toks = append(toks, token{name: name, index: arrayIndex(raw)})
	}
	return Pointer{s: s, toks: toks}, nil
}

// String returns the pointer as it was given to [ParsePointer].
func (p Pointer) String() string { return p.s }

// arrayIndex returns the array index that the raw token names, or -1. RFC 6901
// allows "0" or a non-zero digit followed by digits; indexes too large for any
// document Append accepts are -1 too.
func arrayIndex(raw string) int {
	if raw == "" || len(raw) > 10 || (raw[0] == '0' && len(raw) > 1) {
		return -1
	}
	n := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	if n > maxInput {
		return -1
	}
	return n
}
