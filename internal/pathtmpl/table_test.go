package pathtmpl

import (
	"errors"
	"strings"
	"testing"
)

var testEntries = []Entry{
	{Method: "POST", Template: MustParse("/ucp/v1/carts"), Index: 0},
	{Method: "PUT", Template: MustParse("/ucp/v1/checkout-sessions/{id}"), Index: 1},
	{Method: "GET", Template: MustParse("/ucp/v1/checkout-sessions/{id}"), Index: 2},
	{Method: "GET", Template: MustParse("/ucp/v1/checkout-sessions/current"), Index: 3},
	{Method: "GET", Template: MustParse("/ucp/v1/{kind}/{id}/items"), Index: 4},
	{Method: "GET", Template: MustParse("/ucp/v1/carts/{id}/items"), Index: 5},
	{Method: "GET", Template: MustParse("/ucp/v1/carts/"), Index: 6},
	{Method: "GET", Template: MustParse("/"), Index: 7},
	{Method: "HEAD", Template: MustParse("/ucp/v1/checkout-sessions/{id}"), Index: 8},
}

func TestTableLookup(t *testing.T) {
	t.Parallel()
	tab, err := NewTable(testEntries)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	tests := []struct {
		method, path string
		index        int
		ok           bool
	}{
		{"POST", "/ucp/v1/carts", 0, true},
		{"POST", "/ucp/v1/carts/", 0, false},
		{"GET", "/ucp/v1/carts", 0, false},
		{"post", "/ucp/v1/carts", 0, false},
		{"PUT", "/ucp/v1/checkout-sessions/abc", 1, true},
		{"GET", "/ucp/v1/checkout-sessions/abc", 2, true},
		{"HEAD", "/ucp/v1/checkout-sessions/abc", 8, true},
		{"GET", "/ucp/v1/checkout-sessions/current", 3, true},
		{"GET", "/ucp/v1/checkout-sessions/Current", 2, true},
		{"GET", "/ucp/v1/carts/7/items", 5, true},
		{"GET", "/ucp/v1/orders/7/items", 4, true},
		{"GET", "/ucp/v1/carts/", 6, true},
		{"GET", "/", 7, true},
		{"GET", "", 0, false},
		{"GET", "*", 0, false},
		{"GET", "/ucp/v1/checkout-sessions/abc/", 0, false},
		{"GET", "/ucp/v1/a/b/c/d/e/f/g/h", 0, false},
		{"DELETE", "/ucp/v1/checkout-sessions/abc", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			index, ok := tab.Lookup(tt.method, tt.path)
			if index != tt.index || ok != tt.ok {
				t.Errorf("Lookup(%q, %q) = %d, %v; want %d, %v", tt.method, tt.path, index, ok, tt.index, tt.ok)
			}
		})
	}
}

func TestNilTableLookup(t *testing.T) {
	t.Parallel()
	var tab *Table
	if index, ok := tab.Lookup("GET", "/"); index != 0 || ok {
		t.Errorf("nil Lookup = %d, %v; want 0, false", index, ok)
	}
}

func TestNewTableErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entries []Entry
		want    []string
		amb     bool
	}{
		{
			name: "ambiguous",
			entries: []Entry{
				{Method: "GET", Template: MustParse("/a/{x}"), Index: 4},
				{Method: "GET", Template: MustParse("/{y}/b"), Index: 9},
			},
			want: []string{"GET /a/{x} (index 4)", "GET /{y}/b (index 9)"},
			amb:  true,
		},
		{
			name: "same template",
			entries: []Entry{
				{Method: "PUT", Template: MustParse("/a"), Index: 0},
				{Method: "PUT", Template: MustParse("/a"), Index: 1},
			},
			want: []string{"ambiguous"},
			amb:  true,
		},
		{
			name:    "nil template",
			entries: []Entry{{Method: "GET", Index: 3}},
			want:    []string{"index 3", "nil template"},
		},
		{
			name:    "empty method",
			entries: []Entry{{Template: MustParse("/"), Index: 2}},
			want:    []string{"index 2", "empty method"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tab, err := NewTable(tt.entries)
			if err == nil {
				t.Fatalf("NewTable = %v, nil; want error", tab)
			}
			if got := errors.Is(err, ErrAmbiguous); got != tt.amb {
				t.Errorf("errors.Is(%v, ErrAmbiguous) = %v; want %v", err, got, tt.amb)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error = %q; want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestNewTableSameTemplateOtherMethod(t *testing.T) {
	t.Parallel()
	_, err := NewTable([]Entry{
		{Method: "GET", Template: MustParse("/a/{x}")},
		{Method: "HEAD", Template: MustParse("/a/{x}")},
	})
	if err != nil {
		t.Errorf("NewTable = %v; want nil (different methods never clash)", err)
	}
}

// TestZeroAllocs is not parallel: testing.AllocsPerRun counts every
// allocation in the process, so concurrent tests would inflate it.
func TestZeroAllocs(t *testing.T) {
	tab, err := NewTable(testEntries)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	tmpl := MustParse("/ucp/v1/checkout-sessions/{id}")
	tests := []struct {
		name string
		f    func()
	}{
		{"Lookup hit", func() { tab.Lookup("GET", "/ucp/v1/carts/7/items") }},
		{"Lookup miss", func() { tab.Lookup("GET", "/nothing/here") }},
		{"Lookup unknown method", func() { tab.Lookup("PATCH", "/ucp/v1/carts") }},
		{"Match", func() { tmpl.Match("/ucp/v1/checkout-sessions/abc") }},
		{"Param", func() { tmpl.Param("/ucp/v1/checkout-sessions/abc", "id") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(100, tt.f); got != 0 {
				t.Errorf("allocs per run = %v; want 0", got)
			}
		})
	}
}

func BenchmarkLookup(b *testing.B) {
	tab, err := NewTable(testEntries)
	if err != nil {
		b.Fatalf("NewTable: %v", err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := tab.Lookup("GET", "/ucp/v1/carts/7/items"); !ok {
				b.Fatal("Lookup = false; want true")
			}
		}
	})
}

func BenchmarkParam(b *testing.B) {
	tmpl := MustParse("/ucp/v1/checkout-sessions/{id}")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := tmpl.Param("/ucp/v1/checkout-sessions/abc", "id"); !ok {
			b.Fatal("Param = false; want true")
		}
	}
}
