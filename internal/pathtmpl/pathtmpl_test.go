package pathtmpl

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in       string
		params   []string
		literals int
	}{
		{"/", nil, 0},
		{"/ucp/v1/carts", nil, 3},
		{"/ucp/v1/carts/", nil, 3},
		{"/ucp/v1/carts/{id}", []string{"id"}, 3},
		{"/{a}/{B_2}/{_c}", []string{"a", "B_2", "_c"}, 0},
		{"/a%2Bb/x:y@z/[v]/~!$&'()*+,=", nil, 4},
		{"/caf%c3%a9/%7Eme/%41", nil, 3},
		{"/{id}/", []string{"id"}, 0},
		{"/.well-known/...", nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			tmpl, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q) = %v; want nil", tt.in, err)
			}
			if got := tmpl.String(); got != tt.in {
				t.Errorf("String() = %q; want %q", got, tt.in)
			}
			if got := tmpl.Params(); !slices.Equal(got, tt.params) {
				t.Errorf("Params() = %q; want %q", got, tt.params)
			}
			if got := tmpl.Literals(); got != tt.literals {
				t.Errorf("Literals() = %d; want %d", got, tt.literals)
			}
			for _, p := range tt.params {
				if !tmpl.HasParam(p) {
					t.Errorf("HasParam(%q) = false; want true", p)
				}
			}
			if tmpl.HasParam("nope") {
				t.Errorf("HasParam(%q) = true; want false", "nope")
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "empty"},
		{"relative", "a/b", "must start with"},
		{"double slash", "/a//b", "empty segment"},
		{"leading double slash", "//a", "empty segment"},
		{"trailing double slash", "/a//", "empty segment"},
		{"brace inside literal", "/a{id}", "whole parameter segment"},
		{"brace suffix", "/{id}x", "whole segment"},
		{"closing brace only", "/a}", "whole parameter segment"},
		{"empty name", "/{}", "empty parameter name"},
		{"name starts with digit", "/{1a}", "must match"},
		{"name with dash", "/{a-b}", "must match"},
		{"duplicate param", "/{id}/x/{id}", "appears twice"},
		{"space", "/a b", "not allowed"},
		{"query", "/a?b", "not allowed"},
		{"fragment", "/a#b", "not allowed"},
		{"bad escape", "/a%zz", "hex escape"},
		{"short escape", "/a%2", "hex escape"},
		{"dot", "/a/./b", "dot segments"},
		{"dot dot", "/a/..", "dot segments"},
		{"non-ascii", "/caf\u00e9", "not allowed"},
		{"semicolon", "/a;b", "starts parameters"},
		{"semicolon alone", "/a/;", "starts parameters"},
		{"encoded slash", "/a%2Fb", "separator"},
		{"encoded slash lower", "/a%2fb", "separator"},
		{"encoded backslash", "/a%5cb", "separator"},
		{"encoded semicolon", "/a%3Bb", "separator"},
		{"encoded dot", "/a/%2E", "encoded dot segment"},
		{"encoded dot dot", "/a/%2e%2E/b", "encoded dot segment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tmpl, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse(%q) = %v, nil; want error", tt.in, tmpl)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse(%q) error %v does not wrap ErrInvalid", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q) error = %q; want it to contain %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestMustParsePanics(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Errorf("MustParse(%q) did not panic; want panic", "bad")
		}
	}()
	MustParse("bad")
}

