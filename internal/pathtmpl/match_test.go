package pathtmpl

import (
	"errors"
	"strings"
	"testing"
)

// ucpEntries are a UCP checkout's routes; index 0 is the route of issue 13's
// finding 2.
var ucpEntries = []Entry{
	{Method: "POST", Template: MustParse("/ucp/v1/checkout-sessions/{id}/complete"), Index: 0, Protected: true},
	{Method: "POST", Template: MustParse("/ucp/v1/checkout-sessions"), Index: 1, Protected: true},
	{Method: "PUT", Template: MustParse("/ucp/v1/checkout-sessions/{id}"), Index: 2, Protected: true},
	{Method: "GET", Template: MustParse("/ucp/v1/checkout-sessions/{id}"), Index: 3},
	{Method: "GET", Template: MustParse("/ucp/v1/checkout-sessions/current"), Index: 4},
	{Method: "GET", Template: MustParse("/"), Index: 5},
	{Method: "POST", Template: MustParse("/ucp/v1/checkout-sessions/{id}/cancel"), Index: 6, Protected: true},
}

// finding2 is every spelling of POST /ucp/v1/checkout-sessions/1/complete
// that issue 13's finding 2 and its review name, with what Match must do:
// id is the session id it must find; "" means it must refuse the request.
var finding2 = []struct {
	method, path, id string
}{
	{"POST", "/ucp/v1/checkout-sessions/1/complete", "1"},
	{"post", "/ucp/v1/checkout-sessions/1/complete", "1"},
	{"Post", "/ucp/v1/checkout-sessions/1/complete", "1"},
	{"POST", "/ucp/v1/checkout-sessions/1/complete/", "1"},
	{"POST", "/ucp/v1/checkout-sessions/1/complete//", "1"},
	{"POST", "/ucp/v1/checkout-sessions/1/%63omplete", "1"},
	{"POST", "/ucp/v1/checkout-sessions/1/%63%6F%6d%70lete", "1"},
	{"POST", "/ucp/v1/checkout-sessions/1/%43OMPLETE", "1"},
	{"POST", "/%75cp/v1/checkout%2dsessions/1/complete", "1"},
	{"POST", "/UCP/V1/Checkout-Sessions/1/COMPLETE", "1"},
	{"POST", "/UCP/v1/checkout-sessions/1/complete", "1"},
	{"POST", "//ucp//v1//checkout-sessions//1//complete", "1"},
	{"POST", "/ucp/v1/./checkout-sessions/1/complete", "1"},
	{"POST", "/ucp/v1/checkout-sessions/./1/./complete/.", "1"},
	{"POST", "/ucp/v1/x/../checkout-sessions/1/complete", "1"},
	{"POST", "/ucp/v1/x/%2e%2e/checkout-sessions/1/complete", "1"},
	{"POST", "/ucp/v1/x/%2E%2E/checkout-sessions/1/complete", "1"},
	{"POST", "/ucp/v1/checkout-sessions/2/%2e%2e/1/complete", "1"},
	{"POST", "/ucp/v1/checkout-sessions/1/complete/x/..", "1"},
	{"POST", "/ucp/v1/chec%E2%84%AAout-sessions/1/complete", "1"},     // Kelvin sign K
	{"POST", "/ucp/v1/checkout-%C5%BFessions/1/complete", "1"},        // long s ſ
	{"POST", "/ucp/v1/checkout-%c5%bfessions/1/complete", "1"},        // long s ſ, lower hex
	{"POST", "/ucp/v1/checkout-sessions/AbC/complete", "AbC"},         // the id keeps its case
	{"POST", "/ucp/v1/checkout-sessions/%41b%7e/complete", "Ab~"},     // and is decoded
	{"POST", "/ucp/v1/checkout-sessions/a%2Bb/complete", "a+b"},       // sub-delims too
	{"POST", "/ucp/v1/checkout-sessions/a%20b/complete", "a%20b"},     // others stay encoded
	{"POST", "/ucp/v1/checkout-sessions/a%c3%a9/complete", "a%C3%A9"}, // in upper case
	{"POST", "/ucp/v1/checkout-sessions/1/complete;x=1", ""},
	{"POST", "/ucp/v1/checkout-sessions/1/complete;", ""},
	{"POST", "/ucp/v1/checkout-sessions/1;jsessionid=x/complete", ""},
	{"POST", "/ucp/v1/checkout-sessions/1/..;/1/complete", ""},
	{"POST", "/ucp/v1/checkout-sessions/1/complete%3Bx=1", ""},
	{"POST", "/ucp/v1/checkout-sessions/1/complete%3bx=1", ""},
	{"POST", "/ucp/v1/checkout-sessions/1%2fcomplete", ""},
	{"POST", "/ucp/v1/checkout-sessions/1%2Fcomplete", ""},
	{"POST", "/ucp/v1/checkout-sessions%2F1%2Fcomplete", ""},
	{"POST", "/ucp/v1/checkout-sessions/1/complete%2F", ""},
	{"POST", "/ucp/v1/checkout-sessions/1%5ccomplete", ""},
	{"POST", "/ucp/v1/checkout-sessions/1\\complete", ""},
	{"POST", "/ucp/v1/checkout-sessions/1/x%2F..%2F..%2F1/complete", ""},
	{"POST", "/x%2F..%2F..%2Fucp/v1/checkout-sessions/1/complete", ""},
	{"POST", "/%2e%2e/ucp/v1/checkout-sessions/1/complete", ""},
	{"POST", "/../ucp/v1/checkout-sessions/1/complete", ""},
	{"POST", "/ucp/v1/checkout-sessions/1/complete%", ""},
	{"POST", "/ucp/v1/checkout-sessions/1/complete%zz", ""},
	{"POST", "/ucp/v1/checkout-sessions/1/%6", ""},
}

