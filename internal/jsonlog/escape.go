package jsonlog

import "unicode/utf8"

// appendEscaped appends s escaped for a JSON string, without the quotes,
// as slog's appendEscapedJSONString (encoding/json's with escapeHTML off):
// ", \ and the control characters escaped (\n, \r, \t by name, the others
// as \u00XX), each byte of invalid UTF-8 as \ufffd, U+2028 and U+2029 as
// \u2028 and \u2029; <, > and & as they are.
func appendEscaped(buf []byte, s string) []byte {
	// The usual string (a key, a path, a host, a header's value) needs
	// nothing.
	if plain(s) {
		return append(buf, s...)
	}
	i := 0
	start := 0
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if safe[b] {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\')
			switch b {
			case '\\', '"':
				buf = append(buf, b)
			case '\n':
				buf = append(buf, 'n')
			case '\r':
				buf = append(buf, 'r')
			case '\t':
				buf = append(buf, 't')
			default:
				buf = append(buf, 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(buf, s[start:]...)
}

// plain reports whether no byte of s needs escaping or decoding, eight
// at a time: the last eight overlap those before, a string of four to
// seven is read as its first and last four.
func plain(s string) bool {
	n := len(s)
	switch {
	case n >= 8:
		for i := 0; i+8 < n; i += 8 {
			if !plain8(load8(s[i:])) {
				return false
			}
		}
		return plain8(load8(s[n-8:]))
	case n >= 4:
		return plain8(uint64(load4(s)) | uint64(load4(s[n-4:]))<<32)
	}
	for i := range n {
		if s[i] >= utf8.RuneSelf || !safe[s[i]] {
			return false
		}
	}
	return true
}

// plain8 reports whether none of the eight bytes in x needs escaping or
// decoding: none is below 0x20, ", \ or at least 0x80. (x - 0x20 in each
// byte) & ^x has a byte's top bit set for a byte below 0x20 (and none
// other, as long as no byte is at least 0x80, which x's own top bits
// catch); the same on x XOR the byte finds a byte equal to it.
func plain8(x uint64) bool {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	below := func(x uint64, n uint64) uint64 { return (x - ones*n) & ^x }
	q, bs := x^(ones*'"'), x^(ones*'\\')
	return (x|below(x, 0x20)|below(q, 1)|below(bs, 1))&tops == 0
}

// load8 is s's first eight bytes, little-endian (one load, as the
// compiler combines these).
func load8(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func load4(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

const hex = "0123456789abcdef"

// safe holds true for the ASCII bytes written as they are: all but the
// control characters, " and \ (encoding/json's safeSet).
var safe = func() (t [utf8.RuneSelf]bool) {
	for b := ' '; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()
