package pathtmpl

import (
	"errors"
	"strings"
	"testing"
)

// FuzzMatch checks that Match and Param agree, that a matching path is
// rebuilt exactly from the template and its parameter values, that String
// round-trips through Parse, and that Lookup never panics and agrees with
// Match.
func FuzzMatch(f *testing.F) {
	seeds := [][2]string{
		{"/", "/"},
		{"/ucp/v1/carts/{id}", "/ucp/v1/carts/42"},
		{"/ucp/v1/carts/{id}", "/ucp/v1/carts/"},
		{"/a/{x}/", "/a/b/"},
		{"/a/{x}/", "/a//"},
		{"/{x}/{y}", "/%2F/b"},
		{"/a%2Fb", "/a%2fb"},
		{"/caf%C3%A9", "/caf%c3%a9"},
		{"/a//b", "/a//b"},
		{"/{x", "/x"},
		{"", ""},
		{"/a", "*"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	fixed := []Entry{
		{Method: "GET", Template: MustParse("/"), Index: -1},
		{Method: "GET", Template: MustParse("/{a}/{b}/{c}"), Index: -2},
	}
	f.Fuzz(func(t *testing.T, tmplStr, path string) {
		tmpl, err := Parse(tmplStr)
		if err != nil {
			return
		}
		if again, err := Parse(tmpl.String()); err != nil || again.String() != tmplStr {
			t.Fatalf("Parse(String()) = %v, %v; want %q", again, err, tmplStr)
		}
		matched := tmpl.Match(path)
		rebuilt := ""
		for _, s := range tmpl.segs {
			rebuilt += "/"
			if s.param == "" {
				rebuilt += s.lit
				continue
			}
			v, ok := tmpl.Param(path, s.param)
			if ok != matched {
				t.Fatalf("Param(%q, %q) ok = %v; want %v (Match)", path, s.param, ok, matched)
			}
			if ok && (v == "" || strings.Contains(v, "/")) {
				t.Fatalf("Param(%q, %q) = %q; want one non-empty segment", path, s.param, v)
			}
			rebuilt += v
		}
		if matched && rebuilt != path {
			t.Fatalf("template %q matched %q but rebuilds %q", tmplStr, path, rebuilt)
		}

		tab, err := NewTable([]Entry{{Method: "GET", Template: tmpl, Index: 7}})
		if err != nil {
			t.Fatalf("NewTable: %v", err)
		}
		if index, ok := tab.Lookup("GET", path); ok != matched || ok && index != 7 {
			t.Fatalf("Lookup(GET, %q) = %d, %v; want 7, %v", path, index, ok, matched)
		}
		if _, ok := tab.Lookup("HEAD", path); ok {
			t.Fatalf("Lookup(HEAD, %q) = true; want false", path)
		}

		entries := append([]Entry{{Method: "GET", Template: tmpl, Index: 7}}, fixed...)
		tab, err = NewTable(entries)
		if err != nil {
			return // ambiguous with a fixed entry
		}
		index, ok := tab.Lookup("GET", path)
		if ok && !entries[indexPos(entries, index)].Template.Match(path) {
			t.Fatalf("Lookup(GET, %q) = %d, whose template does not match", path, index)
		}
		if matched && !ok {
			t.Fatalf("Lookup(GET, %q) = false; want a match", path)
		}
	})
}

func indexPos(entries []Entry, index int) int {
	for i, e := range entries {
		if e.Index == index {
			return i
		}
	}
	return -1
}

// FuzzNormalize checks that Normalize and NormalizeRFC3986 never panic, that
// normalizing twice changes nothing, that NormalizeRFC3986 accepts every
// path that Normalize accepts, that Normalize's result has the shape
// it documents, and that Table.Match never panics and matches only what
// the normalized path matches.
func FuzzNormalize(f *testing.F) {
	for _, s := range finding2 {
		f.Add(s.path)
	}
	for _, s := range []string{"", "*", "/", "//", "/..", "/a/%2e%2E/b", "/a;b/..;c", "/%zz", "/a\\b", "/caf\u00e9", "/%", "/a%2F..%2F..%2Fb"} {
		f.Add(s)
	}
	tab, err := NewTable(ucpEntries)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string) {
		norm, err := Normalize(p)
		if err == nil {
			if again, err := Normalize(norm); err != nil || again != norm {
				t.Fatalf("Normalize(%q) = %q; Normalize of that = %q, %v", p, norm, again, err)
			}
			if norm[0] != '/' || norm != "/" && strings.HasSuffix(norm, "/") || strings.Contains(norm, "//") ||
				strings.ContainsAny(norm, ";\\ ") {
				t.Fatalf("Normalize(%q) = %q: not a normalized path", p, norm)
			}
			for seg := range strings.SplitSeq(norm[1:], "/") {
				if seg == "." || seg == ".." {
					t.Fatalf("Normalize(%q) = %q keeps a dot segment", p, norm)
				}
			}
			for i := 0; i < len(norm); i++ {
				if c := norm[i]; c >= 0x80 || c < 0x21 {
					t.Fatalf("Normalize(%q) = %q keeps byte %#x", p, norm, c)
				}
			}
		} else if !errors.Is(err, ErrInvalidPath) {
			t.Fatalf("Normalize(%q) error %v does not wrap ErrInvalidPath", p, err)
		}
		rfc, err := NormalizeRFC3986(p)
		if err != nil && norm != "" {
			// A proxy fingerprints only paths that matched, so this must hold.
			t.Fatalf("Normalize(%q) = %q, but NormalizeRFC3986 fails: %v", p, norm, err)
		}
		if err == nil {
			if again, err := NormalizeRFC3986(rfc); err != nil || again != rfc {
				t.Fatalf("NormalizeRFC3986(%q) = %q; NormalizeRFC3986 of that = %q, %v", p, rfc, again, err)
			}
		} else if !errors.Is(err, ErrInvalidPath) {
			t.Fatalf("NormalizeRFC3986(%q) error %v does not wrap ErrInvalidPath", p, err)
		}
		for _, method := range []string{"POST", "GET", "put"} {
			m, ok, err := tab.Match(method, p)
			switch {
			case err != nil:
				if ok || m.Template != nil {
					t.Fatalf("Match(%s, %q) = %+v, %v with error %v", method, p, m, ok, err)
				}
				if !errors.Is(err, ErrInvalidPath) && !errors.Is(err, ErrAmbiguousPath) {
					t.Fatalf("Match(%s, %q) error %v wraps no sentinel", method, p, err)
				}
			case ok:
				if norm, nerr := Normalize(p); nerr != nil || !m.Template.matchNormalized(norm) {
					t.Fatalf("Match(%s, %q) = %s, which Normalize's %q does not match", method, p, m.Template, norm)
				}
			}
		}
	})
}

