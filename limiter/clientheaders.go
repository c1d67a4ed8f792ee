package limiter

import (
	"net/netip"
	"strings"
)

// clientAddrHeaders are the request headers, besides the X-Forwarded-*
// family, through which a request can claim a client address: DESIGN.md's
// X-Real-IP, True-Client-IP and Forwarded (RFC 7239), and the CDN and
// load-balancer variants that upstream frameworks also read.
var clientAddrHeaders = [...]string{
	"X-Real-Ip", "True-Client-Ip", "Forwarded",
	"X-Client-Ip", "X-Cluster-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip",
}

// StripClientAddrHeaders removes from h every header through which a client
// could claim an address: X-Real-IP, True-Client-IP, Forwarded, X-Client-IP,
// X-Cluster-Client-IP, CF-Connecting-IP, Fastly-Client-IP and every
// X-Forwarded-* header (X-Forwarded-For, -Host, -Proto, -Port, -Prefix, ...).
// Names are matched case-insensitively, so non-canonical keys go too. It
// returns the number of header names removed.
//
// h is a request's header map (an http.Header converts implicitly; this
// package does not import net/http). Call it for a request whose TCP peer is
// not trusted ([Trusted] is false) before forwarding it: DESIGN.md, "Bounds"
// (issue 15). Then set X-Forwarded-For/-Host/-Proto afresh from the
// connection. For a trusted peer, keep what it sent and append to
// X-Forwarded-For (its X-Real-IP names the client it saw).
func StripClientAddrHeaders(h map[string][]string) int {
	n := 0
	for k := range h {
		if isClientAddrHeader(k) {
			delete(h, k)
			n++
		}
	}
	return n
}

func isClientAddrHeader(k string) bool {
	const xf = "X-Forwarded-"
	if len(k) >= len(xf) && strings.EqualFold(k[:len(xf)], xf) {
		return true
	}
	for _, c := range clientAddrHeaders {
		if strings.EqualFold(k, c) {
			return true
		}
	}
	return false
}

// Trusted reports whether peer, a request's TCP peer address, lies in one of
// the trusted prefixes (client_ip.trusted_proxies), with the same
// normalization as [ClientAddr]: zones dropped, IPv4-mapped IPv6 addresses
// unmapped. An invalid peer is never trusted. Trusted allocates nothing.
func Trusted(peer netip.Addr, trusted []netip.Prefix) bool {
	return isTrusted(canonical(peer), trusted)
}
