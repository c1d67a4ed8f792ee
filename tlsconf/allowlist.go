package tlsconf

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrNotAllowed is returned (wrapped) by [AllowList.Decide] for a name the
// list does not allow.
var ErrNotAllowed = errors.New("tlsconf: host name not on the on-demand allow-list")

// AllowList decides which host names may get an on-demand certificate. It
// holds exact names ("shop.example.com") and suffixes, written
// "*.shops.example" or ".shops.example", which allow any name that ends in
// ".shops.example" (at any depth: "a.shops.example", "a.b.shops.example")
// but not "shops.example" itself. Names compare case-insensitively, without
// a trailing dot. An empty list allows nothing; there is no pattern for
// "any name". An AllowList is immutable and safe for concurrent use.
type AllowList struct {
	exact    map[string]struct{}
	suffixes []string // each starts with "."
}

// NewAllowList parses patterns (see [AllowList]). It refuses an empty
// pattern, a bare "*" or ".", and a wildcard anywhere but at the start.
func NewAllowList(patterns []string) (*AllowList, error) {
	l := &AllowList{exact: map[string]struct{}{}}
	for _, p := range patterns {
		n := normalizeName(p)
		suffix := false
		switch {
		case strings.HasPrefix(n, "*."):
			n, suffix = n[1:], true
		case strings.HasPrefix(n, "."):
			suffix = true
		}
		rest := strings.TrimPrefix(n, ".")
		if rest == "" || strings.HasPrefix(rest, ".") || strings.ContainsAny(rest, "* /:") || strings.Contains(rest, "..") {
			return nil, fmt.Errorf("tlsconf: allow-list pattern %q: want a host name, \"*.example.com\" or \".example.com\"", p)
		}
		if suffix {
			l.suffixes = append(l.suffixes, n)
		} else {
			l.exact[n] = struct{}{}
		}
	}
	return l, nil
}

// Allows reports whether name may get a certificate.
func (l *AllowList) Allows(name string) bool {
	if l == nil {
		return false
	}
	n := normalizeName(name)
	if n == "" {
		return false
	}
	if _, ok := l.exact[n]; ok {
		return true
	}
	for _, s := range l.suffixes {
		if len(n) > len(s) && strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// Decide is [AllowList.Allows] in the shape of certmagic's
// OnDemandConfig.DecisionFunc: nil when allowed, else an error wrapping
// [ErrNotAllowed].
func (l *AllowList) Decide(_ context.Context, name string) error {
	if l.Allows(name) {
		return nil
	}
	return fmt.Errorf("%w: %q", ErrNotAllowed, name)
}

func normalizeName(s string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
}
