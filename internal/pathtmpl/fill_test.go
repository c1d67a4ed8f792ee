package pathtmpl

import (
	"net/url"
	"strings"
	"testing"
)

func TestEscapeSegment(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"unreserved", "aZ09-_~", "aZ09-_~"},
		{"dot", ".", "%2E"},
		{"dot dot", "..", "%2E%2E"},
		{"slash", "/", "%2F"},
		{"traversal", "../admin", "%2E%2E%2Fadmin"},
		{"backslash", `a\b`, "a%5Cb"},
		{"percent", "%", "%25"},
		{"an escape stays text", "%2F", "%252F"},
		{"semicolon", "a;b=c", "a%3Bb%3Dc"},
		{"query and fragment", "a?b#c", "a%3Fb%23c"},
		{"space and plus", "a b+c", "a%20b%2Bc"},
		{"unicode", "café", "caf%C3%A9"},
		{"invalid utf-8", "\xff\x00", "%FF%00"},
		{"braces", "{key}", "%7Bkey%7D"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := escapeSegment(tt.in); got != tt.want {
				t.Errorf("escapeSegment(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFill(t *testing.T) {
	t.Parallel()
	vals := map[string]string{"key": "k/../1", "id": "café", "empty": "", "dot": ".", "dots": ".."}
	value := func(n string) (string, bool) { v, ok := vals[n]; return v, ok }
	tests := []struct {
		name, tmpl, want, err string
	}{
		{"key", "/orders/by-ref/{key}", "/orders/by-ref/k%2F%2E%2E%2F1", ""},
		{"two", "/carts/{id}/orders/{key}", "/carts/caf%C3%A9/orders/k%2F%2E%2E%2F1", ""},
		{"trailing slash", "/o/{key}/", "/o/k%2F%2E%2E%2F1/", ""},
		{"literal kept", "/a%20b/{id}", "/a%20b/caf%C3%A9", ""},
		{"root", "/", "/", ""},
		{"unknown param", "/o/{ref}", "", "no value for {ref}"},
		{"empty value", "/o/{empty}", "", "is empty"},
		{"dot value", "/o/{dot}", "", "dot segment"},
		{"dot dot value", "/o/{dots}/x", "", "dot segment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := MustParse(tt.tmpl).Fill(value)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Fill = %q, %v; want an error with %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Fill = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// FuzzEscapeSegment checks that an escaped value is one segment of safe
// bytes and escapes, that it decodes to the value, and
// that a template filled with it matches the path, with the value, whole,
// as the parameter.
func FuzzEscapeSegment(f *testing.F) {
	for _, s := range []string{"", ".", "..", "/", "%", "%2F", "a b", "café", "\x00", "k-1_~"} {
		f.Add(s)
	}
	tmpl := MustParse("/a/{v}/b")
	f.Fuzz(func(t *testing.T, v string) {
		esc := escapeSegment(v)
		for i := 0; i < len(esc); i++ {
			c := esc[i]
			if c == '%' {
				if i+2 >= len(esc) || !isHex(esc[i+1]) || !isHex(esc[i+2]) {
					t.Fatalf("escapeSegment(%q) = %q: a bad escape at %d", v, esc, i)
				}
				i += 2
				continue
			}
			if !isSegmentSafe(c) {
				t.Fatalf("escapeSegment(%q) = %q: byte %q left unescaped", v, esc, c)
			}
		}
		if dec, err := url.PathUnescape(esc); err != nil || dec != v {
			t.Fatalf("escapeSegment(%q) = %q decodes to %q, %v", v, esc, dec, err)
		}
		p, err := tmpl.Fill(func(string) (string, bool) { return v, true })
		if v == "" || v == "." || v == ".." {
			if err == nil {
				t.Fatalf("Fill(%q) = %q; want an error", v, p)
			}
			return
		}
		if err != nil {
			t.Fatalf("Fill(%q): %v", v, err)
		}
		if got, ok := tmpl.Param(p, "v"); !ok || got != esc {
			t.Fatalf("Fill(%q) = %q: parameter %q, %v; want %q", v, p, got, ok, esc)
		}
		if n, err := Normalize(p); err == nil && strings.Count(n, "/") != 3 {
			t.Fatalf("Fill(%q) = %q normalizes to %q; want three segments", v, p, n)
		}
	})
}
