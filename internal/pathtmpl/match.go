package pathtmpl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrAmbiguousPath is wrapped by the error of [Table.Match] for a request
// path that upstreams may read as different endpoints ("%2F", "%5C", "\\",
// ";" or "%3B" read one way or the other) when one of those readings
// reaches a protected route. A proxy answers it with 400 request_invalid.
var ErrAmbiguousPath = errors.New("ambiguous request path")

// Case says how [Table.Match] compares literal template segments with a
// request's path segments. Parameter values always keep their case.
type Case uint8

const (
	// CaseInsensitive compares literal segments case-insensitively: ASCII
	// letters fold, and so do the encoded "ſ", "ı", "İ" and "K" (Kelvin),
	// whose simple case mappings are ASCII letters in the case-insensitive
	// routers of common frameworks. It is path_case: insensitive, the
	// default.
	CaseInsensitive Case = iota
	// CaseSensitive compares literal segments byte for byte after
	// normalization, for upstreams that route by case.
	CaseSensitive
)

// Values of config's path_case for [ParseCase].
const (
	caseInsensitiveName = "insensitive"
	caseSensitiveName   = "sensitive"
)

// ParseCase parses a path_case value: "insensitive" (or "", the default) or
// "sensitive".
func ParseCase(s string) (Case, error) {
	switch s {
	case "", caseInsensitiveName:
		return CaseInsensitive, nil
	case caseSensitiveName:
		return CaseSensitive, nil
	}
	return 0, fmt.Errorf("path case %q: want %q or %q", s, caseInsensitiveName, caseSensitiveName)
}

// String returns the path_case name of c.
func (c Case) String() string {
	if c == CaseSensitive {
		return caseSensitiveName
	}
	return caseInsensitiveName
}

// Options configure a [Table] built with [NewTableOptions].
type Options struct {
	// Case is how literal segments compare; the zero value is
	// CaseInsensitive.
	Case Case
}

// Match is the route that [Table.Match] found for a request.
type Match struct {
	// Index is the matching [Entry]'s Index.
	Index int
	// Protected is the matching [Entry]'s Protected.
	Protected bool
	// Template is the matching entry's template.
	Template *Template

	values []string // the normalized values of Template.params, in order
}

// Param returns the value of the parameter called name in the normalized
// path (see [Normalize]): case kept, unreserved characters decoded,
// ";parameters" cut. It reports false when the template has no such
// parameter.
func (m *Match) Param(name string) (string, bool) {
	if m.Template == nil {
		return "", false
	}
	for i, p := range m.Template.params {
		if p == name {
			return m.values[i], true
		}
	}
	return "", false
}

// normEntry is an entry with its literal segments folded as the table's
// Case says.
type normEntry struct {
	Entry
	segs []segment
}

// AmbiguousNormalized reports whether some request matches both a and b on
// its normalized path ([Table.Match]) with the same number of literal
// segments, when literal segments compare as c says, and returns one such
// path. For example /a/{x} and /A/{y} are ambiguous under CaseInsensitive,
// and so are /a and /a/. Routes with the same method and ambiguous
// templates must be refused; [NewTableOptions] does.
func AmbiguousNormalized(a, b *Template, c Case) (example string, ok bool) {
	if a.literals != b.literals {
		return "", false
	}
	return overlapSegments(a.norm, b.norm, func(x, y string) bool { return fold(x, c) == fold(y, c) }, true)
}

// foldSpecial are the percent-encoded UTF-8 characters outside ASCII whose
// simple upper- or lower-case mapping is an ASCII letter (ſ→S, ı→I, İ→i,
// K→k), as normalized paths spell them.
var foldSpecial = strings.NewReplacer(
	"%C5%BF", "s", // U+017F LATIN SMALL LETTER LONG S
	"%C4%B1", "i", // U+0131 LATIN SMALL LETTER DOTLESS I
	"%C4%B0", "i", // U+0130 LATIN CAPITAL LETTER I WITH DOT ABOVE
	"%E2%84%AA", "k", // U+212A KELVIN SIGN
)

// fold returns the normalized segment s in the form that literal segments
// are compared in under c.
func fold(s string, c Case) string {
	if c == CaseSensitive {
		return s
	}
	if strings.IndexByte(s, '%') >= 0 {
		s = foldSpecial.Replace(s)
	}
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return asciiLower(s)
		}
	}
	return s
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// buildNorm fills in the normalized index of t from entries, which
// NewTableOptions has checked for empty methods and nil templates.
func (t *Table) buildNorm(entries []Entry, o Options) []error {
	t.fold = o.Case
	t.norm = make(map[string][][]normEntry)
	var errs []error
	for i, e := range entries {
		if e.Method == "" || e.Template == nil {
			continue
		}
		m := strings.ToUpper(e.Method)
		for _, x := range entries[:i] {
			if x.Template == nil || strings.ToUpper(x.Method) != m {
				continue
			}
			if ex, ok := AmbiguousNormalized(x.Template, e.Template, o.Case); ok {
				errs = append(errs, fmt.Errorf("%w: %s %s (index %d) and %s %s (index %d) both match %s %s (path_case %s)",
					ErrAmbiguous, x.Method, x.Template, x.Index, e.Method, e.Template, e.Index, m, ex, o.Case))
			}
		}
		ne := normEntry{Entry: e, segs: make([]segment, len(e.Template.norm))}
		for j, s := range e.Template.norm {
			if s.param == "" {
				s.lit = fold(s.lit, o.Case)
			}
			ne.segs[j] = s
		}
		t.protected = t.protected || e.Protected
		byN := t.norm[m]
		n := len(ne.segs)
		for len(byN) <= n {
			byN = append(byN, nil)
		}
		byN[n] = append(byN[n], ne)
		t.norm[m] = byN
	}
	for _, byN := range t.norm {
		for _, group := range byN {
			slices.SortStableFunc(group, func(a, b normEntry) int {
				return b.Template.literals - a.Template.literals
			})
		}
	}
	return errs
}

