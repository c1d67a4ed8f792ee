package pathtmpl

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidPath is wrapped by the errors of [Normalize], [NormalizeRFC3986]
// and [Table.Match] for a path that cannot be normalized: one that does not
// start with "/", has an invalid percent-encoding, or has a dot-segment that
// climbs above the root. A proxy answers it with 400 request_invalid.
var ErrInvalidPath = errors.New("invalid request path")

// Normalize returns the form of rawPath, a request's escaped path without
// query (r.URL.EscapedPath()), that routes are matched on and session ids are
// taken from (DESIGN.md, Path matching):
//
//   - a percent-encoding of a character that is allowed unencoded in a path
//     segment and has no structural meaning is decoded: the RFC 3986
//     unreserved characters (%63 → c, %2E → .), as RFC 3986 §6.2.2.2 says,
//     and also the sub-delimiters but ";", ":", "@", "[" and "]" (%3A → :),
//     which upstream frameworks decode before routing; every other percent-encoding
//     is kept with its hex in upper case (%2f → %2F), and a byte that may
//     not appear unencoded in a path (a space, "\", a non-ASCII byte) is
//     encoded (\ → %5C);
//   - empty segments are dropped ("//" → "/"), so a trailing slash is
//     ignored;
//   - each segment is cut at its first ";" (";parameters", as Java servlet
//     containers read them), and dropped if that leaves it empty;
//   - the dot-segments "." and ".." are removed (RFC 3986 §5.2.4), after the
//     cuts above, so "..;x" is "..": a ".." with nothing left to remove is an
//     error.
//
// Case is kept. "%2F" and "%5C" are kept as they are: they are not
// separators under this reading (see [Table.Match] for the others). The
// result starts with "/", ends with "/" only when it is "/", and
// Normalize(result) == result. Errors wrap [ErrInvalidPath].
func Normalize(rawPath string) (string, error) {
	return normalize(rawPath, readPrimary)
}

// NormalizeRFC3986 returns rawPath, a request's escaped path without query,
// normalized as RFC 3986 §6.2.2 says and nothing more, for fingerprints:
// percent-encodings of unreserved characters decoded, every other
// percent-encoding's hex upper-cased, bytes that may not appear unencoded in
// a path encoded, and dot-segments removed (§5.2.4; a ".." above the root is
// an error). Case, empty segments, trailing slashes and ";" are kept, so two
// spellings that only [Normalize] folds stay two requests. Errors wrap
// [ErrInvalidPath].
func NormalizeRFC3986(rawPath string) (string, error) {
	if rawPath == "" || rawPath[0] != '/' {
		return "", pathError(rawPath, "must start with \"/\"")
	}
	enc, err := encode(rawPath, isUnreserved)
	if err != nil {
		return "", err
	}
	if !hasDotSegment(enc) {
		return enc, nil // what the loop below would rebuild, without allocating
	}
	segs := strings.Split(enc[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "") // "/a/." is "/a/"
			}
		case "..":
			if len(out) == 0 {
				return "", pathError(rawPath, "\"..\" climbs above the root")
			}
			out = out[:len(out)-1]
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/"), nil
}

// hasDotSegment reports whether the path p has a "." or ".." segment.
func hasDotSegment(p string) bool {
	for s := range strings.SplitSeq(p, "/") {
		if s == "." || s == ".." {
			return true
		}
	}
	return false
}

// reading says how a raw path is split into segments: one of the ways an
// upstream may read it.
type reading uint8

const (
	// readSlash2F makes "%2F" a separator, as upstreams that decode the
	// path before routing do.
	readSlash2F reading = 1 << iota
	// readSlash5C makes "%5C" (and a raw "\") a separator, as some
	// Windows-minded servers do.
	readSlash5C
	// readKeepParams keeps ";parameters" as part of their segment, as
	// upstreams that know no matrix parameters do.
	readKeepParams
	// readSemi3B makes "%3B" start parameters like ";", as upstreams that
	// decode the path before cutting them do.
	readSemi3B

	// readPrimary is the reading that [Normalize] returns: encoded slashes
	// are data and ";parameters" are cut.
	readPrimary reading = 0
	// readAll is every flag; the readings are 0 to readAll.
	readAll = readSlash2F | readSlash5C | readKeepParams | readSemi3B
)

