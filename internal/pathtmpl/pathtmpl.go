// Package pathtmpl parses and matches idemgate's route path templates, such as
// /ucp/v1/carts/{id}.
//
// A template is matched against a request's escaped path (r.URL.EscapedPath()),
// split at "/":
//
//   - a literal segment matches byte for byte: case is kept and nothing is
//     unescaped, so "%2F" and "%2f" are different segments;
//   - a parameter segment {name} matches exactly one non-empty segment;
//   - a trailing slash is significant: /a/ does not match /a, nor the reverse.
//
// When several templates match a path, the one with more literal segments
// wins (see [Table]). Two templates that could match the same path with the
// same number of literal segments are [Ambiguous]; a [Table] refuses them.
//
// That byte-exact matching is [Template.Match], [Template.Param] and
// [Table.Lookup]. [Table.Match] matches instead on the normalized path of
// DESIGN.md's Path matching ([Normalize]), folds case as [Options] says,
// and refuses spellings that upstreams may read differently; it is the one
// a proxy uses.
//
// Templates and tables are immutable after construction and safe for
// concurrent use. Byte-exact matching never allocates.
package pathtmpl

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is wrapped by every error that [Parse] returns.
var ErrInvalid = errors.New("invalid path template")

// Template is a parsed path template. The zero value is not usable; obtain
// templates from [Parse] or [MustParse].
type Template struct {
	raw      string
	segs     []segment
	params   []string
	literals int
	// norm are the segments that [Table.Match] compares with a normalized
	// path: literals normalized as [Normalize] does, without the trailing
	// slash, which normalization drops.
	norm []segment
}

// segment is one "/"-separated part of a template.
type segment struct {
	lit   string // the literal bytes; empty for a parameter or a trailing slash
	param string // the parameter's name; empty for a literal
}

// Parse parses a path template.
//
// The template must start with "/". It is split at "/" into segments; each
// segment is either a parameter, written {name} with name matching
// [A-Za-z_][A-Za-z0-9_]* and unique within the template, or a literal made of
// bytes valid in an escaped URL path (RFC 3986 pchar, plus "[" and "]" as Go's
// net/url accepts them; "%" must start a two-digit hex escape). Braces are
// allowed only around a whole parameter segment. Empty segments are refused
// except for a final trailing slash ("/" and "/a/" are valid, "/a//b" is
// not), and so are the dot segments "." and "..", which RFC 3986 §5.2.4
// clients remove before sending. So are literals that no request could
// reach unambiguously (see [Normalize] and [Table.Match]): one with a ";"
// (requests have their ";parameters" cut), one with "%2F", "%5C" or "%3B"
// (which some upstreams read as "/", "/" and ";"), and one that is a
// dot-segment once decoded ("%2E"). Errors wrap [ErrInvalid].
func Parse(s string) (*Template, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: empty; want a path starting with \"/\"", ErrInvalid)
	}
	if s[0] != '/' {
		return nil, fmt.Errorf("%w %q: must start with \"/\"", ErrInvalid, s)
	}
	parts := strings.Split(s[1:], "/")
	t := &Template{raw: s, segs: make([]segment, 0, len(parts))}
	for i, p := range parts {
		last := i == len(parts)-1
		switch {
		case p == "" && last:
			t.segs = append(t.segs, segment{}) // "/" or a trailing slash
		case p == "":
			return nil, fmt.Errorf("%w %q: empty segment %d (\"//\")", ErrInvalid, s, i+1)
		case p[0] == '{':
			name, err := paramName(p)
			if err != nil {
				return nil, fmt.Errorf("%w %q: segment %q: %v", ErrInvalid, s, p, err)
			}
			for _, q := range t.params {
				if q == name {
					return nil, fmt.Errorf("%w %q: parameter {%s} appears twice", ErrInvalid, s, name)
				}
			}
			t.params = append(t.params, name)
			t.segs = append(t.segs, segment{param: name})
			t.norm = append(t.norm, segment{param: name})
		default:
			if err := checkLiteral(p); err != nil {
				return nil, fmt.Errorf("%w %q: segment %q: %v", ErrInvalid, s, p, err)
			}
			norm, err := normalizeLiteral(p)
			if err != nil {
				return nil, fmt.Errorf("%w %q: segment %q: %v", ErrInvalid, s, p, err)
			}
			t.segs = append(t.segs, segment{lit: p})
			t.norm = append(t.norm, segment{lit: norm})
			t.literals++
		}
	}
	return t, nil
}

// MustParse is like [Parse] but panics on error. It is meant for tests and
// package-level variables holding constant templates.
func MustParse(s string) *Template {
	t, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return t
}

// paramName returns the name of a "{name}" segment.
func paramName(p string) (string, error) {
	if len(p) < 2 || p[len(p)-1] != '}' {
		return "", errors.New("a parameter must be a whole segment, like {id}")
	}
	name := p[1 : len(p)-1]
	if name == "" {
		return "", errors.New("empty parameter name")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9'
		if !ok {
			return "", fmt.Errorf("parameter name %q must match [A-Za-z_][A-Za-z0-9_]*", name)
		}
	}
	return name, nil
}

