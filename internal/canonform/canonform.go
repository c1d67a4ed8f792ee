// Package canonform reads an application/x-www-form-urlencoded body as the
// fingerprint sees it (DESIGN.md, Fingerprint): its decoded pairs, empty
// pairs skipped and `a` equal to `a=`, in a stable order by name bytes that
// keeps the relative order of the pairs of one name, each name and value
// with a 4-byte length prefix. Two encodings of one form — parameters of
// distinct names reordered, `%40` for `@`, `+` for `%20` — are one form;
// another value, or the pairs of one name in another order, are not.
package canonform

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// Form is a parsed form: its pairs encoded in arrival order and their
// order by name. The zero Form is empty; Parse reuses its buffers.
type Form struct {
	buf   []byte   // per pair: uint32 len(name), name, uint32 len(value), value
	order []uint32 // offsets of the pairs in buf, sorted by name
}

// IsForm reports whether a Content-Type names a form body: the media type
// application/x-www-form-urlencoded, matched without case and parameters.
func IsForm(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/x-www-form-urlencoded")
}

// WorkingMemory is the most memory, in bytes, that Parse allocates for a
// body of n bytes holding pairs non-empty pairs: the decoded pairs with
// their prefixes (n + 8·pairs) and the order (4·pairs). A non-empty pair
// takes at least two input bytes with its separator, so this is at most
// 7n+12 bytes.
func WorkingMemory(n, pairs int) int64 {
	return int64(n) + 12*int64(pairs)
}

// Parse reads src into f, without the pairs whose name is in ignore, and
// reports whether src is a form that parses without any error: no `;`,
// every `%` followed by two hex digits, every decoded name and value valid
// UTF-8, no name or value of 4 GiB or more. Before it allocates, Parse
// calls charge (when not nil) with the bytes it is about to allocate
// ([WorkingMemory]); if charge fails, Parse returns false and its error,
// and charged is 0. Otherwise charged is what was charged, for the caller
// to give back once it is done with f.
func (f *Form) Parse(src []byte, ignore []string, charge func(int64) error) (charged int64, ok bool, err error) {
	f.buf, f.order = f.buf[:0], f.order[:0]
	if len(src) >= math.MaxUint32 || bytes.IndexByte(src, ';') >= 0 {
		return 0, false, nil
	}
	pairs := 0
	for rest := src; len(rest) > 0; {
		var p []byte
		p, rest, _ = bytes.Cut(rest, []byte{'&'})
		if len(p) > 0 {
			pairs++
		}
	}
	need := WorkingMemory(len(src), pairs)
	if charge != nil && (cap(f.buf) < len(src)+8*pairs || cap(f.order) < pairs) {
		if err := charge(need); err != nil {
			return 0, false, err
		}
		charged = need
	}
	f.buf = slices.Grow(f.buf, len(src)+8*pairs)
	f.order = slices.Grow(f.order, pairs)
	for rest := src; len(rest) > 0; {
		var p []byte
		p, rest, _ = bytes.Cut(rest, []byte{'&'})
		if len(p) == 0 {
			continue
		}
		name, value, _ := bytes.Cut(p, []byte{'='})
		at := len(f.buf)
		var okName, okValue bool
		f.buf, okName = appendField(f.buf, name)
		f.buf, okValue = appendField(f.buf, value)
		if !okName || !okValue {
			f.buf, f.order = f.buf[:0], f.order[:0]
			return charged, false, nil
		}
		if ignored(f.field(uint32(at)), ignore) {
			f.buf = f.buf[:at]
			continue
		}
		f.order = append(f.order, uint32(at))
	}
	slices.SortStableFunc(f.order, func(a, b uint32) int {
		return bytes.Compare(f.field(a), f.field(b))
	})
	return charged, true, nil
}

// appendField appends the decoded s to dst with its length prefix, and
// reports whether s decoded without error to valid UTF-8.
func appendField(dst, s []byte) ([]byte, bool) {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '+':
			dst = append(dst, ' ')
		case '%':
			if i+2 >= len(s) {
				return dst, false
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return dst, false
			}
			dst = append(dst, hi<<4|lo)
			i += 2
		default:
			dst = append(dst, c)
		}
	}
	n := len(dst) - at - 4
	if !utf8.Valid(dst[at+4:]) {
		return dst, false
	}
	binary.BigEndian.PutUint32(dst[at:], uint32(n))
	return dst, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ignored reports whether name is one of ignore.
func ignored(name []byte, ignore []string) bool {
	for _, s := range ignore {
		if string(name) == s {
			return true
		}
	}
	return false
}

// field returns the name of the pair at offset at.
func (f *Form) field(at uint32) []byte {
	n := binary.BigEndian.Uint32(f.buf[at:])
	return f.buf[at+4 : at+4+n]
}

// pair returns the whole encoding of the pair at offset at.
func (f *Form) pair(at uint32) []byte {
	n := binary.BigEndian.Uint32(f.buf[at:])
	v := at + 4 + n
	m := binary.BigEndian.Uint32(f.buf[v:])
	return f.buf[at : v+4+m]
}

// Len is the length of the encoding [Form.WriteTo] writes.
func (f *Form) Len() int { return len(f.buf) }

// Pairs is the number of pairs of the form, ignored ones excluded.
func (f *Form) Pairs() int { return len(f.order) }

// WriteTo writes the form's encoding to w: its pairs in order, each name
// and value with its 4-byte big-endian length.
func (f *Form) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, at := range f.order {
		m, err := w.Write(f.pair(at))
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Append appends the form's encoding to dst.
func (f *Form) Append(dst []byte) []byte {
	for _, at := range f.order {
		dst = append(dst, f.pair(at)...)
	}
	return dst
}

// Reset drops f's buffers when they grew over max bytes, so that a pooled
// Form does not keep a big body's memory.
func (f *Form) Reset(max int) {
	if cap(f.buf) > max {
		f.buf = nil
		f.order = nil
	}
	f.buf, f.order = f.buf[:0], f.order[:0]
}
