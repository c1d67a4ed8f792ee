package identity

import (
	"crypto/sha256"

	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/idemgate/idemgate/limiter"
	"golang.org/x/net/http/httpguts"
)

// By is what a route limit counts requests by (DESIGN.md, "Identity": the
// route limit's `by`). The zero By is [ByClientIP].
type By struct {
	kind   byKind
	header string
}

type byKind uint8

const (
	byClientIP byKind = iota
	byIdentity
	byHeader
)

// The values of [By] without a header.
var (
	ByClientIP = By{kind: byClientIP}
	ByIdentity = By{kind: byIdentity}
)

// ParseBy parses a route limit's `by`: "" or "client_ip", "identity", or
// "header:NAME" with NAME a header name (canonicalized).
func ParseBy(s string) (By, error) {
	switch s {
	case "", "client_ip":
		return ByClientIP, nil
	case "identity":
		return ByIdentity, nil
	}
	name, ok := strings.CutPrefix(s, "header:")
	if !ok {
		return By{}, fmt.Errorf("%q: want client_ip, identity or header:NAME", s)
	}
	if !httpguts.ValidHeaderFieldName(name) {
		return By{}, fmt.Errorf("%q: %q is not a header name", s, name)
	}
	return By{kind: byHeader, header: textproto.CanonicalMIMEHeaderKey(name)}, nil
}

// IsIdentity reports whether b counts by identity: the route-limit stage
// must then resolve the identity (and may keep the Result for the identity
// check).
func (b By) IsIdentity() bool { return b.kind == byIdentity }

// Header returns the header of a "header:NAME" By, else "".
func (b By) Header() string { return b.header }

// String returns b as ParseBy reads it.
func (b By) String() string {
	switch b.kind {
	case byIdentity:
		return "identity"
	case byHeader:
		return "header:" + b.header
	}
	return "client_ip"
}

// LimitKey is the hashed material of a limiter bucket. Keys of different
// kinds never collide: each kind's hash input starts with its own label.
type LimitKey [sha256.Size]byte

// KeyFor returns the limiter key of a request counted by b:
//
//   - [ByClientIP]: the client's address block addr;
//   - [ByIdentity]: the hash of the verified JWT claims alone when id is
//     Present and Verified (two addresses with one identity share a budget;
//     headers and cookies beside the token are left out, so varying them
//     buys nothing); otherwise addr: an empty, invalid, unavailable (a
//     token not checkable yet) or unverified identity (headers and cookies
//     are the client's to choose) counts per address, so random tokens
//     never buy fresh budgets;
//   - "header:NAME": the hash of that header's values (a header that a
//     trusted proxy sets); addr when it is absent or empty.
//
// perAddress reports whether the key is addr's. hdr is the request's header;
// id is read only with ByIdentity.
func (b By) KeyFor(hdr http.Header, id Result, addr limiter.Key) (k LimitKey, perAddress bool) {
	switch b.kind {
	case byIdentity:
		if id.Status == Present && id.Verified {
			var h hasher
			h.add("limit/identity", string(id.claims[:]))
			return h.sum(), false
		}
	case byHeader:
		var h hasher
		h.add("limit/header", b.header)
		n := 0
		for _, v := range hdr.Values(b.header) {
			if v != "" {
				h.add(v)
				n++
			}
		}
		if n > 0 {
			return h.sum(), false
		}
	}
	a := addr.As16()
	var h hasher
	h.add("limit/address", string(a[:]))
	return h.sum(), true
}
