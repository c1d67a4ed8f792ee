package canonjson

import (
	"bytes"
	"slices"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects that [Append]
// accepts: [[1]] has depth 2, and MaxDepth opening brackets in a row are
// fine, one more is not. It matches encoding/json's own limit.
const MaxDepth = 10000

// maxInput bounds len(src) so that every offset fits in 31 bits; the top bit
// of a span offset says which buffer it points into (see inScratch).
const maxInput = 1<<31 - 1

// Working buffers larger than these are left to the garbage collector rather
// than pooled, so that one huge or hostile body does not pin memory. A node is
// 24 bytes; 64 KiB bodies need a few thousand.
const (
	maxPooledNodes   = 1 << 17
	maxPooledScratch = 1 << 20
)

// Append appends the canonical form of the JSON document src (see the package
// documentation) to dst, leaving out the values that the pointers in ignore
// name, and returns the extended slice and true.
//
// When src is not canonicalizable it returns dst unchanged and false; the
// caller should then use the raw bytes. Documents of 2 GiB or more are not
// canonicalizable either.
//
// Pointers are all resolved against the original document, so /a/0 and /a/1
// remove the first two elements of a. The zero [Pointer] is ignored.
//
// Append grows dst at most once, by len(src) (the canonical form is never
// longer than its source). Its working memory is 24 bytes per JSON value plus
// the decoded strings that had escapes: typically about the size of src, at
// worst 12 times it ("[0,0,...]"). Buffers are pooled between calls unless
// they grew past a few MiB. Time is O(n log n) in len(src) at worst (sorting
// member names), linear in practice, and never recursion-bound.
// Append is safe for concurrent use; it does not retain src or dst.
func Append(dst, src []byte, ignore []Pointer) ([]byte, bool) {
	if len(src) == 0 || len(src) > maxInput {
		return dst, false
	}
	s := pool.Get().(*state)
	defer s.release()
	s.src = src
	s.reserve()
	if !s.parse() {
		return dst, false
	}
	for i := range ignore {
		s.remove(&ignore[i])
	}
	return s.emit(slices.Grow(dst, len(src))), true
}

type kind uint8

const (
	kindNull kind = iota
	kindFalse
	kindTrue
	kindNumber
	kindString
	kindArray
	kindObject
)

// inScratch marks a span offset into state.scratch rather than state.src.
const inScratch = 1 << 31

// A span is a byte range of state.src or, with inScratch set, of
// state.scratch.
type span struct{ off, n uint32 }

// A node is one JSON value. Nodes are stored in document order (pre-order),
// so a container's children follow it and its subtree ends at end.
type node struct {
	// key is the decoded member name when the node is an object member.
	key span
	// val is, for a string, its decoded contents; for a number, its literal
	// in src; for an object, its members' node indexes sorted by name:
	// kids[val.off:val.off+val.n]. Unused for arrays and literals.
	val     span
	end     uint32 // index one past the last node of this subtree
	kind    kind
	removed bool // named by an ignored pointer
}

// A frame is an open container on the parse or emit stack.
type frame struct {
	node uint32
	next uint32 // emit: next child (arrays: node index; objects: index into kids)
	any  bool   // emit: a child was written, so the next needs a comma
}

// state holds one call's working buffers; it is pooled between calls.
type state struct {
	src     []byte
	nodes   []node
	kids    []uint32
	stack   []frame
	scratch []byte // decoded strings that had escapes
}

var pool = sync.Pool{New: func() any { return new(state) }}

func (s *state) release() {
	s.src = nil
	if cap(s.nodes) > maxPooledNodes || cap(s.scratch) > maxPooledScratch || cap(s.kids) > maxPooledNodes {
		return
	}
	s.nodes, s.kids, s.stack, s.scratch = s.nodes[:0], s.kids[:0], s.stack[:0], s.scratch[:0]
	pool.Put(s)
}

// reserve sizes s.nodes for large documents up front, so that a big body
// of tiny values ("[0,0,0,...]": 24 bytes of nodes per 2 bytes of input) costs
// one allocation instead of a chain of growing copies several times its size.
// Every value but the root is either the first in its container or follows a
// comma, which bounds the count. Small documents skip the counting and rely
// on the pooled capacity.
func (s *state) reserve() {
	if len(s.src) <= 64<<10 || cap(s.nodes) > len(s.src)/2 {
		return
	}
	n := 1 + bytes.Count(s.src, []byte{','}) + bytes.Count(s.src, []byte{'['}) + bytes.Count(s.src, []byte{'{'})
	if cap(s.nodes) < n {
		s.nodes = make([]node, 0, n)
	}
}

func (s *state) bytes(sp span) []byte {
	if sp.off&inScratch != 0 {
		o := sp.off &^ inScratch
		return s.scratch[o : o+sp.n]
	}
	return s.src[sp.off : sp.off+sp.n]
}

// parse checks that s.src is exactly one JSON value with no duplicate names
// and no nesting deeper than MaxDepth, and builds s.nodes and s.kids.
func (s *state) parse() bool {
	src := s.src
	i := skipWS(src, 0)
	var key span // the name of the value about to be parsed, inside objects
	for {
		// A value starts at i.
		if i >= len(src) {
			return false
		}
		idx := uint32(len(s.nodes))
		s.nodes = append(s.nodes, node{key: key, end: idx + 1})
		n := &s.nodes[idx]
		c := src[i]
		switch {
		case c == '{' || c == '[':
			if len(s.stack) == MaxDepth {
				return false
			}
			s.stack = append(s.stack, frame{node: idx})
			closer := byte(']')
			n.kind = kindArray
			if c == '{' {
				closer = '}'
				n.kind = kindObject
			}
			i = skipWS(src, i+1)
			if i < len(src) && src[i] == closer {
				i++
				if !s.closeTop() {
					return false
				}
				break // an empty container is a complete value
			}
			if c == '[' {
				key = span{}
				continue
			}
			var ok bool
			if i, key, ok = s.member(i); !ok {
				return false
			}
			continue
		case c == '"':
			v, j, ok := s.str(i)
			if !ok {
				return false
			}
			n.kind, n.val, i = kindString, v, j
		case c == 't':
			if !hasLit(src, i, "true") {
				return false
			}
			n.kind, i = kindTrue, i+4
		case c == 'f':
			if !hasLit(src, i, "false") {
				return false
			}
			n.kind, i = kindFalse, i+5
		case c == 'n':
			if !hasLit(src, i, "null") {
				return false
			}
			n.kind, i = kindNull, i+4
		default:
			j, ok := number(src, i)
			if !ok {
				return false
			}
			n.kind, n.val, i = kindNumber, span{uint32(i), uint32(j - i)}, j
		}
		// A value is complete: close containers until one continues.
	next:
		for {
			i = skipWS(src, i)
			if len(s.stack) == 0 {
				return i == len(src)
			}
			if i >= len(src) {
				return false
			}
			top := &s.nodes[s.stack[len(s.stack)-1].node]
			switch c := src[i]; {
			case c == ',':
				i = skipWS(src, i+1)
				if top.kind == kindArray {
					key = span{}
					break next
				}
				var ok bool
				if i, key, ok = s.member(i); !ok {
					return false
				}
				break next
			case c == ']' && top.kind == kindArray, c == '}' && top.kind == kindObject:
				i++
				if !s.closeTop() {
					return false
				}
			default:
				return false
			}
		}
	}
}

// member parses an object member's name and the colon after it, starting at
// src[i], and returns the index of the member's value.
func (s *state) member(i int) (int, span, bool) {
	src := s.src
	if i >= len(src) || src[i] != '"' {
		return 0, span{}, false
	}
	k, i, ok := s.str(i)
	if !ok {
		return 0, span{}, false
	}
	i = skipWS(src, i)
	if i >= len(src) || src[i] != ':' {
		return 0, span{}, false
	}
	return skipWS(src, i+1), k, true
}

// closeTop pops the innermost open container. For an object it records its
// members sorted by name and reports false if two names are equal.
func (s *state) closeTop() bool {
	top := s.stack[len(s.stack)-1].node
	s.stack = s.stack[:len(s.stack)-1]
	n := &s.nodes[top]
	n.end = uint32(len(s.nodes))
	if n.kind != kindObject {
		return true
	}
	start := len(s.kids)
	for c := top + 1; c < n.end; c = s.nodes[c].end {
		s.kids = append(s.kids, c)
	}
	n.val = span{uint32(start), uint32(len(s.kids) - start)}
	kids := s.kids[start:]
	if len(kids) < 2 {
		return true
	}
	slices.SortFunc(kids, func(a, b uint32) int {
		return bytes.Compare(s.bytes(s.nodes[a].key), s.bytes(s.nodes[b].key))
	})
	for j := 1; j < len(kids); j++ {
		if bytes.Equal(s.bytes(s.nodes[kids[j-1]].key), s.bytes(s.nodes[kids[j]].key)) {
			return false
		}
	}
	return true
}

// plain[c] is true for the ASCII bytes that stand for themselves inside a
// JSON string, both in input and in canonical output.
var plain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str parses the string whose opening quote is src[i]. It returns its decoded
// contents and the index after the closing quote. A string without escapes
// is returned as a span of src, with no copy.
func (s *state) str(i int) (span, int, bool) {
	src := s.src
	i++
	start := i
	for i < len(src) {
		c := src[i]
		if c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			switch c {
			case '"':
				return span{uint32(start), uint32(i - start)}, i + 1, true
			case '\\':
				return s.strEscaped(start, i)
			}
			return span{}, 0, false // raw control character
		}
		r, size := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && size == 1 {
			return span{}, 0, false
		}
		i += size
	}
	return span{}, 0, false
}

