package pathtmpl

import (
	"fmt"
	"strings"
)

// escapeSegment returns s written as one whole path segment: every byte
// outside RFC 3986's ALPHA, DIGIT, "-", "_" and "~" is percent-encoded
// (upper-case hex), "." included, so that no value ever reads as a dot
// segment, a separator (/, \, ;), a query or a fragment, or an escape of
// its own. Its bytes are taken as they are: a value that should be decoded
// first (a request path's escaped segment) is the caller's to decode.
func escapeSegment(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !isSegmentSafe(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isSegmentSafe(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}

// isSegmentSafe reports whether c stays itself in escapeSegment: ALPHA,
// DIGIT, "-", "_" or "~" (RFC 3986 unreserved, without ".").
func isSegmentSafe(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~'
}

// Fill writes the template as an escaped path with each parameter's
// segment replaced by escapeSegment of its value, which value returns
// (false: the template names a parameter value does not know). A
// parameter's value must not be empty (an empty segment would join its
// neighbours, "/a//b") nor "." or ".." (escaped as %2E, but an upstream
// that decodes before it removes dot segments reads "/a/%2E%2E/b" as "/b"):
// either would name another resource.
func (t *Template) Fill(value func(name string) (string, bool)) (string, error) {
	var b strings.Builder
	b.Grow(len(t.raw) + 32)
	for _, s := range t.segs {
		b.WriteByte('/')
		if s.param == "" {
			b.WriteString(s.lit)
			continue
		}
		v, ok := value(s.param)
		switch {
		case !ok:
			return "", fmt.Errorf("pathtmpl: %s: no value for {%s}", t.raw, s.param)
		case v == "":
			return "", fmt.Errorf("pathtmpl: %s: the value of {%s} is empty", t.raw, s.param)
		case v == "." || v == "..":
			return "", fmt.Errorf("pathtmpl: %s: the value of {%s} is a dot segment", t.raw, s.param)
		}
		b.WriteString(escapeSegment(v))
	}
	return b.String(), nil
}
