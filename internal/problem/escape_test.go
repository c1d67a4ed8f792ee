package problem

import (
	"encoding/json"
	"encoding/xml"
	"net/http/httptest"
	"strings"
	"testing"
)

// render answers p through a template of spec with the request ID id.
func render(t *testing.T, spec Spec, id string) (string, string) {
	t.Helper()
	tm, err := Compile(spec)
	if err != nil {
		t.Fatalf("Compile = %v", err)
	}
	rec := httptest.NewRecorder()
	var failed error
	Write(rec, httptest.NewRequest("POST", "/", nil), Custom{T: tm, OnError: func(err error) { failed = err }},
		Problem{Status: 409, Code: "idempotency_in_progress", Title: `T "q"`, Detail: "d <x> & 'y'\n"}, id)
	if failed != nil {
		t.Fatalf("template failed: %v", failed)
	}
	return rec.Header().Get("Content-Type"), rec.Body.String()
}

// TestTemplateEscapes: every value of an errors template is escaped for
// its content type, so a hostile request ID (visible ASCII: quotes, angle
// brackets, ampersands) cannot change the body's structure. Before, a
// text/html template reflected it unescaped.
func TestTemplateEscapes(t *testing.T) {
	t.Parallel()
	const hostile = `a","admin":true,"b":"</id><admin/><script>alert(1)</script>&amp;'`
	t.Run("json without json", func(t *testing.T) {
		t.Parallel()
		for _, ct := range []string{"application/json", "application/vnd.shop+json; charset=utf-8"} {
			_, body := render(t, Spec{ContentType: ct, Body: `{"id":"{{.RequestID}}","m":"{{.Detail}}","t":{{json .Title}},"s":{{.Status}},"c":"{{with .Code}}{{.}}{{end}}"}`}, hostile)
			var got map[string]any
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("%s: body %s: %v", ct, body, err)
			}
			if got["id"] != hostile || got["m"] != "d <x> & 'y'\n" || got["t"] != `T "q"` || got["s"] != 409.0 || got["c"] != "idempotency_in_progress" || got["admin"] != nil {
				t.Errorf("%s: body %s", ct, body)
			}
			if strings.ContainsAny(body, "<>") {
				t.Errorf("%s: body %s holds < or > unescaped", ct, body)
			}
		}
	})
	t.Run("html", func(t *testing.T) {
		t.Parallel()
		ct, body := render(t, Spec{ContentType: "text/html; charset=utf-8", Body: `<p title="{{.Title}}">{{.Detail}} ({{.RequestID}})</p>`}, hostile)
		if ct != "text/html; charset=utf-8" || strings.Contains(body, "<script>") || strings.Contains(body, "<admin/>") || strings.Count(body, "<") != 2 {
			t.Errorf("%s body %s: want the values escaped", ct, body)
		}
		if !strings.Contains(body, "&lt;script&gt;") || !strings.Contains(body, "T &#34;q&#34;") {
			t.Errorf("body %s: want the escaped values", body)
		}
	})
	t.Run("xml", func(t *testing.T) {
		t.Parallel()
		for _, ct := range []string{"application/problem+xml", "text/xml"} {
			_, body := render(t, Spec{ContentType: ct, Body: `<e code="{{.Code}}" title="{{.Title}}"><id>{{.RequestID}}</id><d>{{.Detail}}</d></e>`}, hostile)
			var got struct {
				Title string    `xml:"title,attr"`
				ID    string    `xml:"id"`
				D     string    `xml:"d"`
				Admin *struct{} `xml:"admin"`
			}
			if err := xml.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("%s: body %s: %v", ct, body, err)
			}
			if got.ID != hostile || got.Title != `T "q"` || got.D != "d <x> & 'y'\n" || got.Admin != nil {
				t.Errorf("%s: body %s read as %+v", ct, body, got)
			}
		}
	})
	t.Run("plain text as written", func(t *testing.T) {
		t.Parallel()
		if _, body := render(t, Spec{ContentType: "text/plain", Body: `{{.Code}}: {{.Detail}}`}, "r-1"); body != "idempotency_in_progress: d <x> & 'y'\n" {
			t.Errorf("body %q", body)
		}
	})
	t.Run("json: declarations, conditions and defined templates", func(t *testing.T) {
		t.Parallel()
		_, body := render(t, Spec{Body: `{{define "id"}}"{{.}}"{{end}}{{$c := .Code}}{"c":"{{$c}}","in":{{if eq .Code "idempotency_in_progress"}}true{{else}}false{{end}},"id":{{template "id" .RequestID}}}`}, hostile)
		var got map[string]any
		if err := json.Unmarshal([]byte(body), &got); err != nil || got["c"] != "idempotency_in_progress" || got["in"] != true || got["id"] != hostile {
			t.Errorf("body %s: %v", body, err)
		}
	})
}

// The GraphQL extensions template is JSON: its values are escaped too.
func TestExtensionsEscaped(t *testing.T) {
	t.Parallel()
	tm, err := Compile(Spec{Extensions: `{"request":"{{.RequestID}}"}`})
	if err != nil {
		t.Fatal(err)
	}
	const hostile = `x","admin":true,"y":"`
	ext, err := tm.Extensions(Problem{Status: 409, Code: "c"}, hostile)
	if err != nil || ext["request"] != hostile || ext["admin"] != nil {
		t.Errorf("extensions = %v, %v", ext, err)
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	for v, kept := range map[string]bool{
		"abc-1": true, `a"b\c<d>&'`: true, strings.Repeat("x", 200): true,
		"": false, strings.Repeat("x", 201): false, "a b": false, "a\tb": false, "é": false, "a\x7f": false, "a\x00": false,
	} {
		got := RequestID(v)
		if (got == v) != kept {
			t.Errorf("RequestID(%q) = %q; kept %v, want %v", v, got, got == v, kept)
		}
		if got == "" || len(got) > maxRequestIDLen {
			t.Errorf("RequestID(%q) = %q", v, got)
		}
	}
}