// strEscaped continues str at the first backslash, src[i], of the string
// whose contents start at src[start], decoding into s.scratch.
func (s *state) strEscaped(start, i int) (span, int, bool) {
	src := s.src
	off := len(s.scratch)
	s.scratch = append(s.scratch, src[start:i]...)
	for i < len(src) {
		c := src[i]
		switch {
		case c == '"':
			return span{uint32(off) | inScratch, uint32(len(s.scratch) - off)}, i + 1, true
		case c == '\\':
			if i+1 >= len(src) {
				return span{}, 0, false
			}
			var d byte
			switch src[i+1] {
			case '"', '\\', '/':
				d = src[i+1]
			case 'b':
				d = '\b'
			case 'f':
				d = '\f'
			case 'n':
				d = '\n'
			case 'r':
				d = '\r'
			case 't':
				d = '\t'
			case 'u':
				r, ok := hex4(src, i+2)
				if !ok {
					return span{}, 0, false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					// Only a high surrogate followed by an escaped low one
					// is a character; anything else cannot be UTF-8.
					if r >= 0xdc00 || i+1 >= len(src) || src[i] != '\\' || src[i+1] != 'u' {
						return span{}, 0, false
					}
					r2, ok := hex4(src, i+2)
					if !ok || r2 < 0xdc00 || r2 > 0xdfff {
						return span{}, 0, false
					}
					r = utf16.DecodeRune(r, r2)
					i += 6
				}
				s.scratch = utf8.AppendRune(s.scratch, r)
				continue
			default:
				return span{}, 0, false
			}
			s.scratch = append(s.scratch, d)
			i += 2
		case c < utf8.RuneSelf:
			if !plain[c] {
				return span{}, 0, false
			}
			j := i + 1
			for j < len(src) && src[j] < utf8.RuneSelf && plain[src[j]] {
				j++
			}
			s.scratch = append(s.scratch, src[i:j]...)
			i = j
		default:
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size == 1 {
				return span{}, 0, false
			}
			s.scratch = append(s.scratch, src[i:i+size]...)
			i += size
		}
	}
	return span{}, 0, false
}