func TestMatchAndParam(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tmpl, path string
		match      bool
		params     map[string]string
	}{
		{"/", "/", true, nil},
		{"/", "", false, nil},
		{"/", "//", false, nil},
		{"/a", "/a", true, nil},
		{"/a", "/a/", false, nil},
		{"/a/", "/a", false, nil},
		{"/a/", "/a/", true, nil},
		{"/a", "/A", false, nil},
		{"/a", "a", false, nil},
		{"/a", "*", false, nil},
		{"/a/b", "/a", false, nil},
		{"/a", "/a/b", false, nil},
		{"/carts/{id}", "/carts/42", true, map[string]string{"id": "42"}},
		{"/carts/{id}", "/carts/", false, nil},
		{"/carts/{id}", "/carts", false, nil},
		{"/carts/{id}", "/carts/42/", false, nil},
		{"/carts/{id}", "/carts/42/items", false, nil},
		{"/carts/{id}", "/carts/AbC%2Fd", true, map[string]string{"id": "AbC%2Fd"}},
		{"/carts/{id}/", "/carts/42/", true, map[string]string{"id": "42"}},
		{"/carts/{id}/", "/carts//", false, nil},
		{"/caf%C3%A9", "/caf%C3%A9", true, nil},
		{"/caf%C3%A9", "/caf%c3%a9", false, nil},
		{"/caf%C3%A9", "/caf\u00e9", false, nil},
		{"/{x}/{y}", "/1/2", true, map[string]string{"x": "1", "y": "2"}},
		{"/{x}/{y}", "//2", false, nil},
		{"/{x}", "/", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.tmpl+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			tmpl := MustParse(tt.tmpl)
			if got := tmpl.Match(tt.path); got != tt.match {
				t.Errorf("Match(%q) = %v; want %v", tt.path, got, tt.match)
			}
			for _, name := range tmpl.Params() {
				got, ok := tmpl.Param(tt.path, name)
				want, wantOK := tt.params[name]
				if got != want || ok != wantOK {
					t.Errorf("Param(%q, %q) = %q, %v; want %q, %v", tt.path, name, got, ok, want, wantOK)
				}
			}
			if got, ok := tmpl.Param(tt.path, "missing"); got != "" || ok {
				t.Errorf("Param(%q, %q) = %q, %v; want \"\", false", tt.path, "missing", got, ok)
			}
		})
	}
}

func TestOverlapAndAmbiguous(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b      string
		overlap   string // "" when none
		ambiguous bool
	}{
		{"/a/{x}", "/{y}/b", "/a/b", true},
		{"/a/{x}", "/a/{y}", "/a/{x}", true},
		{"/a/{x}", "/a/b", "/a/b", false},
		{"/a/b", "/a/b", "/a/b", true},
		{"/a/b", "/a/c", "", false},
		{"/a", "/a/", "", false},
		{"/a/", "/{x}/", "/a/", false},
		{"/{x}/", "/{y}/", "/{x}/", true},
		{"/{x}", "/", "", false},
		{"/", "/", "/", true},
		{"/a/{x}", "/a/{x}/c", "", false},
		{"/{x}/b/{z}", "/a/{y}/c", "/a/b/c", false},
		{"/{x}/b/{z}", "/a/{y}/{w}", "/a/b/{z}", true},
	}
	for _, tt := range tests {
		t.Run(tt.a+" "+tt.b, func(t *testing.T) {
			t.Parallel()
			a, b := MustParse(tt.a), MustParse(tt.b)
			for _, pair := range [][2]*Template{{a, b}, {b, a}} {
				got, ok := Overlap(pair[0], pair[1])
				if ok != (tt.overlap != "") {
					t.Fatalf("Overlap(%s, %s) = %q, %v; want ok %v", pair[0], pair[1], got, ok, tt.overlap != "")
				}
				if ok && (!pair[0].Match(got) || !pair[1].Match(got)) {
					t.Errorf("Overlap(%s, %s) = %q, which does not match both", pair[0], pair[1], got)
				}
				if gotAmb := Ambiguous(pair[0], pair[1]); gotAmb != tt.ambiguous {
					t.Errorf("Ambiguous(%s, %s) = %v; want %v", pair[0], pair[1], gotAmb, tt.ambiguous)
				}
			}
			if got, _ := Overlap(a, b); got != tt.overlap {
				t.Errorf("Overlap(%s, %s) = %q; want %q", a, b, got, tt.overlap)
			}
		})
	}
}
