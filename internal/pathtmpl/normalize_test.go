package pathtmpl

import (
	"errors"
	"testing"
)

func TestNormalize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string // want "" means an error
	}{
		{"/", "/"},
		{"//", "/"},
		{"/a", "/a"},
		{"/a/b/", "/a/b"},
		{"//a//b//", "/a/b"},
		{"/A/B", "/A/B"},
		{"/%63omplete", "/complete"},
		{"/%43%6f%6D%4D", "/ComM"},
		{"/%7e%7E%2d%5f%2E%30", "/~~-_.0"},
		{"/a%3ab%40c%21%2b%3d%24%26%27%28%29%2a%2c", "/a:b@c!+=$&'()*,"},
		{"/%5b%5d", "/[]"},
		{"/a%2fb", "/a%2Fb"},
		{"/a%2Fb", "/a%2Fb"},
		{"/a%5cb", "/a%5Cb"},
		{"/a\\b", "/a%5Cb"},
		{"/a%3bb", "/a%3Bb"},
		{"/a%253B", "/a%253B"},
		{"/a%25", "/a%25"},
		{"/a%20b", "/a%20b"},
		{"/a b", "/a%20b"},
		{"/a\"b", "/a%22b"},
		{"/a?b#c", "/a%3Fb%23c"},
		{"/caf\u00e9", "/caf%C3%A9"},
		{"/caf%c3%a9", "/caf%C3%A9"},
		{"/a\x00b\x7f", "/a%00b%7F"},
		{"/a;x=1/b;y", "/a/b"},
		{"/a;x=1;y=2", "/a"},
		{"/;x/a", "/a"},
		{"/a/;", "/a"},
		{"/a/b;", "/a/b"},
		{"/a/./b", "/a/b"},
		{"/./a/.", "/a"},
		{"/a/../b", "/b"},
		{"/a/b/..", "/a"},
		{"/a/b/../..", "/"},
		{"/a//../b", "/b"},
		{"/a/%2e%2e/b", "/b"},
		{"/a/%2E/b", "/a/b"},
		{"/a/.%2e/b", "/b"},
		{"/a/..;x/b", "/b"},
		{"/a/.;x/b", "/a/b"},
		{"/a/...", "/a/..."},
		{"/a/..a", "/a/..a"},
		{"/a%2F..%2Fb", "/a%2F..%2Fb"},
		{"", ""},
		{"a", ""},
		{"*", ""},
		{"/..", ""},
		{"/../a", ""},
		{"/a/../..", ""},
		{"/%2e%2e", ""},
		{"/%2E%2E/ucp", ""},
		{"/..;x/a", ""},
		{"/a%zz", ""},
		{"/a%2", ""},
		{"/a%", ""},
		{"/a%%41", ""},
		{"/a%g0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := Normalize(tt.in)
			if tt.want == "" {
				if err == nil || !errors.Is(err, ErrInvalidPath) {
					t.Fatalf("Normalize(%q) = %q, %v; want an error wrapping ErrInvalidPath", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Normalize(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
			}
			if again, err := Normalize(got); err != nil || again != got {
				t.Errorf("Normalize(%q) = %q, %v; want it unchanged", got, again, err)
			}
		})
	}
}

func TestNormalizeRFC3986(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string // want "" means an error
	}{
		{"/", "/"},
		{"//", "//"},
		{"/a//b/", "/a//b/"},
		{"/A/B", "/A/B"},
		{"/%63omplete", "/complete"},
		{"/A%7e%2f;x=1", "/A~%2F;x=1"},
		{"/a%3ab", "/a%3Ab"},
		{"/a%3bb", "/a%3Bb"},
		{"/a b", "/a%20b"},
		{"/caf\u00e9", "/caf%C3%A9"},
		{"/a/b/c/./../../g", "/a/g"},
		{"/mid/content=5/../6", "/mid/6"},
		{"/a/.", "/a/"},
		{"/a/..", "/"},
		{"/a/b/..", "/a/"},
		{"/a//..", "/a/"},
		{"/a/%2e%2E/b", "/b"},
		{"/a/..;x/b", "/a/..;x/b"},
		{"/a;x/b/", "/a;x/b/"},
		{"", ""},
		{"a", ""},
		{"/..", ""},
		{"/%2E%2E/x", ""},
		{"/a/../..", ""},
		{"/a%zz", ""},
		{"/a%", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := NormalizeRFC3986(tt.in)
			if tt.want == "" {
				if err == nil || !errors.Is(err, ErrInvalidPath) {
					t.Fatalf("NormalizeRFC3986(%q) = %q, %v; want an error wrapping ErrInvalidPath", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("NormalizeRFC3986(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
			}
			if again, err := NormalizeRFC3986(got); err != nil || again != got {
				t.Errorf("NormalizeRFC3986(%q) = %q, %v; want it unchanged", got, again, err)
			}
		})
	}
}

// TestNormalizeRFC3986KeepsSpellingsApart checks that the fingerprint's
// normalization keeps apart what matching folds: a retry spelled another way
// must never replay another spelling's answer.
func TestNormalizeRFC3986KeepsSpellingsApart(t *testing.T) {
	t.Parallel()
	base := "/ucp/v1/checkout-sessions/1/complete"
	for _, other := range []string{
		"/ucp/v1/checkout-sessions/1/complete/",
		"/ucp/v1/checkout-sessions/1/complete;x=1",
		"/UCP/v1/checkout-sessions/1/complete",
		"//ucp/v1/checkout-sessions/1/complete",
		"/ucp/v1/checkout-sessions/1%2Fcomplete",
	} {
		got, err := NormalizeRFC3986(other)
		if err != nil {
			t.Fatalf("NormalizeRFC3986(%q): %v", other, err)
		}
		if got == base {
			t.Errorf("NormalizeRFC3986(%q) = %q, the same as %q", other, got, base)
		}
	}
	for _, same := range []string{
		"/ucp/v1/checkout-sessions/1/%63omplete",
		"/ucp/v1/./checkout-sessions/1/complete",
		"/ucp/v1/x/../checkout-sessions/1/complete",
		"/ucp/v1/x/%2e%2E/checkout-sessions/1/complete",
	} {
		if got, err := NormalizeRFC3986(same); err != nil || got != base {
			t.Errorf("NormalizeRFC3986(%q) = %q, %v; want %q", same, got, err, base)
		}
	}
}

func TestEncodeReturnsInputWhenUnchanged(t *testing.T) {
	p := "/a/b%2F~"
	got, err := encode(p, isMatchDecoded)
	if err != nil || got != p {
		t.Fatalf("encode(%q) = %q, %v", p, got, err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = encode(p, isMatchDecoded) }); n != 0 {
		t.Errorf("encode of a normalized path allocates %v times; want 0", n)
	}
}

// A path NormalizeRFC3986 leaves as it is costs no allocation (issue 31:
// every keyed write's fingerprint normalizes its path); one with a dot
// segment is still rebuilt.
func TestNormalizeRFC3986AllocatesOnlyToChange(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		allocs   bool
	}{
		{"/ucp/v1/carts", "/ucp/v1/carts", false},
		{"/a//b/", "/a//b/", false},
		{"/a/.b/..c/", "/a/.b/..c/", false},
		{"/a/./b", "/a/b", true},
		{"/a/b/..", "/a/", true},
		{"/a/%7Eb", "/a/~b", true},
	} {
		got, err := NormalizeRFC3986(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("NormalizeRFC3986(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		n := testing.AllocsPerRun(100, func() { _, _ = NormalizeRFC3986(tc.in) })
		if (n > 0) != tc.allocs {
			t.Errorf("NormalizeRFC3986(%q) allocates %v times; want allocations: %v", tc.in, n, tc.allocs)
		}
	}
}