// normalizeLiteral returns the literal segment p as [Normalize] would write
// it, refusing what no request could reach unambiguously.
func normalizeLiteral(p string) (string, error) {
	if strings.IndexByte(p, ';') >= 0 {
		return "", errors.New("\";\" starts parameters, which requests have cut before matching")
	}
	norm, err := encode(p, isMatchDecoded)
	if err != nil {
		return "", err
	}
	for _, esc := range []string{"%2F", "%5C", "%3B"} {
		if strings.Contains(norm, esc) {
			return "", fmt.Errorf("%q is read as a separator by some upstreams; such requests are refused as ambiguous", esc)
		}
	}
	if norm == "." || norm == ".." {
		return "", errors.New("an encoded dot segment is removed before matching and can never match")
	}
	return norm, nil
}

// checkLiteral reports whether p is a valid literal segment.
func checkLiteral(p string) error {
	if p == "." || p == ".." {
		return errors.New("dot segments are removed by clients and can never match")
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '{' || c == '}':
			return errors.New("braces are allowed only around a whole parameter segment, like {id}")
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return errors.New("\"%\" must start a two-digit hex escape, like %2F")
			}
			i += 2
		case !isPchar(c):
			return fmt.Errorf("byte %q is not allowed in an escaped path", c)
		}
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// isPchar reports whether c may appear unescaped in a path segment: RFC 3986
// unreserved, sub-delims, ":" and "@", plus "[" and "]", which Go's net/url
// leaves in an escaped path.
func isPchar(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	switch c {
	case '-', '.', '_', '~', // unreserved
		'!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', // sub-delims
		':', '@', '[', ']':
		return true
	}
	return false
}

// String returns the template as it was parsed.
func (t *Template) String() string { return t.raw }

// Params returns the parameter names in the order they appear. The slice is a
// copy; callers may modify it.
func (t *Template) Params() []string {
	return append([]string(nil), t.params...)
}

// HasParam reports whether the template has a parameter called name.
func (t *Template) HasParam(name string) bool {
	return t.paramIndex(name) >= 0
}

// Literals returns the number of literal segments, the measure by which the
// most specific template wins. A trailing slash does not count.
func (t *Template) Literals() int { return t.literals }

// Match reports whether escapedPath, a request's escaped path without query,
// matches the template. It does not allocate.
func (t *Template) Match(escapedPath string) bool {
	_, ok := t.match(escapedPath, -1)
	return ok
}

// Param returns the value of the parameter called name in escapedPath: the raw
// segment exactly as sent, still escaped. It reports false when the path does
// not match the template or the template has no such parameter. It does not
// allocate.
func (t *Template) Param(escapedPath, name string) (string, bool) {
	i := t.paramIndex(name)
	if i < 0 {
		return "", false
	}
	return t.match(escapedPath, i)
}

// paramIndex returns the index of the segment holding parameter name, or -1.
func (t *Template) paramIndex(name string) int {
	if name == "" {
		return -1
	}
	for i, s := range t.segs {
		if s.param == name {
			return i
		}
	}
	return -1
}

// match walks p segment by segment without allocating. It reports whether p
// matches and returns the value of segment want (when want >= 0).
func (t *Template) match(p string, want int) (string, bool) {
	if len(p) == 0 || p[0] != '/' {
		return "", false
	}
	p = p[1:]
	last := len(t.segs) - 1
	var val string
	for i, s := range t.segs {
		var seg string
		j := strings.IndexByte(p, '/')
		if i == last {
			if j >= 0 {
				return "", false // the path has more segments
			}
			seg = p
		} else {
			if j < 0 {
				return "", false // the path has fewer segments
			}
			seg, p = p[:j], p[j+1:]
		}
		if s.param != "" {
			if seg == "" {
				return "", false
			}
		} else if seg != s.lit {
			return "", false
		}
		if i == want {
			val = seg
		}
	}
	return val, true
}

// Overlap reports whether some path matches both a and b, whatever their
// literal counts, and returns one such path. In the returned path a segment
// that is a parameter in both templates is written as a's {name}, which both
// templates match as a value.
func Overlap(a, b *Template) (string, bool) {
	return overlapSegments(a.segs, b.segs, func(x, y string) bool { return x == y }, false)
}

// overlapSegments returns a path that matches both xs and ys, segment by
// segment, if there is one: two literals must be the same (as same says),
// a literal against a parameter is written as it is (an empty one, a
// trailing slash, only when emptyParam: in segs a trailing slash never
// matches a parameter), and a parameter in both is written as xs's {name}.
func overlapSegments(xs, ys []segment, same func(x, y string) bool, emptyParam bool) (string, bool) {
	if len(xs) != len(ys) {
		return "", false
	}
	var sb strings.Builder
	for i, x := range xs {
		y := ys[i]
		sb.WriteByte('/')
		switch {
		case x.param == "" && y.param == "":
			if !same(x.lit, y.lit) {
				return "", false
			}
			sb.WriteString(x.lit)
		case x.param == "" || y.param == "":
			lit := x.lit // the literal's
			if x.param != "" {
				lit = y.lit
			}
			if lit == "" && !emptyParam {
				return "", false
			}
			sb.WriteString(lit)
		default:
			sb.WriteString("{" + x.param + "}")
		}
	}
	if len(xs) == 0 {
		sb.WriteByte('/')
	}
	return sb.String(), true
}

// Ambiguous reports whether some path matches both a and b with the same
// number of literal segments, so that neither is more specific: for example
// /a/{x} and /{y}/b (both match /a/b), or /a/{x} and /a/{y}. Routes with the
// same method and ambiguous templates must be refused.
func Ambiguous(a, b *Template) bool {
	if a.literals != b.literals {
		return false
	}
	_, ok := Overlap(a, b)
	return ok
}