func TestMatchFinding2(t *testing.T) {
	t.Parallel()
	tab, err := NewTable(ucpEntries)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	for _, tt := range finding2 {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			m, ok, err := tab.Match(tt.method, tt.path)
			if tt.id == "" {
				if err == nil || !errors.Is(err, ErrAmbiguousPath) && !errors.Is(err, ErrInvalidPath) {
					t.Fatalf("Match = %+v, %v, %v; want ErrAmbiguousPath or ErrInvalidPath", m, ok, err)
				}
				if ok || m.Template != nil {
					t.Errorf("Match with error returned a match %+v, %v", m, ok)
				}
				return
			}
			if err != nil || !ok || m.Index != 0 || !m.Protected || m.Template != ucpEntries[0].Template {
				t.Fatalf("Match = %+v, %v, %v; want entry 0", m, ok, err)
			}
			if id, ok := m.Param("id"); id != tt.id || !ok {
				t.Errorf("Param(id) = %q, %v; want %q, true", id, ok, tt.id)
			}
			if v, ok := m.Param("missing"); v != "" || ok {
				t.Errorf("Param(missing) = %q, %v; want \"\", false", v, ok)
			}
		})
	}
}

// TestMatchFinding2Errors checks which sentinel each refusal wraps.
func TestMatchFinding2Errors(t *testing.T) {
	t.Parallel()
	tab, err := NewTable(ucpEntries)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	tests := []struct {
		path string
		want error
	}{
		{"/ucp/v1/checkout-sessions/1/complete;x=1", ErrAmbiguousPath},
		{"/ucp/v1/checkout-sessions/1%2fcomplete", ErrAmbiguousPath},
		{"/ucp/v1/checkout-sessions/1;jsessionid=x/complete", ErrAmbiguousPath},
		{"/%2e%2e/ucp/v1/checkout-sessions/1/complete", ErrInvalidPath},
		{"/ucp/v1/checkout-sessions/1/complete%zz", ErrInvalidPath},
		{"/ucp/v1/checkout-sessions/1/x%2F..%2F..%2F1/complete", ErrAmbiguousPath},
		{"/x%2F..%2F..%2Fucp/v1/checkout-sessions/1/complete", ErrInvalidPath},
	}
	for _, tt := range tests {
		_, _, err := tab.Match("POST", tt.path)
		if !errors.Is(err, tt.want) {
			t.Errorf("Match(POST, %q) error = %v; want %v", tt.path, err, tt.want)
		}
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	tab, err := NewTable(ucpEntries)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	tests := []struct {
		method, path string
		index        int // -1: no match
		err          error
	}{
		{"GET", "/", 5, nil},
		{"get", "//", 5, nil},
		{"GET", "/ucp/..", 5, nil},
		{"GET", "*", -1, nil},
		{"GET", "", -1, nil},
		{"OPTIONS", "*", -1, nil},
		{"GET", "/ucp/v1/checkout-sessions/current", 4, nil},
		{"GET", "/ucp/v1/checkout-sessions/CURRENT/", 4, nil},
		{"GET", "/ucp/v1/checkout-sessions/%63urrent", 4, nil},
		{"GET", "/ucp/v1/checkout-sessions/other", 3, nil},
		{"HEAD", "/ucp/v1/checkout-sessions/other", -1, nil},
		{"DELETE", "/ucp/v1/checkout-sessions/other", -1, nil},
		{"POST", "/ucp/v1/checkout-sessions/", 1, nil},
		{"POST", "/ucp/v1/orders/7/cancel", -1, nil},
		{"POST", "/ucp/v1/checkout-sessions/1/cancel", 6, nil},
		// Unprotected readings that disagree: GET routes are unprotected, so
		// the path matches as Normalize reads it.
		{"GET", "/ucp/v1/checkout-sessions/a%2Fb", 3, nil},
		{"GET", "/ucp/v1/checkout-sessions/a;b", 3, nil},
		{"GET", "/ucp/v1/checkout-sessions%2Fcurrent", -1, nil},
		// A protected route reached by one reading only.
		{"PUT", "/ucp/v1/checkout-sessions/a%2Fb", -1, ErrAmbiguousPath},
		{"PUT", "/ucp/v1/checkout-sessions/a;b", -1, ErrAmbiguousPath},
		{"PUT", "/ucp/v1/checkout-sessions/a%3Bb", -1, ErrAmbiguousPath},
		{"PUT", "/ucp/v1/checkout-sessions/a%5Cb", -1, ErrAmbiguousPath},
		{"PUT", "/ucp/v1/checkout-sessions%2Fa", -1, ErrAmbiguousPath},
		{"POST", "/ucp/v1/checkout-sessions/1/;x/complete", -1, ErrAmbiguousPath},
		{"POST", "/ucp/v1/checkout-sessions/1/x;/complete", -1, nil},    // no reading matches
		{"PUT", "/ucp/v1/checkout-sessions/a;", -1, ErrAmbiguousPath},   // id "a" or "a;"
		{"PUT", "/ucp/v1/checkout-sessions/a/;", -1, ErrAmbiguousPath},  // a segment ";" cut or kept
		{"PUT", "/ucp/v1/checkout-sessions/a%2F", -1, ErrAmbiguousPath}, // id "a%2F" or "a"
		// Readings that agree are no reason to refuse.
		{"POST", "/ucp/v1/nothing%2Fhere", -1, nil},
		{"POST", "/ucp/v1/a;b/c", -1, nil},
		// Invalid paths on a table with protected entries, whatever the method.
		{"GET", "/..", -1, ErrInvalidPath},
		{"GET", "/a%zz", -1, ErrInvalidPath},
		{"PATCH", "/a%", -1, ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			m, ok, err := tab.Match(tt.method, tt.path)
			if tt.err != nil {
				if !errors.Is(err, tt.err) || ok {
					t.Fatalf("Match = %+v, %v, %v; want error %v", m, ok, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Match = %v; want nil error", err)
			}
			if tt.index < 0 {
				if ok || m.Template != nil {
					t.Fatalf("Match = %+v, true; want no match", m)
				}
				return
			}
			if !ok || m.Index != tt.index {
				t.Fatalf("Match = %+v, %v; want index %d", m, ok, tt.index)
			}
		})
	}
}

func TestMatchCaseSensitive(t *testing.T) {
	t.Parallel()
	tab, err := NewTableOptions(ucpEntries, Options{Case: CaseSensitive})
	if err != nil {
		t.Fatalf("NewTableOptions: %v", err)
	}
	tests := []struct {
		method, path string
		index        int // -1: no match
	}{
		{"POST", "/ucp/v1/checkout-sessions/1/complete", 0},
		{"post", "/ucp/v1/checkout-sessions/1/complete/", 0},
		{"POST", "/ucp/v1/checkout-sessions/1/%63omplete", 0},
		{"POST", "/UCP/v1/checkout-sessions/1/complete", -1},
		{"POST", "/ucp/v1/checkout-sessions/1/Complete", -1},
		{"POST", "/ucp/v1/checkout-sessions/1/%43omplete", -1},
		{"POST", "/ucp/v1/checkout-%C5%BFessions/1/complete", -1},
		{"GET", "/ucp/v1/checkout-sessions/Current", 3},
	}
	for _, tt := range tests {
		m, ok, err := tab.Match(tt.method, tt.path)
		if err != nil {
			t.Errorf("Match(%s, %q) = %v; want nil error", tt.method, tt.path, err)
			continue
		}
		if tt.index < 0 && ok || tt.index >= 0 && (!ok || m.Index != tt.index) {
			t.Errorf("Match(%s, %q) = %d, %v; want index %d", tt.method, tt.path, m.Index, ok, tt.index)
		}
	}
}

// TestMatchUnprotectedNeverFails checks that a table without protected
// entries matches every path as Normalize reads it and never refuses one.
func TestMatchUnprotectedNeverFails(t *testing.T) {
	t.Parallel()
	var entries []Entry
	for _, e := range ucpEntries {
		e.Protected = false
		entries = append(entries, e)
	}
	tab, err := NewTable(entries)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	for _, tt := range finding2 {
		m, ok, err := tab.Match(tt.method, tt.path)
		if err != nil {
			t.Errorf("Match(%s, %q) = %v; want nil error", tt.method, tt.path, err)
			continue
		}
		norm, nerr := Normalize(tt.path)
		wantOK := nerr == nil && ucpEntries[0].Template.matchNormalized(norm)
		if ok != wantOK || ok && m.Index != 0 {
			t.Errorf("Match(%s, %q) = %d, %v; want entry 0 iff Normalize (%q, %v) matches it", tt.method, tt.path, m.Index, ok, norm, nerr)
		}
		if ok && m.Protected {
			t.Errorf("Match(%s, %q).Protected = true", tt.method, tt.path)
		}
	}
}

// matchNormalized reports whether norm, a normalized path, matches t with
// case folded; it is a second, simpler implementation for the tests.
func (t *Template) matchNormalized(norm string) bool {
	segs := strings.Split(norm, "/")[1:]
	if norm == "/" {
		segs = nil
	}
	if len(segs) != len(t.norm) {
		return false
	}
	for i, s := range t.norm {
		if s.param == "" && fold(s.lit, CaseInsensitive) != fold(segs[i], CaseInsensitive) {
			return false
		}
	}
	return true
}

func TestNilTableMatch(t *testing.T) {
	t.Parallel()
	var tab *Table
	if m, ok, err := tab.Match("GET", "/"); ok || err != nil || m.Template != nil {
		t.Errorf("nil Match = %+v, %v, %v; want no match", m, ok, err)
	}
	var m Match
	if v, ok := m.Param("id"); v != "" || ok {
		t.Errorf("zero Match.Param = %q, %v", v, ok)
	}
}

func TestParseCase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Case{"": CaseInsensitive, "insensitive": CaseInsensitive, "sensitive": CaseSensitive} {
		got, err := ParseCase(in)
		if err != nil || got != want {
			t.Errorf("ParseCase(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"Sensitive", "INSENSITIVE", "yes", "true"} {
		if _, err := ParseCase(in); err == nil {
			t.Errorf("ParseCase(%q) = nil error; want error", in)
		}
	}
	if CaseSensitive.String() != "sensitive" || CaseInsensitive.String() != "insensitive" {
		t.Errorf("String = %q, %q", CaseSensitive, CaseInsensitive)
	}
}

func TestAmbiguousNormalized(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b                   string
		insensitive, sensitive bool
	}{
		{"/a", "/a/", true, true},
		{"/a/{x}/", "/a/{y}", true, true},
		{"/A/{x}", "/a/{y}", true, false},
		{"/a/{x}", "/{y}/B", true, true},
		{"/a/{x}", "/{y}/b", true, true},
		{"/caf%C3%A9", "/caf%c3%a9", true, true},
		{"/%7Ea", "/~a", true, true},
		{"/%41", "/a", true, false},
		{"/items%3abatch", "/items:batch", true, true},
		{"/chec%E2%84%AAout", "/checkout", true, false},
		{"/checkout-%C5%BFessions", "/checkout-Sessions", true, false},
		{"/", "/", true, true},
		{"/a/b", "/a/c", false, false},
		{"/a/{x}", "/a/b", false, false},
		{"/a", "/a/b", false, false},
		{"/{x}", "/", false, false},
	}
	for _, tt := range tests {
		a, b := MustParse(tt.a), MustParse(tt.b)
		for _, c := range []Case{CaseInsensitive, CaseSensitive} {
			want := tt.insensitive
			if c == CaseSensitive {
				want = tt.sensitive
			}
			for _, pair := range [][2]*Template{{a, b}, {b, a}} {
				ex, ok := AmbiguousNormalized(pair[0], pair[1], c)
				if ok != want {
					t.Errorf("AmbiguousNormalized(%s, %s, %s) = %q, %v; want %v", pair[0], pair[1], c, ex, ok, want)
					continue
				}
				if !ok {
					continue
				}
				// The example, its parameters filled in, matches both.
				path := strings.NewReplacer("{x}", "v", "{y}", "v").Replace(ex)
				tab, err := NewTableOptions([]Entry{{Method: "GET", Template: pair[0]}}, Options{Case: c})
				if err != nil {
					t.Fatal(err)
				}
				tab2, err := NewTableOptions([]Entry{{Method: "GET", Template: pair[1]}}, Options{Case: c})
				if err != nil {
					t.Fatal(err)
				}
				if _, ok1, _ := tab.Match("GET", path); !ok1 {
					t.Errorf("example %q of (%s, %s) does not match %s", path, pair[0], pair[1], pair[0])
				}
				if _, ok2, _ := tab2.Match("GET", path); !ok2 {
					t.Errorf("example %q of (%s, %s) does not match %s", path, pair[0], pair[1], pair[1])
				}
			}
		}
	}
}

func TestNewTableOptionsAmbiguous(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entries []Entry
		c       Case
		refused bool
	}{
		{"trailing slash", []Entry{
			{Method: "POST", Template: MustParse("/a"), Index: 1},
			{Method: "POST", Template: MustParse("/a/"), Index: 2},
		}, CaseSensitive, true},
		{"method case", []Entry{
			{Method: "POST", Template: MustParse("/a"), Index: 1},
			{Method: "post", Template: MustParse("/a"), Index: 2},
		}, CaseSensitive, true},
		{"literal case", []Entry{
			{Method: "POST", Template: MustParse("/a/{x}"), Index: 1},
			{Method: "POST", Template: MustParse("/A/{y}"), Index: 2},
		}, CaseInsensitive, true},
		{"literal case, sensitive", []Entry{
			{Method: "POST", Template: MustParse("/a/{x}"), Index: 1},
			{Method: "POST", Template: MustParse("/A/{y}"), Index: 2},
		}, CaseSensitive, false},
		{"encoding", []Entry{
			{Method: "POST", Template: MustParse("/%61"), Index: 1},
			{Method: "POST", Template: MustParse("/a"), Index: 2},
		}, CaseSensitive, true},
		{"other methods", []Entry{
			{Method: "POST", Template: MustParse("/a"), Index: 1},
			{Method: "PUT", Template: MustParse("/A/"), Index: 2},
		}, CaseInsensitive, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewTableOptions(tt.entries, Options{Case: tt.c})
			if (err != nil) != tt.refused {
				t.Fatalf("NewTableOptions = %v; want refused %v", err, tt.refused)
			}
			if err != nil && (!errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "index 1") || !strings.Contains(err.Error(), "index 2")) {
				t.Errorf("error %q does not wrap ErrAmbiguous and name both entries", err)
			}
		})
	}
}

func BenchmarkMatch(b *testing.B) {
	tab, err := NewTable(ucpEntries)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []string{
		"/ucp/v1/checkout-sessions/cs_123/complete",
		"/UCP/v1/checkout-sessions/cs_123/%63omplete/",
		"/ucp/v1/checkout-sessions/cs_123;x=1/complete",
		"/ucp/v1/unrouted/path/of/six",
	} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _, _ = tab.Match("POST", p)
			}
		})
	}
}
