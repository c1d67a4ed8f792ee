package clientaddr_test

import (
	"net/netip"
	"testing"

	"github.com/idemgate/idemgate/internal/clientaddr"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("fd00::/8"),
	}
	tests := []struct {
		name    string
		peer    string
		xff     []string
		trusted []netip.Prefix
		want    string
	}{
		{"no trusted proxies: header ignored", "203.0.113.9", []string{"1.2.3.4"}, nil, "203.0.113.9"},
		{"untrusted peer: header ignored", "203.0.113.9", []string{"1.2.3.4"}, trusted, "203.0.113.9"},
		{"untrusted peer inside a mapped address", "::ffff:203.0.113.9", []string{"1.2.3.4"}, trusted, "203.0.113.9"},
		{"trusted peer without header", "10.0.0.1", nil, trusted, "10.0.0.1"},
		{"trusted peer: rightmost entry", "10.0.0.1", []string{"198.51.100.1"}, trusted, "198.51.100.1"},
		{"client-written left entries are ignored", "10.0.0.1", []string{"1.2.3.4, 198.51.100.1"}, trusted, "198.51.100.1"},
		{"trusted hops are skipped", "10.0.0.1", []string{"1.2.3.4, 198.51.100.1, 10.0.0.7, 10.9.9.9"}, trusted, "198.51.100.1"},
		{"second header line is read, right to left", "10.0.0.1", []string{"1.2.3.4", "198.51.100.1"}, trusted, "198.51.100.1"},
		{"spoof in a first line behind a trusted hop", "10.0.0.1", []string{"1.2.3.4", "10.0.0.7"}, trusted, "1.2.3.4"},
		{"client cannot override with a second line", "10.0.0.1", []string{"198.51.100.1", "1.2.3.4, 10.0.0.7"}, trusted, "1.2.3.4"},
		{"every entry trusted: the leftmost", "10.0.0.1", []string{"10.0.0.3, 10.0.0.2"}, trusted, "10.0.0.3"},
		{"garbage stops the walk at the last trusted hop", "10.0.0.1", []string{"1.2.3.4, garbage, 10.0.0.2"}, trusted, "10.0.0.2"},
		{"garbage right after the peer", "10.0.0.1", []string{"1.2.3.4, garbage"}, trusted, "10.0.0.1"},
		{"garbage in a later line", "10.0.0.1", []string{"1.2.3.4", "unknown"}, trusted, "10.0.0.1"},
		{"obfuscated identifier is garbage", "10.0.0.1", []string{"1.2.3.4, _hidden"}, trusted, "10.0.0.1"},
		{"bracketed address without port is garbage", "10.0.0.1", []string{"1.2.3.4, [2001:db8::1]"}, trusted, "10.0.0.1"},
		{"empty elements are skipped", "10.0.0.1", []string{"1.2.3.4, 198.51.100.1,, ,", ""}, trusted, "198.51.100.1"},
		{"whitespace and tabs", "10.0.0.1", []string{" 198.51.100.1\t,\t10.0.0.2 "}, trusted, "198.51.100.1"},
		{"ipv4 with port", "10.0.0.1", []string{"198.51.100.1:4711"}, trusted, "198.51.100.1"},
		{"ipv6 with port", "10.0.0.1", []string{"[2001:db8::1]:4711"}, trusted, "2001:db8::1"},
		{"mapped entry is unmapped", "10.0.0.1", []string{"::ffff:198.51.100.1"}, trusted, "198.51.100.1"},
		{"mapped trusted entry is skipped", "10.0.0.1", []string{"198.51.100.1, ::ffff:10.0.0.9"}, trusted, "198.51.100.1"},
		{"zone stripped", "10.0.0.1", []string{"fe80::1%eth0"}, trusted, "fe80::1"},
		{"zoned trusted peer", "fd00::1%eth0", []string{"2001:db8::5"}, trusted, "2001:db8::5"},
		{"mapped trusted peer", "::ffff:10.0.0.1", []string{"198.51.100.1"}, trusted, "198.51.100.1"},
		{"mapped trusted prefix", "10.0.0.1", []string{"198.51.100.1"}, []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}, "198.51.100.1"},
		{"invalid peer", "", []string{"198.51.100.1"}, trusted, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var peer netip.Addr
			if tt.peer != "" {
				peer = netip.MustParseAddr(tt.peer)
			}
			got := clientaddr.Resolve(peer, tt.xff, tt.trusted)
			want := netip.Addr{}
			if tt.want != "" {
				want = netip.MustParseAddr(tt.want)
			}
			if got != want {
				t.Errorf("Resolve(%v, %q) = %v; want %v", peer, tt.xff, got, want)
			}
		})
	}
}

// TestClientAddrAllocs is not parallel: testing.AllocsPerRun refuses to run
// beside parallel tests.
func TestResolveAllocs(t *testing.T) {
	peer := netip.MustParseAddr("10.0.0.1")
	xff := []string{"1.2.3.4, 198.51.100.1", "10.0.0.7, 10.0.0.8"}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	if got := testing.AllocsPerRun(100, func() { clientaddr.Resolve(peer, xff, trusted) }); got != 0 {
		t.Errorf("Resolve allocates %v times; want 0", got)
	}
}

func BenchmarkResolve(b *testing.B) {
	peer := netip.MustParseAddr("10.0.0.1")
	xff := []string{"1.2.3.4, 198.51.100.1", "10.0.0.7, 10.0.0.8"}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			clientaddr.Resolve(peer, xff, trusted)
		}
	})
}