// FuzzFinding2Spellings spells POST /ucp/v1/checkout-sessions/{id}/complete
// in every way the fuzzer's bytes choose — letters upper-cased, characters
// percent-encoded in either hex case, slashes doubled, dot segments, a
// trailing slash, the method in lower case — and checks that the spelling
// matches the route with the right session id. A spelling with ";params" or
// an encoded slash may instead be refused; it must never pass unmatched.
func FuzzFinding2Spellings(f *testing.F) {
	f.Add([]byte{}, "1")
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, "AbC")
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"), "x~y")
	f.Add([]byte("\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7"), "cs_123")
	tab, err := NewTable(ucpEntries)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, choice []byte, id string) {
		next := func() byte {
			if len(choice) == 0 {
				return 0
			}
			c := choice[0]
			choice = choice[1:]
			return c
		}
		id = strings.Map(func(r rune) rune {
			if r < 0x80 && isUnreserved(byte(r)) {
				return r
			}
			return -1
		}, id)
		if id == "" || id == "." || id == ".." {
			id = "1"
		}
		segs := []string{"ucp", "v1", "checkout-sessions", id, "complete"}
		var b strings.Builder
		mayRefuse := false
		methods := []string{"POST", "post", "Post", "pOST"}
		method := methods[next()%4]
		for i, seg := range segs {
			switch c := next(); c % 8 {
			case 1:
				b.WriteString("//")
			case 2:
				b.WriteString("/./")
			case 3:
				b.WriteString("/zz/../")
			case 4:
				b.WriteString("/zz/%2e%2E/")
			case 5:
				if i > 0 {
					b.WriteString("%2F") // an encoded slash as separator
					mayRefuse = true
				} else {
					b.WriteString("/")
				}
			default:
				b.WriteString("/")
			}
			for j := 0; j < len(seg); j++ {
				ch := seg[j]
				switch next() % 5 {
				case 1:
					if i != 3 && 'a' <= ch && ch <= 'z' {
						ch -= 'a' - 'A'
					}
					b.WriteByte(ch)
				case 2:
					b.WriteString("%" + strings.ToUpper(hex2(ch)))
				case 3:
					b.WriteString("%" + hex2(ch))
				default:
					b.WriteByte(ch)
				}
			}
			if next()%7 == 1 {
				b.WriteString(";x=1")
				mayRefuse = true
			}
		}
		switch next() % 4 {
		case 1:
			b.WriteString("/")
		case 2:
			b.WriteString("/.")
		case 3:
			b.WriteString("//")
		}
		path := b.String()
		m, ok, err := tab.Match(method, path)
		if err != nil {
			if !mayRefuse || !errors.Is(err, ErrAmbiguousPath) {
				t.Fatalf("Match(%s, %q) = %v; want entry 0 with id %q", method, path, err, id)
			}
			return
		}
		if !ok || m.Index != 0 {
			t.Fatalf("Match(%s, %q) = %+v, %v; want entry 0 with id %q", method, path, m, ok, id)
		}
		if got, _ := m.Param("id"); got != id {
			t.Fatalf("Match(%s, %q) id = %q; want %q", method, path, got, id)
		}
	})
}

func hex2(c byte) string {
	const h = "0123456789abcdef"
	return string([]byte{h[c>>4], h[c&15]})
}