// hex4 decodes the four hex digits at src[i:i+4].
func hex4(src []byte, i int) (rune, bool) {
	if i+4 > len(src) {
		return 0, false
	}
	var r rune
	for _, c := range src[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number scans the RFC 8259 number starting at src[i] and returns the index
// after it. What follows is checked by the caller.
func number(src []byte, i int) (int, bool) {
	if src[i] == '-' {
		i++
	}
	switch {
	case i >= len(src):
		return 0, false
	case src[i] == '0':
		i++
	case '1' <= src[i] && src[i] <= '9':
		i = digits(src, i+1)
	default:
		return 0, false
	}
	if i < len(src) && src[i] == '.' {
		j := digits(src, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		j := digits(src, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func digits(src []byte, i int) int {
	for i < len(src) && '0' <= src[i] && src[i] <= '9' {
		i++
	}
	return i
}

func hasLit(src []byte, i int, lit string) bool {
	return len(src)-i >= len(lit) && string(src[i:i+len(lit)]) == lit
}

func skipWS(src []byte, i int) int {
	for i < len(src) {
		switch src[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// remove marks the value that p names, if any.
func (s *state) remove(p *Pointer) {
	if len(p.toks) == 0 {
		return // the root: never removed
	}
	cur := uint32(0)
	for _, t := range p.toks {
		n := &s.nodes[cur]
		switch n.kind {
		case kindObject:
			kids := s.kids[n.val.off : n.val.off+n.val.n]
			j, found := slices.BinarySearchFunc(kids, t.name, func(k uint32, name []byte) int {
				return bytes.Compare(s.bytes(s.nodes[k].key), name)
			})
			if !found {
				return
			}
			cur = kids[j]
		case kindArray:
			if t.index < 0 {
				return
			}
			c := cur + 1
			for range t.index {
				if c >= n.end {
					return
				}
				c = s.nodes[c].end
			}
			if c >= n.end {
				return
			}
			cur = c
		default:
			return
		}
	}
	s.nodes[cur].removed = true
}

// emit appends the canonical form of the parsed document to dst.
func (s *state) emit(dst []byte) []byte {
	s.stack = s.stack[:0]
	dst = s.open(dst, 0)
	for len(s.stack) > 0 {
		f := &s.stack[len(s.stack)-1]
		n := &s.nodes[f.node]
		var child uint32
		if n.kind == kindArray {
			if f.next >= n.end {
				dst = append(dst, ']')
				s.stack = s.stack[:len(s.stack)-1]
				continue
			}
			child = f.next
			f.next = s.nodes[child].end
		} else {
			if f.next >= n.val.off+n.val.n {
				dst = append(dst, '}')
				s.stack = s.stack[:len(s.stack)-1]
				continue
			}
			child = s.kids[f.next]
			f.next++
		}
		c := &s.nodes[child]
		if c.removed {
			continue
		}
		if f.any {
			dst = append(dst, ',')
		}
		f.any = true
		if n.kind == kindObject {
			dst = s.appendString(dst, c.key)
			dst = append(dst, ':')
		}
		dst = s.open(dst, child) // may grow s.stack: f and n are stale now
	}
	return dst
}

// open appends a scalar, or the opening bracket of a container, which it
// pushes on the stack for emit.
func (s *state) open(dst []byte, i uint32) []byte {
	n := &s.nodes[i]
	switch n.kind {
	case kindNull:
		return append(dst, "null"...)
	case kindFalse:
		return append(dst, "false"...)
	case kindTrue:
		return append(dst, "true"...)
	case kindNumber:
		return append(dst, s.bytes(n.val)...)
	case kindString:
		return s.appendString(dst, n.val)
	case kindArray:
		s.stack = append(s.stack, frame{node: i, next: i + 1})
		return append(dst, '[')
	default:
		s.stack = append(s.stack, frame{node: i, next: n.val.off})
		return append(dst, '{')
	}
}

// appendString appends the decoded string sp, quoted and minimally escaped.
func (s *state) appendString(dst []byte, sp span) []byte {
	if sp.off&inScratch == 0 {
		// A string that str returned as a span of src had no escapes, so it
		// holds nothing to escape either.
		dst = append(dst, '"')
		dst = append(dst, s.src[sp.off:sp.off+sp.n]...)
		return append(dst, '"')
	}
	return appendQuoted(dst, s.bytes(sp))
}

// AppendQuoted appends s, which must be valid UTF-8, as a quoted string with
// minimal escapes: \" and \\, the short escapes \b \f \n \r \t, \u00xx
// for the other bytes below 0x20, and raw UTF-8 for everything else. It is
// the canonical string form of this package, and also a GraphQL string
// literal that its lexer decodes back to s.
func AppendQuoted(dst []byte, s string) []byte { return appendQuoted(dst, s) }

func appendQuoted[S ~string | ~[]byte](dst []byte, b S) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= utf8.RuneSelf || plain[c] {
			continue
		}
		dst = append(dst, b[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, b[start:]...)
	return append(dst, '"')
}
