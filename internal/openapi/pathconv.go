package openapi

import (
	"fmt"
	"strings"

	"github.com/idemgate/idemgate/internal/pathtmpl"
)

// convertedPath is an OpenAPI path template in idemgate's syntax.
type convertedPath struct {
	// Template is the idemgate template; it always parses with
	// [pathtmpl.Parse].
	Template string
	// Params maps the document's parameter names to the template's (which
	// must match [A-Za-z_][A-Za-z0-9_]*).
	Params map[string]string
	// Notes are what the conversion changed in meaning, one sentence each.
	Notes []string
}

// ConvertPath converts an OpenAPI path template ("/pets/{pet-id}") under a
// base path ("/v2", "" or "/" for none) into idemgate's template syntax
// ("/v2/pets/{pet_id}"):
//
//   - a parameter's name is reduced to letters, digits and "_" (others become
//     "_"; a leading digit gets a "_" before it), made unique in the template;
//   - a segment that mixes literal text and parameters ("{id}.json",
//     "{name}:publish") becomes one parameter: idemgate parameters are whole
//     segments, so the route matches any value there, and a note says so;
//   - literal bytes outside RFC 3986 pchar are percent-encoded, as a client
//     sends them; an empty segment ("//") is dropped with a note;
//   - "." and ".." segments, unbalanced braces and paths not starting with
//     "/" are errors.
//
// The result always parses with [pathtmpl.Parse].
func ConvertPath(base, path string) (convertedPath, error) {
	out := convertedPath{Params: map[string]string{}}
	if !strings.HasPrefix(path, "/") {
		return out, fmt.Errorf("path %q does not start with \"/\"", path)
	}
	base = strings.TrimRight(base, "/")
	if base != "" && !strings.HasPrefix(base, "/") {
		return out, fmt.Errorf("base path %q does not start with \"/\"", base)
	}
	var b strings.Builder
	used := map[string]bool{}
	convert := func(raw string, fromBase bool) error {
		if raw == "" {
			return nil
		}
		parts := strings.Split(raw[1:], "/")
		for i, seg := range parts {
			last := i == len(parts)-1
			switch {
			case seg == "" && last && !fromBase:
				b.WriteByte('/') // a trailing slash is significant
				continue
			case seg == "":
				if !last {
					out.Notes = append(out.Notes, fmt.Sprintf("empty segment in %q dropped", raw))
				}
				continue
			case seg == "." || seg == "..":
				return fmt.Errorf("path %q has a dot segment %q, which clients remove before sending", raw, seg)
			}
			names, literal, err := splitSegment(seg)
			if err != nil {
				return fmt.Errorf("path %q: segment %q: %v", raw, seg, err)
			}
			b.WriteByte('/')
			if len(names) == 0 {
				b.WriteString(escapeLiteral(seg))
				continue
			}
			if fromBase {
				return fmt.Errorf("base path %q has a parameter; give --base-path", raw)
			}
			name := uniqueName(paramIdent(names[0]), used)
			for _, n := range names {
				out.Params[n] = name
			}
			if literal || len(names) > 1 {
				out.Notes = append(out.Notes, fmt.Sprintf("segment %q mixes parameters and literal text; idemgate parameters are whole segments, so {%s} matches any value of it", seg, name))
			}
			b.WriteString("{" + name + "}")
		}
		return nil
	}
	if err := convert(base, true); err != nil {
		return out, err
	}
	if err := convert(path, false); err != nil {
		return out, err
	}
	out.Template = b.String()
	if out.Template == "" {
		out.Template = "/"
	}
	if _, err := pathtmpl.Parse(out.Template); err != nil {
		// Not reached for any input the fuzz target found; kept so a
		// conversion bug is an error line, never a config that fails later.
		return out, fmt.Errorf("path %q converts to %q, which idemgate refuses: %v", path, out.Template, err)
	}
	return out, nil
}

// splitSegment returns the parameter names in seg ("{a}.{b}" → a, b) and
// whether seg also holds literal text.
func splitSegment(seg string) (names []string, literal bool, err error) {
	for len(seg) > 0 {
		open := strings.IndexAny(seg, "{}")
		if open < 0 {
			return names, true, nil
		}
		if seg[open] == '}' {
			return nil, false, fmt.Errorf("unbalanced \"}\"")
		}
		if open > 0 {
			literal = true
		}
		end := strings.IndexAny(seg[open+1:], "{}")
		if end < 0 || seg[open+1+end] == '{' {
			return nil, false, fmt.Errorf("unbalanced \"{\"")
		}
		name := seg[open+1 : open+1+end]
		if name == "" {
			return nil, false, fmt.Errorf("empty parameter name")
		}
		names = append(names, name)
		seg = seg[open+1+end+1:]
	}
	return names, literal, nil
}

// paramIdent reduces a parameter name to [A-Za-z_][A-Za-z0-9_]*.
func paramIdent(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			b.WriteByte(c)
		case '0' <= c && c <= '9':
			if b.Len() == 0 {
				b.WriteByte('_')
			}
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// uniqueName returns name, or name_2, name_3... whichever used lacks, and
// marks it used.
func uniqueName(name string, used map[string]bool) string {
	n := name
	for i := 2; used[n]; i++ {
		n = fmt.Sprintf("%s_%d", name, i)
	}
	used[n] = true
	return n
}

// escapeLiteral percent-encodes the bytes of a literal segment that are not
// RFC 3986 pchar; a "%" that starts a valid escape is kept.
func escapeLiteral(seg string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case c == '%' && i+2 < len(seg) && isHex(seg[i+1]) && isHex(seg[i+2]):
			b.WriteByte(c)
		case isPchar(c):
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// isPchar is RFC 3986 pchar without "%" (unreserved, sub-delims, ":" and "@").
func isPchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0
}
