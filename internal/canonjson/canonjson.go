package canonjson

import (
	"bytes"
	"slices"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth is the deepest nesting of arrays and objects that [Append]
// accepts: [[1]] has depth 2, and MaxDepth opening brackets in a row are
// fine, one more is not. It matches encoding/json's own limit.
const MaxDepth = 10000

// maxInput bounds len(src) so that every offset fits in 31 bits; the top bit
// of a span offset says which buffer it points into (see inScratch).
const maxInput = 1<<31 - 1

// Working buffers larger than these are left to the garbage collector rather
// than pooled, so that one huge or hostile body does not pin memory.
const (
	maxPooledMembers = 1 << 14
	maxPooledBytes   = 1 << 20
	maxPooledFrames  = MaxDepth
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
// longer than its source). It canonicalizes in one streaming pass, writing
// into dst as it parses and reordering an object's members in place when
// the object closes, so arrays and scalars cost no working memory at all
// ("[0,0,...]" costs none). Its working memory beyond dst is at most
// [WorkingMemory](len(src)): 8 bytes per member of the objects open at a
// time, the string being decoded when it has escapes, and one copy of the
// largest object being reordered, plus 32 bytes per open array or object. Buffers
// are pooled between calls unless they grew past about a MiB. Time is
// O(n log n) in len(src) at worst (sorting member names), linear in
// practice, and never recursion-bound. Append is safe for concurrent use;
// it does not retain src or dst.
func Append(dst, src []byte, ignore []Pointer) ([]byte, bool) {
	out, _, ok, _ := AppendCharged(dst, src, ignore, nil)
	return out, ok
}

// AppendCharged is [Append] that charges a memory budget for what it
// allocates: charge is called with the size of each buffer before it is
// allocated (dst's growth, and the working buffers that the pool could not
// supply), and the total charged is returned, for the caller to give back
// once it is done with the result. If charge returns an error, Append stops
// and returns dst unchanged, the bytes charged so far (to give back too),
// false and that error; an uncanonicalizable document returns false and a
// nil error. A nil charge charges nothing. With internal/budget:
//
//	out, charged, ok, err := canonjson.AppendCharged(nil, plain, ignore, body.Charge)
//	defer body.Uncharge(charged)
func AppendCharged(dst, src []byte, ignore []Pointer, charge func(int64) error) (_ []byte, charged int64, ok bool, _ error) {
	if len(src) == 0 || len(src) > maxInput {
		return dst, 0, false, nil
	}
	s := pool.Get().(*state)
	defer s.release()
	s.src, s.ignore, s.charge, s.charged, s.chargeErr = src, ignore, charge, 0, nil
	if cap(dst)-len(dst) < len(src) {
		if !s.alloc(len(dst) + len(src)) {
			return dst, s.charged, false, s.chargeErr
		}
	}
	s.out = slices.Grow(dst, len(src))
	if !s.run() {
		return dst, s.charged, false, s.chargeErr
	}
	return s.out, s.charged, true, nil
}

// frameSize and memberSize are what alloc charges per element.
const (
	frameSize  = int(unsafe.Sizeof(frame{}))
	memberSize = int(unsafe.Sizeof(member{}))
)

// alloc charges n bytes about to be allocated; false if refused.
func (s *state) alloc(n int) bool {
	if s.charge == nil {
		return true
	}
	if err := s.charge(int64(n)); err != nil {
		s.chargeErr = err
		return false
	}
	s.charged += int64(n)
	return true
}

// WorkingMemory is the most memory, in bytes, that [Append] allocates
// beyond dst (which grows by n) for a document of n bytes, counting
// every allocation, the discarded ones too: member records (8 bytes per
// member of the open objects, a member taking 4 input bytes or more,
// grown by doubling: 4n), one reordering buffer (n), decoded strings with
// escapes (n), and the stack (32 bytes per level of nesting, doubling, up
// to [MaxDepth]). A caller that charges a memory budget (DESIGN.md,
// "Bounds") charges n + WorkingMemory(n) before canonicalizing. The usual
// cost is far lower: nothing for "[0,0,...]", under 4n for 1 MiB objects
// of tiny members (see TestAppendMemoryBound).
func WorkingMemory(n int) int64 {
	nn := int64(n)
	return 6*nn + 64*min(nn, MaxDepth) + 4096
}

// inScratch marks a span offset into state.scratch rather than state.src.
const inScratch = 1 << 31

// A span is a byte range of state.src or, with inScratch set, of
// state.scratch.
type span struct{ off, n uint32 }

// A member is an object member already written to state.out:
// out[start:end] is `"name":value`, without a comma. Its name is read back
// from out (canonical form) when members are compared, so a member costs 8
// bytes whatever its name.
type member struct{ start, end uint32 }

// removedBit, set in member.end, marks a member whose value a pointer
// removed: out[start:end] is then its name alone, kept for the duplicate
// check until the object closes and is rewritten without it.
const removedBit = 1 << 31

// A frame is an open array or object.
type frame struct {
	obj       bool
	any       bool   // a child was written, so the next needs a comma
	removed   bool   // objects: a member was removed
	index     uint32 // the next child's index
	memStart  uint32 // objects: its first member in state.mem
	outStart  uint32 // objects: offset in state.out after '{'
	liveStart uint32 // its children may be named by ignore[live[liveStart:liveEnd]]
	liveEnd   uint32
}

// state holds one call's working buffers; it is pooled between calls.
type state struct {
	src    []byte
	ignore []Pointer
	out    []byte
	stack  []frame
	// mem holds the members of the open objects, innermost last.
	mem []member
	// scratch holds the string being parsed when it has escapes, decoded;
	// it is emptied once the string is written.
	scratch []byte
	// tmp is where an object's members are put in order.
	tmp []byte
	// live holds indexes into ignore of the pointers that may still name
	// a value below each open container (see frame.liveStart).
	live []uint32
	// removeDepth is len(stack) when the value being removed began, or -1;
	// removeFrom is where its output (and comma) began, or in an object
	// where its name ends.
	removeDepth int
	removeFrom  int
	// moved counts the bytes reordering has copied (see maxMoved).
	moved int
	// charge, when set, is called before each allocation; charged sums
	// what it accepted, chargeErr is its refusal.
	charge    func(int64) error
	charged   int64
	chargeErr error
}

// maxMoved bounds the bytes that reordering members may copy when the output
// holds n bytes: 32 times the output, plus a MiB. Only objects nested many
// levels deep in unsorted objects come near it ("{"b":0,"a":{"b":0,"a":...}}"
// moves its inner objects once per level: quadratic time). The output, and
// so this choice, depends only on the canonical form and the pointers, so a
// document refused for it is refused however it is formatted.
func maxMoved(n int) int { return 32*n + 1<<20 }

var pool = sync.Pool{New: func() any { return new(state) }}

func (s *state) release() {
	s.src, s.ignore, s.out, s.charge, s.chargeErr = nil, nil, nil, nil, nil
	if cap(s.mem) > maxPooledMembers || cap(s.scratch) > maxPooledBytes || cap(s.tmp) > maxPooledBytes ||
		cap(s.stack) > maxPooledFrames || cap(s.live) > maxPooledMembers {
		return
	}
	s.stack, s.mem, s.scratch, s.tmp, s.live = s.stack[:0], s.mem[:0], s.scratch[:0], s.tmp[:0], s.live[:0]
	pool.Put(s)
}

func (s *state) bytes(sp span) []byte {
	if sp.off&inScratch != 0 {
		o := sp.off &^ inScratch
		return s.scratch[o : o+sp.n]
	}
	return s.src[sp.off : sp.off+sp.n]
}

// run parses s.src, writing its canonical form to s.out. It reports false if
// s.src is not exactly one JSON value with no duplicate names and no nesting
// deeper than MaxDepth.
func (s *state) run() bool {
	src := s.src
	s.removeDepth, s.moved = -1, 0
	i := skipWS(src, 0)
	var key span // the name of the value about to be parsed, inside objects
	for {
		// A value starts at i.
		if i >= len(src) {
			return false
		}
		live, ok := s.begin(key)
		if !ok {
			return false
		}
		s.scratch = s.scratch[:0] // the name is written
		c := src[i]
		switch {
		case c == '{' || c == '[':
			if len(s.stack) == MaxDepth {
				return false
			}
			s.out = append(s.out, c)
			if len(s.stack) == cap(s.stack) {
				// Double, up to MaxDepth (see WorkingMemory).
				n := min(max(2*len(s.stack), 16), MaxDepth)
				if !s.alloc(n * frameSize) {
					return false
				}
				s.stack = append(make([]frame, 0, n), s.stack...)
			}
			s.stack = append(s.stack, frame{
				obj:       c == '{',
				memStart:  uint32(len(s.mem)),
				outStart:  uint32(len(s.out)),
				liveStart: uint32(live),
				liveEnd:   uint32(len(s.live)),
			})
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			i = skipWS(src, i+1)
			if i < len(src) && src[i] == closer {
				i++
				if !s.closeTop() { // which ends it as a value
					return false
				}
				goto next // an empty container is a complete value
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
			mark := len(s.scratch)
			v, j, ok := s.str(i)
			if !ok {
				return false
			}
			s.out = s.appendString(s.out, v)
			s.scratch = s.scratch[:mark]
			i = j
		case c == 't':
			if !hasLit(src, i, "true") {
				return false
			}
			s.out, i = append(s.out, "true"...), i+4
		case c == 'f':
			if !hasLit(src, i, "false") {
				return false
			}
			s.out, i = append(s.out, "false"...), i+5
		case c == 'n':
			if !hasLit(src, i, "null") {
				return false
			}
			s.out, i = append(s.out, "null"...), i+4
		default:
			j, ok := number(src, i)
			if !ok {
				return false
			}
			s.out, i = append(s.out, src[i:j]...), j
		}
		s.live = s.live[:live]
		s.end()
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
			top := &s.stack[len(s.stack)-1]
			switch c := src[i]; {
			case c == ',':
				i = skipWS(src, i+1)
				if !top.obj {
					key = span{}
					break next
				}
				var ok bool
				if i, key, ok = s.member(i); !ok {
					return false
				}
				break next
			case c == ']' && !top.obj, c == '}' && top.obj:
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

// begin starts a value (named key, inside an object): it writes the comma
// and the name, decides whether a pointer removes the value, and pushes on
// s.live the pointers that may name something inside it, which start at the
// returned index. It reports false if the budget refused memory.
func (s *state) begin(key span) (int, bool) {
	l := len(s.live)
	if len(s.stack) == 0 {
		// The root: every pointer may name something inside it.
		for j := range s.ignore {
			if len(s.ignore[j].toks) > 0 {
				s.live = append(s.live, uint32(j))
			}
		}
		return l, true
	}
	depth := len(s.stack) - 1 // the token that names a child of the top
	f := &s.stack[depth]
	removed := false
	if s.removeDepth < 0 {
		for _, p := range s.live[f.liveStart:f.liveEnd] {
			tok := &s.ignore[p].toks[depth]
			if f.obj && !bytes.Equal(tok.name, s.bytes(key)) || !f.obj && tok.index != int(f.index) {
				continue
			}
			if len(s.ignore[p].toks) == depth+1 {
				removed = true
				break
			}
			s.live = append(s.live, p)
		}
	}
	if removed {
		s.live = s.live[:l]
		s.removeDepth, s.removeFrom = len(s.stack), len(s.out)
	}
	if f.any {
		s.out = append(s.out, ',')
	}
	if f.obj {
		if len(s.mem) == cap(s.mem) {
			// Double, rather than append's 1.25× for large slices, up to
			// the most members src can hold (each takes 4 bytes or more):
			// at most 2 bytes per input byte, 4 with the discarded copies
			// (see WorkingMemory).
			n := max(min(max(2*len(s.mem), 16), len(s.src)/4+1), len(s.mem)+1)
			if !s.alloc(n * memberSize) {
				return l, false
			}
			s.mem = append(make([]member, 0, n), s.mem...)
		}
		s.mem = append(s.mem, member{start: uint32(len(s.out))})
		s.out = s.appendString(s.out, key)
		if removed {
			s.removeFrom = len(s.out)
		}
		s.out = append(s.out, ':')
	}
	return l, true
}

// end finishes a value; s.stack's top, if any, is its container.
func (s *state) end() {
	if len(s.stack) == 0 {
		return
	}
	f := &s.stack[len(s.stack)-1]
	f.index++
	if s.removeDepth == len(s.stack) {
		// The removed value ends: drop its output (and in an array its
		// comma; an object keeps the name until it closes).
		s.out = s.out[:s.removeFrom]
		s.removeDepth = -1
		if f.obj {
			s.mem[len(s.mem)-1].end = uint32(len(s.out)) | removedBit
			f.removed = true
		}
		return
	}
	f.any = true
	if f.obj {
		s.mem[len(s.mem)-1].end = uint32(len(s.out))
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

// closeTop closes the innermost open container and ends it as a value. An
// object's members are put in order of their names (rewriting its output
// in place when they were not); it reports false if two names are equal.
func (s *state) closeTop() bool {
	f := s.stack[len(s.stack)-1]
	s.stack = s.stack[:len(s.stack)-1]
	if !f.obj {
		s.out = append(s.out, ']')
	} else {
		ms := s.mem[f.memStart:]
		if len(ms) > 1 {
			cmp := func(a, b member) int { return compareNames(s.out[a.start+1:], s.out[b.start+1:]) }
			sorted := slices.IsSortedFunc(ms, cmp)
			if !sorted {
				slices.SortFunc(ms, cmp)
			}
			for j := 1; j < len(ms); j++ {
				if cmp(ms[j-1], ms[j]) == 0 {
					return false
				}
			}
			if !sorted || f.removed {
				// Reordering moves the object's whole output, so objects
				// nested in unsorted objects are moved once per level:
				// refuse a document that would take too long.
				if s.moved += len(s.out) - int(f.outStart); s.moved > maxMoved(len(s.out)) {
					return false
				}
				if !s.reorder(ms, int(f.outStart)) {
					return false
				}
			}
		} else if f.removed {
			s.out = s.out[:f.outStart]
		}
		s.mem = s.mem[:f.memStart]
		s.out = append(s.out, '}')
	}
	s.live = s.live[:f.liveStart]
	s.end()
	return true
}

// reorder rewrites s.out[from:] as the members ms that were not removed, in
// their order, joined by commas. It reports false if the budget refused
// memory.
func (s *state) reorder(ms []member, from int) bool {
	if cap(s.tmp) < len(s.out)-from {
		// Once, as large as any object can be: nested objects grow one
		// after another, and growing tmp for each would cost more than
		// the input.
		if !s.alloc(len(s.src)) {
			return false
		}
		s.tmp = make([]byte, 0, len(s.src))
	}
	s.tmp = s.tmp[:0]
	for _, m := range ms {
		if m.end&removedBit != 0 {
			continue
		}
		if len(s.tmp) > 0 {
			s.tmp = append(s.tmp, ',')
		}
		s.tmp = append(s.tmp, s.out[m.start:m.end]...)
	}
	s.out = append(s.out[:from], s.tmp...)
	return true
}

// compareNames compares two member names in canonical form, each given
// from just after its opening quote, by their decoded bytes.
func compareNames(a, b []byte) int {
	for {
		ca, na := nameByte(a)
		cb, nb := nameByte(b)
		switch {
		case na == 0 && nb == 0:
			return 0
		case na == 0:
			return -1
		case nb == 0:
			return 1
		case ca != cb:
			return int(ca) - int(cb)
		}
		a, b = a[na:], b[nb:]
	}
}

// nameByte decodes the first byte of a canonical string's rest s and
// returns it with the number of bytes it took, 0 at the closing quote.
// Canonical strings only escape \", \\, \b \f \n \r \t and \u00xx.
func nameByte(s []byte) (byte, int) {
	switch c := s[0]; c {
	case '"':
		return 0, 0
	case '\\':
		switch s[1] {
		case 'b':
			return '\b', 2
		case 'f':
			return '\f', 2
		case 'n':
			return '\n', 2
		case 'r':
			return '\r', 2
		case 't':
			return '\t', 2
		case 'u':
			return unhex(s[4])<<4 | unhex(s[5]), 6
		}
		return s[1], 2
	default:
		return c, 1
	}
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
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
	if need := off + stringEnd(src, i) - start; cap(s.scratch) < need {
		// Once per string, exactly as large as it can decode to: never
		// more, in all, than the input (see WorkingMemory).
		if !s.alloc(need) {
			return span{}, 0, false
		}
		s.scratch = append(make([]byte, 0, need), s.scratch...)
	}
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

// stringEnd returns the index of the quote that ends the string whose
// contents include src[i], or len(src).
func stringEnd(src []byte, i int) int {
	for i < len(src) {
		switch src[i] {
		case '"':
			return i
		case '\\':
			i += 2
		default:
			i++
		}
	}
	return len(src)
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
