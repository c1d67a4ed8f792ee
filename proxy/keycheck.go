package proxy

import "net/http"

// keyCheck is DESIGN.md step 4 for routes with idempotent: true: the key
// header, the client identity, then the body, read whole (body.go). A
// request that passes carries its key and body in its exchange to the claim
// (claim.go); a request without a key on a route that does not require one
// goes on unprotected. What enforce mode refuses, observe mode forwards
// unclaimed (see [Proxy.refuse]); GraphQL routes decide by the operation
// (graphql.go). Everything else passes through.
func (p *Proxy) keyCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := exchangeOf(r)
		rt := ex.route
		if rt == nil || !rt.Idempotent {
			next.ServeHTTP(w, r)
			return
		}
		vals := r.Header[ex.snap.idem.Header] // canonical (compileRoutes)
		// An observed GraphQL route is observed as a plain route: its bodies
		// are fingerprinted raw.
		if rt.Protocol == ProtocolGraphQL && !rt.Observe {
			p.keyCheckGraphQL(w, r, next, vals)
			return
		}
		key, prob := p.checkKey(r, vals, rt.RequireKey)
		if prob != nil {
			p.refuse(w, r, next, *prob)
			return
		}
		if key == "" {
			ex.via = viaNoKey
			next.ServeHTTP(w, r)
			return
		}
		body, held, prob := p.readBody(w, r, rt.Observe)
		if prob != nil {
			p.refuse(w, r, next, *prob)
			return
		}
		defer ex.free(held) // a kept call holds the body on (late.go)
		fp, prob := p.decodeBody(r, body)
		if prob != nil {
			p.refuse(w, r, next, *prob)
			return
		}
		ex.key, ex.body, ex.fp = key, body, fp
		next.ServeHTTP(w, r)
	})
}

// checkKey is the rule of a request's key header values vals, in DESIGN.md
// step 4's order: one valid key (under the stages' key_syntax), a host
// with a tenant, and the client's identity (identity.go). It
// returns the key, or "" and no problem when there is none and require is
// false.
func (p *Proxy) checkKey(r *http.Request, vals []string, require bool) (string, *proxyProblem) {
	switch {
	case len(vals) > 1:
		return "", p.keyInvalid(r)
	case len(vals) == 0 || vals[0] == "":
		if require {
			return "", &problemKeyMissing
		}
		return "", nil
	}
	key, ok := exchangeOf(r).snap.idem.KeySyntax.Key(vals[0])
	switch {
	case !ok:
		return "", p.keyInvalid(r)
	case !p.knownTenant(r):
		return "", &problemTenantUnknown
	}
	if prob := p.checkIdentity(r); prob != nil { // identity.go
		return "", prob
	}
	return key, nil
}

// knownTenant reports whether r's Host has a tenant ([Idempotency.TenantFor]):
// a keyed write to a host without one is refused with 421 tenant_unknown,
// so unknown hosts never share a scope (DESIGN.md step 5).
func (p *Proxy) knownTenant(r *http.Request) bool {
	_, ok := exchangeOf(r).tenantOf(r.Host)
	return ok
}

// tenantOf returns the tenant of host, the request's Host, under the
// snapshot the request runs on ([Idempotency.TenantFor]), looked up once:
// the key check, the claim and the session turn all ask (issue 31).
func (ex *exchange) tenantOf(host string) (string, bool) {
	if !ex.tenantDone {
		ex.tenant, ex.tenantOK = ex.snap.idem.TenantFor(host)
		ex.tenantDone = true
	}
	return ex.tenant, ex.tenantOK
}

// keyInvalid is idempotency_key_invalid naming r's key header.
func (p *Proxy) keyInvalid(r *http.Request) *proxyProblem {
	pr := problemKeyInvalid
	pr.Detail = exchangeOf(r).snap.idem.Header + " is not valid"
	return &pr
}
