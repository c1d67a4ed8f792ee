package pathtmpl

import (
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
