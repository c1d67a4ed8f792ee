package canonjson_test

import (
	"errors"
	"testing"

	"github.com/idemgate/idemgate/internal/canonjson"
)

func TestParsePointer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"member", "/meta", true},
		{"nested", "/meta/sent_at", true},
		{"array index", "/items/0/ts", true},
		{"empty key", "/", true},
		{"empty keys", "//", true},
		{"escapes", "/a~1b/m~0n/~01", true},
		{"non-ASCII", "/café", true},
		{"root", "", false},
		{"no leading slash", "meta", false},
		{"URI fragment form", "#/meta", false},
		{"tilde alone", "/~", false},
		{"tilde at end", "/a~", false},
		{"tilde 2", "/~2", false},
		{"tilde slash", "/~/", false},
		{"invalid UTF-8", "/\xff", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := canonjson.ParsePointer(tc.in)
			if tc.ok {
				if err != nil {
					t.Fatalf("ParsePointer(%q) error = %v; want nil", tc.in, err)
				}
				if got := p.String(); got != tc.in {
					t.Errorf("ParsePointer(%q).String() = %q; want %q", tc.in, got, tc.in)
				}
				return
			}
			if !errors.Is(err, canonjson.ErrInvalidPointer) {
				t.Errorf("ParsePointer(%q) error = %v; want ErrInvalidPointer", tc.in, err)
			}
		})
	}
}
