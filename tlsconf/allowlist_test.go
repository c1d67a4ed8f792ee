package tlsconf_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemgate/idemgate/tlsconf"
)

func TestAllowList(t *testing.T) {
	t.Parallel()
	l, err := tlsconf.NewAllowList([]string{"Exact.Example.com", "*.shops.example", ".tenants.example."})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want bool
	}{
		{"exact.example.com", true},
		{"EXACT.example.com.", true},
		{"a.exact.example.com", false},
		{"a.shops.example", true},
		{"a.b.shops.example", true},
		{"shops.example", false},
		{"evilshops.example", false},
		{"x.tenants.example", true},
		{"tenants.example", false},
		{"example.com", false},
		{"", false},
		{"shops.example.evil", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := l.Allows(tt.name); got != tt.want {
				t.Errorf("Allows(%q) = %v; want %v", tt.name, got, tt.want)
			}
			err := l.Decide(context.Background(), tt.name)
			if (err == nil) != tt.want || (err != nil && !errors.Is(err, tlsconf.ErrNotAllowed)) {
				t.Errorf("Decide(%q) = %v; want allowed=%v", tt.name, err, tt.want)
			}
		})
	}
	var none *tlsconf.AllowList
	if none.Allows("a.example") {
		t.Errorf("a nil AllowList allows a name")
	}
	empty, _ := tlsconf.NewAllowList(nil)
	if empty.Allows("a.example") {
		t.Errorf("an empty AllowList allows a name")
	}
}

func TestAllowListRefusesAnyName(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"*", ".", "*.", "", "a.*.example", "**.example", "a..example", "host:443", "*..example", "..example"} {
		if _, err := tlsconf.NewAllowList([]string{p}); err == nil {
			t.Errorf("NewAllowList(%q) = nil error; want refused", p)
		}
	}
}
