package clientaddr_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/clientaddr"
)

// FuzzResolve checks that Resolve never panics and only ever returns the
// peer or an entry that no untrusted or garbage entry stands right of.
func FuzzResolve(f *testing.F) {
	f.Add("10.0.0.1", "1.2.3.4, 198.51.100.1", "10.0.0.7")
	f.Add("10.0.0.1", "garbage, 10.0.0.2", "")
	f.Add("203.0.113.9", "1.2.3.4", "")
	f.Add("::ffff:10.1.2.3", "[2001:db8::1]:80,,fe80::1%eth0", "::ffff:10.0.0.1")
	f.Add("fd00::1", "", "1.2.3.4:99")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	f.Fuzz(func(t *testing.T, peerText, line1, line2 string) {
		peer, _ := netip.ParseAddr(peerText)
		xff := []string{line1, line2}
		got := clientaddr.Resolve(peer, xff, trusted)

		canon := func(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }
		isTrusted := func(a netip.Addr) bool {
			for _, p := range trusted {
				if p.Contains(a) {
					return true
				}
			}
			return false
		}
		// Flatten the entries, rightmost first.
		var entries []string
		for i := len(xff) - 1; i >= 0; i-- {
			parts := strings.Split(xff[i], ",")
			for j := len(parts) - 1; j >= 0; j-- {
				if e := strings.Trim(parts[j], " \t"); e != "" {
					entries = append(entries, e)
				}
			}
		}
		parse := func(s string) (netip.Addr, bool) {
			if a, err := netip.ParseAddr(s); err == nil {
				return canon(a), true
			}
			if ap, err := netip.ParseAddrPort(s); err == nil {
				return canon(ap.Addr()), true
			}
			return netip.Addr{}, false
		}

		if got != canon(peer) {
			if !isTrusted(canon(peer)) {
				t.Fatalf("Resolve(%v, %q) = %v; want the untrusted peer", peer, xff, got)
			}
			// got must be one of the entries, and every entry right of the
			// first one equal to it must be a valid trusted address.
			found := false
			for _, e := range entries {
				a, ok := parse(e)
				if ok && a == got {
					found = true
					break
				}
				if !ok || !isTrusted(a) {
					t.Fatalf("Resolve(%v, %q) = %v, left of the entry %q", peer, xff, got, e)
				}
			}
			if !found {
				t.Fatalf("Resolve(%v, %q) = %v, which is neither the peer nor in the header", peer, xff, got)
			}
		}
		if got.Zone() != "" || got.Is4In6() {
			t.Fatalf("Resolve(%v, %q) = %v; want no zone and no mapped form", peer, xff, got)
		}
	})
}
