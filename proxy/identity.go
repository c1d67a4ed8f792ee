package proxy

import (
	"encoding/json"
	"net/http"

	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/keystore"
)

// The identity step of the key check (DESIGN.md step 4, *Identity*): after
// the key's syntax and the tenant, before the body. A keyed write whose
// token does not verify gets 401 idempotency_identity_invalid with
// WWW-Authenticate and nothing runs; one with a source that is present but
// unreadable (DESIGN.md, Hardening: a cookie upstreams read differently)
// gets 400 request_invalid; one whose token could not be checked (no JWK
// Set loaded yet, or its fetch is slow) gets 503 idempotency_unavailable
// with Retry-After; one whose identity is empty gets 400
// idempotency_identity_missing when the identity is required. The scope of
// its record is the tenant, the identity and the key ([identity.ScopeKey]).
// The identity is resolved once per request: a route limit that counts by
// identity (ratelimit.go) resolves it first and the key check reuses it.

// identityOf returns r's identity, resolving it on first use. A request
// outside the chain (no exchange) is resolved by the current stages.
func (p *Proxy) identityOf(r *http.Request) identity.Result {
	ex := exchangeOf(r)
	if ex == nil {
		return p.snapshotOf(r).identity.Resolve(r)
	}
	if !ex.identDone {
		ex.ident = ex.snap.identity.Resolve(r)
		ex.identDone = true
	}
	return ex.ident
}

// checkIdentity is the identity rule of a keyed write: nil when it may go
// on, else the problem that refuses it.
func (p *Proxy) checkIdentity(r *http.Request) *proxyProblem {
	id := p.identityOf(r)
	ex := exchangeOf(r)
	switch {
	case id.Status == identity.Invalid:
		// The reason names no token, cookie or claim value.
		p.log.Info("identity does not verify", logRequestID, ex.id, logRoute, ex.route.Name, "reason", id.Err)
		return &problemIdentityInvalid
	case id.Status == identity.Unreadable:
		p.log.Info("identity unreadable", logRequestID, ex.id, logRoute, ex.route.Name, "reason", id.Err)
		return &problemIdentityUnread
	case id.Status == identity.Unavailable:
		p.log.Warn("identity cannot be checked yet; answered 503", logRequestID, ex.id, logRoute, ex.route.Name, "reason", id.Err)
		return &problemIdentityUnavailable
	case id.Status == identity.Empty && ex.snap.src.RequireIdentity:
		return &problemIdentityMissing
	}
	return nil
}

// LookupKey is the admin API's key look-up: the store key of key sent under
// tenant by the client whose headers (and cookies, in a Cookie header) are
// hdr and, for a JWT identity, whose verified token carries claims (every
// configured claim, as JSON; nil: no token). It fails when claims do not
// fit the identity's sources ([identity.Resolver.Lookup]).
func (p *Proxy) LookupKey(tenant string, hdr http.Header, claims map[string]json.RawMessage, key string) (keystore.Key, error) {
	if hdr == nil {
		hdr = http.Header{}
	}
	id, err := p.cur.Load().identity.Lookup(hdr, claims)
	if err != nil {
		return keystore.Key{}, err
	}
	return identity.ScopeKey(tenant, id, key), nil
}