// normalize normalizes rawPath under reading rd (see [Normalize]).
func normalize(rawPath string, rd reading) (string, error) {
	segs, err := segments(nil, rawPath, rd)
	if err != nil {
		return "", err
	}
	return "/" + strings.Join(segs, "/"), nil
}

// segments appends the normalized segments of rawPath under reading rd,
// without empty ones (the root "/" has none), to dst[:0].
func segments(dst []string, rawPath string, rd reading) ([]string, error) {
	if rawPath == "" || rawPath[0] != '/' {
		return nil, pathError(rawPath, "must start with \"/\"")
	}
	enc, err := encode(rawPath, isMatchDecoded)
	if err != nil {
		return nil, err
	}
	if rd&readSlash2F != 0 {
		// Every "%" in enc starts a well-formed, upper-case escape, so
		// these replace whole escapes only.
		enc = strings.ReplaceAll(enc, "%2F", "/")
	}
	if rd&readSlash5C != 0 {
		enc = strings.ReplaceAll(enc, "%5C", "/")
	}
	if rd&readSemi3B != 0 {
		enc = strings.ReplaceAll(enc, "%3B", ";")
	}
	out := dst[:0]
	if cap(out) == 0 {
		out = make([]string, 0, strings.Count(enc, "/"))
	}
	for s := range strings.SplitSeq(enc[1:], "/") {
		if rd&readKeepParams == 0 {
			if i := strings.IndexByte(s, ';'); i >= 0 {
				s = s[:i]
			}
		}
		switch s {
		case "", ".":
		case "..":
			if len(out) == 0 {
				return nil, pathError(rawPath, "\"..\" climbs above the root")
			}
			out = out[:len(out)-1]
		default:
			out = append(out, s)
		}
	}
	return out, nil
}

// encode rewrites p byte by byte: a percent-encoding of a byte for which
// decode reports true is decoded, every other one is kept with upper-case
// hex, a byte that is not a pchar (nor "/") is percent-encoded, and
// everything else is kept. It returns p itself when nothing changes.
func encode(p string, decode func(byte) bool) (string, error) {
	var b []byte // nil until the first change
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", pathError(p, "\"%\" must start a two-digit hex escape")
			}
			d := unhex(p[i+1])<<4 | unhex(p[i+2])
			if decode(d) {
				if b == nil {
					b = append(make([]byte, 0, len(p)), p[:i]...)
				}
				b = append(b, d)
			} else {
				esc := [3]byte{'%', upperHex[d>>4], upperHex[d&15]}
				if b == nil && (p[i+1] != esc[1] || p[i+2] != esc[2]) {
					b = append(make([]byte, 0, len(p)), p[:i]...)
				}
				if b != nil {
					b = append(b, esc[:]...)
				}
			}
			i += 2
		case c == '/' || isPchar(c):
			if b != nil {
				b = append(b, c)
			}
		default:
			if b == nil {
				b = append(make([]byte, 0, len(p)+2), p[:i]...)
			}
			b = append(b, '%', upperHex[c>>4], upperHex[c&15])
		}
	}
	if b == nil {
		return p, nil
	}
	return string(b), nil
}

const upperHex = "0123456789ABCDEF"

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// isUnreserved reports whether c is an RFC 3986 unreserved character.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// isMatchDecoded reports whether a percent-encoding of c is decoded for
// matching: a pchar without structural meaning in a path, that is every
// pchar but ";" (which starts parameters).
func isMatchDecoded(c byte) bool {
	return isPchar(c) && c != ';'
}

// pathError returns an error wrapping ErrInvalidPath.
func pathError(p, why string) error {
	return fmt.Errorf("%w %q: %s", ErrInvalidPath, truncate(p), why)
}
