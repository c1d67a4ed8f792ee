package openapi

import (
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/pathtmpl"
)

func TestConvertPath(t *testing.T) {
	t.Parallel()
	cases := []struct {
		base, path, want string
		params           map[string]string
		notes            int
		err              string
	}{
		{"", "/pets", "/pets", nil, 0, ""},
		{"/v2", "/pets/{petId}", "/v2/pets/{petId}", map[string]string{"petId": "petId"}, 0, ""},
		{"/v2/", "/pets", "/v2/pets", nil, 0, ""},
		{"/", "/", "/", nil, 0, ""},
		{"", "/", "/", nil, 0, ""},
		{"/api", "/", "/api/", nil, 0, ""},
		{"", "/a/", "/a/", nil, 0, ""},
		{"", "/users/{user-id}/keys/{key.id}", "/users/{user_id}/keys/{key_id}", map[string]string{"user-id": "user_id", "key.id": "key_id"}, 0, ""},
		{"", "/a/{1st}", "/a/{_1st}", map[string]string{"1st": "_1st"}, 0, ""},
		{"", "/a/{x-y}/b/{x_y}", "/a/{x_y}/b/{x_y_2}", map[string]string{"x-y": "x_y", "x_y": "x_y_2"}, 0, ""},
		{"", "/files/{name}.json", "/files/{name}", map[string]string{"name": "name"}, 1, ""},
		{"", "/v1/{name}:cancel", "/v1/{name}", map[string]string{"name": "name"}, 1, ""},
		{"", "/r/{a}-{b}", "/r/{a}", map[string]string{"a": "a", "b": "a"}, 1, ""},
		{"", "/a b/ü", "/a%20b/%C3%BC", nil, 0, ""},
		{"", "/100%/x", "/100%25/x", nil, 0, ""},
		{"", "/100%/x%2Fy", "", nil, 0, "ambiguous"}, // an encoded slash: some upstreams split there
		{"", "/a//b", "/a/b", nil, 1, ""},
		{"/v%201", "/a", "/v%201/a", nil, 0, ""},
		{"", "pets", "", nil, 0, "does not start with"},
		{"v1", "/pets", "", nil, 0, "base path"},
		{"", "/a/../b", "", nil, 0, "dot segment"},
		{"", "/a/./b", "", nil, 0, "dot segment"},
		{"", "/a/{b", "", nil, 0, "unbalanced"},
		{"", "/a/b}", "", nil, 0, "unbalanced"},
		{"", "/a/{}", "", nil, 0, "empty parameter name"},
		{"", "/a/{{b}}", "", nil, 0, "unbalanced"},
		{"/{v}", "/a", "", nil, 0, "base path"},
	}
	for _, c := range cases {
		got, err := ConvertPath(c.base, c.path)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ConvertPath(%q, %q) error = %v; want one containing %q", c.base, c.path, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ConvertPath(%q, %q) = %v", c.base, c.path, err)
			continue
		}
		if got.Template != c.want || len(got.Notes) != c.notes {
			t.Errorf("ConvertPath(%q, %q) = %q, notes %q; want %q with %d notes", c.base, c.path, got.Template, got.Notes, c.want, c.notes)
		}
		for k, v := range c.params {
			if got.Params[k] != v {
				t.Errorf("ConvertPath(%q, %q).Params[%q] = %q; want %q", c.base, c.path, k, got.Params[k], v)
			}
		}
	}
}

// FuzzConvertPath: any converted template parses, every parameter of the
// document maps to a parameter of the template, and a literal-only path
// matches itself once escaped.
func FuzzConvertPath(f *testing.F) {
	for _, s := range []string{"/pets/{petId}", "/a/{x-y}.json", "/a b//c/", "/{a}{b}", "/%zz/{_}", "/v1/{name}:cancel", "/", "/a/{b/c}"} {
		f.Add("/v2", s)
		f.Add("", s)
	}
	f.Fuzz(func(t *testing.T, base, path string) {
		got, err := ConvertPath(base, path)
		if err != nil {
			return
		}
		tmpl, err := pathtmpl.Parse(got.Template)
		if err != nil {
			t.Fatalf("ConvertPath(%q, %q) = %q, which does not parse: %v", base, path, got.Template, err)
		}
		for orig, name := range got.Params {
			if !tmpl.HasParam(name) {
				t.Fatalf("ConvertPath(%q, %q): parameter %q maps to %q, not in %q", base, path, orig, name, got.Template)
			}
		}
		if len(tmpl.Params()) == 0 && !tmpl.Match(got.Template) {
			t.Fatalf("ConvertPath(%q, %q) = %q, which does not match itself", base, path, got.Template)
		}
	})
}
