package proxy

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/idemgate/idemgate/internal/budget"
	"github.com/idemgate/idemgate/keystore"
)

// claim is DESIGN.md step 5 for a request the key check passed with a key:
// it claims the key in the store, then runs the request under the claim
// and records its answer (record.go). A completed key replays its answer; a
// running one, a reused one or a store that cannot be reached refuses the
// request (observe mode forwards it unclaimed instead, see
// [Proxy.refuse]). Requests without a key pass through.
func (p *Proxy) claim(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := exchangeOf(r)
		if ex.key == "" {
			next.ServeHTTP(w, r)
			return
		}
		rt := ex.route
		opts := &p.opts.Idempotency
		sk := p.scope(r, ex.key)
		// Stores bound their own calls (the Redis client's timeout); a
		// client that hangs up cancels the claim. reserve computes the
		// fingerprint and compares it in the record's version.
		ctx, span := p.startSpan(r.Context(), spanClaim)
		reserve := func() (keystore.Reservation, error) {
			return p.reserve(ctx, r, ex, sk, keystore.ReserveOptions{
				Route:     rt.Name,
				Lease:     opts.Lease,
				Retention: rt.retention,
			})
		}
		res, err := reserve()
		endSpan(span, err)
		if errors.Is(err, keystore.ErrInFlight) && rt.wait && !rt.Observe {
			res, err = p.waitOriginal(r, sk, reserve) // wait.go
		}
		switch {
		case err == nil && res.Response == nil:
			p.runClaimed(w, r, next, sk, res)
		case err == nil && res.Response.TooLarge:
			p.refuse(w, r, next, problemResponseTooLarge)
		case err == nil && rt.Observe:
			p.forwardObserved(w, r, next, OutcomeWouldReplay)
		case err == nil:
			p.replay(w, r, res.Response)
		case errors.Is(err, keystore.ErrInFlight):
			p.refuse(w, r, next, problemInProgress)
		case errors.Is(err, keystore.ErrFingerprintMismatch):
			pr := problemKeyReused
			pr.Status = opts.ReuseStatus
			p.refuse(w, r, next, pr)
		case errors.Is(err, budget.ErrOverloaded): // the canonical JSON's memory
			p.refuse(w, r, next, problemOverloaded)
		case r.Context().Err() != nil:
			ex.outcome = OutcomeRejected // the client left; logged as 499
		default:
			p.log.Error("idempotency store unavailable", "error", err, "observe", rt.Observe, logRequestID, ex.id, logRoute, rt.Name)
			p.refuse(w, r, next, problemUnavailable)
		}
	})
}

// runClaimed runs a request under its new claim and records its answer.
func (p *Proxy) runClaimed(w http.ResponseWriter, r *http.Request, next http.Handler, sk keystore.Key, res keystore.Reservation) {
	ex := exchangeOf(r)
	opts := &p.opts.Idempotency
	// Claimed: the lease is renewed for as long as the request lives.
	if res.Takeover {
		p.log.Warn("took over an abandoned claim", logRequestID, ex.id, logRoute, ex.route.Name)
	}
	lease := p.renewals.start(sk, res.Token, opts.Lease, opts.MaxLease)
	p.metrics.claimHeld(1)
	defer p.metrics.claimHeld(-1)
	ex.keyed = true
	ex.outcome = OutcomeExecuted
	recorded := false
	// finish records the answer once: as soon as the capture has the whole
	// answer (before its last bytes go to the client, so a retry sent after
	// the answer arrived always finds it stored), or when the request ends.
	ex.finish = func() {
		if recorded {
			return
		}
		recorded = true
		lease.stop()
		p.record(r, ex, sk, res.Token, ex.capture)
	}
	// Runs on a panic too (ErrAbortHandler when the upstream's body broke
	// mid-stream): the claim is then kept.
	defer ex.finish()
	next.ServeHTTP(w, r)
}

// scope returns the store key of a request: the tenant, the exact values of
// the identity headers and the client's key, hashed.
func (p *Proxy) scope(r *http.Request, key string) keystore.Key {
	tenant, _ := p.opts.Idempotency.TenantFor(r.Host) // known: see checkKey
	return p.ScopeKey(tenant, r.Header, key)
}

// ScopeKey returns the store key of the idempotency key key sent under
// tenant with the identity headers in identity (only the configured
// identity headers are read, their values exactly as sent, in order). It is
// how the admin API finds a record without its hex key; a request's tenant
// is [Idempotency.TenantFor] of its Host.
func (p *Proxy) ScopeKey(tenant string, identity http.Header, key string) keystore.Key {
	opts := &p.opts.Idempotency
	parts := make([]string, 0, 3+2*len(opts.IdentityHeaders))
	parts = append(parts, "v1", tenant)
	for _, h := range opts.IdentityHeaders {
		vs := identity.Values(h)
		parts = append(parts, strconv.Itoa(len(vs)))
		parts = append(parts, vs...)
	}
	parts = append(parts, key)
	return keystore.NewKey(parts...)
}
