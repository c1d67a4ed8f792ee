package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// NormalizeHost returns host, a Host header or URL host that may carry a
// port, in the form of a tenant_hosts key. It is the one host rule of
// DESIGN.md §5, used for every tenant lookup:
//
//   - ASCII letters are lower-cased; nothing else is touched, so an IDNA
//     name is matched as the punycode it was sent in ("xn--...") and a
//     non-ASCII byte is kept (it matches no key: keys are ASCII);
//   - a port (":" and digits, possibly none) is removed, and so are IPv6
//     brackets; an IPv6 address is written in its canonical form
//     ("[2001:DB8:0::1]:443" becomes "2001:db8::1");
//   - one trailing dot is removed ("shop.example." is "shop.example", while
//     "shop.example.." keeps a dot and matches no key).
//
// A host that is malformed around its port (":x", "[::1]junk") is returned
// lower-cased but otherwise whole, so that it matches no valid key.
// "Shop.Example.COM.:8443" becomes "shop.example.com".
func NormalizeHost(host string) string {
	h := host
	if strings.HasPrefix(h, "[") {
		i := strings.IndexByte(h, ']')
		if i < 0 || !isPort(h[i+1:]) {
			return asciiLower(host)
		}
		return canonicalIP(h[1:i])
	}
	switch first, last := strings.IndexByte(h, ':'), strings.LastIndexByte(h, ':'); {
	case first < 0:
	case first == last: // host:port
		if !isPort(h[last:]) {
			return asciiLower(host)
		}
		h = h[:last]
	default: // more than one colon: a bare IPv6 address
		return canonicalIP(h)
	}
	return asciiLower(strings.TrimSuffix(h, "."))
}

// isPort reports whether s is empty or ":" followed by digits only (RFC
// 3986: port = *DIGIT).
func isPort(s string) bool {
	if s == "" {
		return true
	}
	if s[0] != ':' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// canonicalIP returns s in netip's canonical form when it is an IP address
// without zone, else s lower-cased.
func canonicalIP(s string) string {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a.String()
	}
	return asciiLower(s)
}

// asciiLower lower-cases ASCII letters only: Unicode case mapping would turn
// "\u212A" (Kelvin sign) into "k" and make two hosts one.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// TenantFor returns the tenant for a request's Host. With TenantHosts
// empty, it is Tenant for every host, and ok is true. Otherwise it is the
// TenantHosts entry for [NormalizeHost](host), and ok is false when there is
// none: such a host has no tenant, and a keyed write to it must get 421
// tenant_unknown (unknown hosts never share a scope).
func (id *Idempotency) TenantFor(host string) (tenant string, ok bool) {
	if len(id.TenantHosts) == 0 {
		return id.Tenant, true
	}
	tenant, ok = id.TenantHosts[NormalizeHost(host)]
	return tenant, ok
}

// Prefixes parses TrustedProxies: each entry is a CIDR (host bits are
// cleared) or a bare IP address, which means that single address (/32 or
// /128). The error names the first bad entry; [Config.Validate] reports
// them all.
func (c *ClientIP) Prefixes() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(c.TrustedProxies))
	for i, s := range c.TrustedProxies {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("client_ip.trusted_proxies[%d]: %q: %w", i, s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, errors.New("an IPv6 zone is not allowed")
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}
