package proxy

import (
	"net/http"
	"net/netip"
	"testing"
)

// clientText is the client address's text, netip's spelling, whatever the
// peer's RemoteAddr says; for a direct IPv4 client it allocates nothing.
func TestClientText(t *testing.T) {
	for _, c := range []struct {
		remote, client string
		noAlloc        bool
	}{
		{"127.0.0.1:40000", "127.0.0.1", true},
		{"203.0.113.9:1", "203.0.113.9", true},
		{"203.0.113.9:1", "198.51.100.7", false}, // from a trusted proxy's X-Forwarded-For
		{"[::1]:40000", "::1", false},
		{"[2001:db8::1]:443", "2001:db8::1", false},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1", false}, // unmapped: not RemoteAddr's spelling
		{"192.0.2.1", "192.0.2.1", false},             // no port
		{"", "192.0.2.1", false},
		{"pipe:", "192.0.2.1", false},
	} {
		a := netip.MustParseAddr(c.client)
		r := &http.Request{RemoteAddr: c.remote}
		got := clientText(r, &exchange{client: a})
		if got != a.String() {
			t.Errorf("clientText(%q, %v) = %q; want %q", c.remote, a, got, a.String())
		}
		ex := &exchange{client: a}
		if got := clientText(r, ex); got != a.String() || clientText(r, ex) != got {
			t.Errorf("clientText(%q, %v) twice = %q; want %q", c.remote, a, got, a.String())
		}
		allocs := testing.AllocsPerRun(100, func() { clientText(r, &exchange{client: a}) })
		if c.noAlloc && allocs != 0 {
			t.Errorf("clientText(%q, %v): %v allocations; want 0", c.remote, a, allocs)
		}
	}
}
