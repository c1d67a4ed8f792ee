// Package clientaddr decides which address a request comes from, for the
// limits and the body budget: the TCP peer, or, behind the proxies of
// client_ip.trusted_proxies, the rightmost X-Forwarded-For entry that is
// not a trusted proxy ([Resolve]); and which request headers could claim
// another address, to be removed before a request goes upstream
// ([StripHeaders]; DESIGN.md, Bounds and Hardening). It does not import
// net/http: headers are plain maps.
package clientaddr

import (
	"net/netip"
	"strings"
)

// Resolve returns the address of the client a request is counted for.
//
// peer is the TCP peer's address. xff holds every X-Forwarded-For header line
// of the request, in order (r.Header.Values("X-Forwarded-For")); each line may
// hold several comma-separated entries. trusted lists the networks of the
// proxies in front of idemgate.
//
// When peer is not inside a trusted prefix (always, when trusted is empty),
// Resolve returns peer and ignores xff: a client cannot choose its own
// address. When it is, Resolve walks the entries of all lines from the
// right, skipping trusted entries, and returns the first entry that is not
// trusted (nginx's real_ip_recursive, Envoy's xff_trusted_cidrs). If every
// entry is trusted, it returns the leftmost one. An entry that is not an IP
// address (an "addr:port" or "[addr]:port" entry counts as its address) stops
// the walk, and the last trusted address seen is returned: nothing left of a
// garbage entry is ever used, since the client may have written it. Empty
// list elements are skipped (RFC 9110 §5.6.1).
//
// The result has no zone and IPv4-mapped IPv6 addresses are unmapped; the same
// is done to every address before it is compared with trusted, so the prefix
// 10.0.0.0/8 also trusts ::ffff:10.0.0.1. An invalid peer is returned as it
// is. Resolve allocates nothing.
func Resolve(peer netip.Addr, xff []string, trusted []netip.Prefix) netip.Addr {
	hop := canonical(peer)
	if !isTrusted(hop, trusted) {
		return hop
	}
	for i := len(xff) - 1; i >= 0; i-- {
		line := xff[i]
		for line != "" {
			entry := line
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				entry, line = line[j+1:], line[:j]
			} else {
				line = ""
			}
			entry = strings.Trim(entry, " \t")
			if entry == "" {
				continue
			}
			a, ok := parseEntry(entry)
			if !ok {
				return hop
			}
			if !isTrusted(a, trusted) {
				return a
			}
			hop = a
		}
	}
	return hop
}

// parseEntry parses one X-Forwarded-For entry: an address, or an address with
// a port, as some proxies write.
func parseEntry(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return canonical(a), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return canonical(ap.Addr()), true
	}
	return netip.Addr{}, false
}

func canonical(a netip.Addr) netip.Addr {
	return a.Unmap().WithZone("")
}

// isTrusted reports whether a lies in one of the trusted prefixes. An
// IPv4-mapped prefix (::ffff:10.0.0.0/104) is read as its IPv4 prefix.
func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	if !a.IsValid() {
		return false
	}
	for _, p := range trusted {
		if pa := p.Addr(); pa.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(pa.Unmap(), p.Bits()-96)
		}
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Trusted reports whether peer, a request's TCP peer address, lies in one of
// the trusted prefixes (client_ip.trusted_proxies), with the same
// normalization as [Resolve]: zones dropped, IPv4-mapped IPv6 addresses
// unmapped. An invalid peer is never trusted. Trusted allocates nothing.
func Trusted(peer netip.Addr, trusted []netip.Prefix) bool {
	return isTrusted(canonical(peer), trusted)
}