// Match finds the route for a request on its normalized path, as DESIGN.md's
// Path matching says: method compared case-insensitively (HEAD is still not
// GET), escapedPath (r.URL.EscapedPath(), the path as sent, without query)
// normalized by [Normalize], literal segments compared as the table's
// [Case] says, and, when several entries match, the one with the most
// literal segments.
//
// A path with "%2F", "%5C", "\\", ";" or "%3B" is also read each other way
// an upstream may read it: encoded slashes and backslashes as separators,
// ";parameters" kept, "%3B" as ";". When the readings disagree — another
// route, no route, or other parameter values — and any of them matches a
// protected entry, Match returns an error wrapping [ErrAmbiguousPath].
// When a reading cannot be normalized (an invalid percent-encoding, a ".."
// above the root) and the table has a protected entry, it returns an error
// wrapping [ErrInvalidPath]. A proxy answers both with 400 request_invalid
// and forwards nothing. On a table without protected entries Match never
// fails: such a path matches as [Normalize] reads it, or not at all.
//
// Otherwise it returns the match as [Normalize]'s reading finds it, and ok
// false when no entry matches. A path that does not start with "/" (such
// as "*") matches nothing and is no error.
func (t *Table) Match(method, escapedPath string) (m Match, ok bool, err error) {
	if t == nil || escapedPath == "" || escapedPath[0] != '/' {
		return Match{}, false, nil
	}
	byN := t.norm[strings.ToUpper(method)]
	// Segments on the stack: they are only compared and copied from.
	var buf [16]string
	segs, err := segments(buf[:0], escapedPath, readPrimary)
	if err != nil {
		if t.protected {
			return Match{}, false, err
		}
		return Match{}, false, nil
	}
	m, ok = t.lookupNorm(byN, segs)
	flags := readingsOf(escapedPath)
	if flags == 0 {
		return m, ok, nil
	}
	disagree, protected := false, ok && m.Protected
	for rd := reading(1); rd <= readAll; rd++ {
		if rd&^flags != 0 || rd&readKeepParams != 0 && rd&readSemi3B != 0 {
			continue // a flag the path gives no reason for; or "%3B" cut but ";" kept
		}
		segs, err := segments(buf[:0], escapedPath, rd)
		if err != nil {
			if t.protected {
				return Match{}, false, err
			}
			continue
		}
		m2, ok2 := t.lookupNorm(byN, segs)
		if ok2 != ok || ok && (m2.Index != m.Index || !slices.Equal(m2.values, m.values)) {
			disagree = true
		}
		protected = protected || ok2 && m2.Protected
	}
	if disagree && protected {
		return Match{}, false, fmt.Errorf("%w %q: upstreams may read it as different endpoints, one of them protected",
			ErrAmbiguousPath, truncate(escapedPath))
	}
	return m, ok, nil
}

// readingsOf returns the reading flags that p gives reason to try.
func readingsOf(p string) reading {
	var rd reading
	if strings.IndexByte(p, ';') >= 0 {
		rd |= readKeepParams
	}
	if strings.IndexByte(p, '\\') >= 0 {
		rd |= readSlash5C
	}
	for i := 0; i+2 < len(p); i++ {
		if p[i] != '%' {
			continue
		}
		switch x, y := p[i+1], p[i+2]|0x20; {
		case x == '2' && y == 'f':
			rd |= readSlash2F
		case x == '5' && y == 'c':
			rd |= readSlash5C
		case x == '3' && y == 'b':
			rd |= readSemi3B
		}
	}
	return rd
}

// lookupNorm returns the most literal entry of byN matching the normalized
// segments segs.
func (t *Table) lookupNorm(byN [][]normEntry, segs []string) (Match, bool) {
	n := len(segs)
	if n >= len(byN) || len(byN[n]) == 0 {
		return Match{}, false
	}
next:
	for _, e := range byN[n] {
		for i, s := range e.segs {
			if s.param == "" && !t.litEqual(s.lit, segs[i]) {
				continue next
			}
		}
		m := Match{Index: e.Index, Protected: e.Protected, Template: e.Template}
		for i, s := range e.segs {
			if s.param != "" {
				m.values = append(m.values, segs[i])
			}
		}
		return m, true
	}
	return Match{}, false
}

// litEqual reports whether the normalized segment seg equals lit, a
// literal folded as the table's Case says. It allocates only for a segment
// with a percent-encoding under CaseInsensitive.
func (t *Table) litEqual(lit, seg string) bool {
	if t.fold == CaseSensitive {
		return lit == seg
	}
	if strings.IndexByte(seg, '%') >= 0 {
		return lit == fold(seg, CaseInsensitive)
	}
	if len(lit) != len(seg) {
		return false
	}
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lit[i] {
			return false
		}
	}
	return true
}

func truncate(p string) string {
	const max = 200
	if len(p) > max {
		return p[:max] + "..."
	}
	return p
}
