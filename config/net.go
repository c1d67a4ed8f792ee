package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// NormalizeHost returns host, a Host header or URL host that may carry a
// port, in the form of a tenant_hosts key: lower case, without port,
// IPv6 brackets or trailing dot. "Shop.Example.COM.:8443" becomes
// "shop.example.com" and "[2001:DB8::1]:443" becomes "2001:db8::1".
func NormalizeHost(host string) string {
	h := host
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			h = h[1:i]
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h, ':') == i {
		h = h[:i] // one colon: host:port; more: a bare IPv6 address
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// TenantFor returns the tenant for a request's Host: the TenantHosts entry
// for [NormalizeHost](host), else Tenant.
func (id *Idempotency) TenantFor(host string) string {
	if t, ok := id.TenantHosts[NormalizeHost(host)]; ok {
		return t
	}
	return id.Tenant
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
