package proxy

import (
	"errors"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/budget"
	"github.com/idemgate/idemgate/internal/identity"
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
		opts := &ex.snap.idem
		sk := p.scope(r, ex.key)
		// Stores bound their own calls (the Redis client's timeout); a
		// client that hangs up cancels the claim. reserve computes the
		// fingerprint and compares it in the record's version. Each claim's
		// id is drawn before the claim is sent, so that a claim whose reply
		// is lost can be released by it (DESIGN.md step 8).
		ctx, span := p.startSpan(r.Context(), spanClaim)
		var id keystore.ClaimID
		reserve := func() (keystore.Reservation, error) {
			id = keystore.NewClaimID()
			return p.reserve(ctx, r, ex, sk, keystore.ReserveOptions{
				Route:     rt.Name,
				Lease:     opts.Lease,
				Retention: rt.retention,
				ClaimID:   id,
				Hold:      rt.hold,
			})
		}
		res, err := reserve()
		endSpan(span, err)
		p.markedLapsed(r, sk, err) // unknown.go
		if errors.Is(err, keystore.ErrInFlight) && rt.wait && !rt.Observe {
			res, err = p.waitOriginal(r, sk, reserve) // wait.go
		}
		switch {
		case err == nil && res.Response == nil:
			p.runClaimed(w, r, next, sk, res)
		case err == nil && res.Response.TooLarge:
			p.refuse(w, r, next, problemResponseTooLarge)
		case err == nil && rt.Observe:
			p.forwardObserved(w, r, next, OutcomeReplayed)
		case err == nil:
			p.replay(w, r, res.Response)
		case errors.Is(err, keystore.ErrInFlight):
			p.refuse(w, r, next, problemInProgress)
		case errors.Is(err, keystore.ErrOutcomeUnknown):
			p.refuse(w, r, next, problemOutcomeUnknown)
		case errors.Is(err, keystore.ErrFingerprintMismatch):
			pr := problemKeyReused
			pr.Status = rt.reuseStatus
			p.refuse(w, r, next, pr)
		case errors.Is(err, budget.ErrOverloaded): // the canonical JSON's memory
			p.refuse(w, r, next, problemOverloaded)
		case r.Context().Err() != nil:
			p.lostClaim(sk, id, opts.Lease, err)
			ex.unanswered(OutcomeRejected)
		default:
			p.lostClaim(sk, id, opts.Lease, err)
			p.log.Error("idempotency store unavailable", "error", err, "observe", rt.Observe, logRequestID, ex.id, logRoute, rt.Name)
			p.refuse(w, r, next, problemUnavailable)
		}
	})
}

// runClaimed runs a request under its new claim as a keyed write
// (keyedwrite.go), which records its answer.
func (p *Proxy) runClaimed(w http.ResponseWriter, r *http.Request, next http.Handler, sk keystore.Key, res keystore.Reservation) {
	ex := exchangeOf(r)
	opts := &ex.snap.idem
	// Claimed: the lease is renewed for as long as the request lives.
	if res.Takeover {
		p.log.Warn("took over an abandoned claim", logRequestID, ex.id, logRoute, ex.route.Name)
	}
	ex.write = keyedWrite{p: p, r: r, ex: ex, sk: sk, claim: res.Claim,
		lease:   p.renewals.start(sk, res.Token, opts.Lease, opts.MaxLease),
		capture: capture{max: opts.MaxResponseBytes}}
	kw := &ex.write
	ex.kw = kw
	p.metrics.claimHeld(1)
	defer func() {
		if ex.kept() {
			// A kept call records and gives the claim's gauge back when
			// it ends (late.go).
			ex.after(func() { p.metrics.claimHeld(-1) })
			return
		}
		// The answer was recorded as soon as it was whole; if it never
		// was (nothing sent, no answer, or a panic: ErrAbortHandler when
		// the upstream's body broke mid-stream, and the claim is kept),
		// the record runs now.
		kw.record()
		p.metrics.claimHeld(-1)
	}()
	next.ServeHTTP(w, r)
}

// lostClaim hands the claim id of a Reserve that failed with err to the
// Releaser: a store that timed out may still have made the claim, which
// would then hold the key for a whole lease although nothing ran. Answers
// that say no claim was made (full, revoked, closed) release nothing.
func (p *Proxy) lostClaim(sk keystore.Key, id keystore.ClaimID, lease time.Duration, err error) {
	if p.deps.Releaser == nil || errors.Is(err, keystore.ErrFull) ||
		errors.Is(err, keystore.ErrLeaseLost) || errors.Is(err, keystore.ErrClosed) {
		return
	}
	if !p.deps.Releaser.Add(sk, id, lease) {
		p.log.Warn("release of a claim with a lost reply dropped (too many pending); the key is held until its lease ends", "claim_id", id.String())
	}
}

// scope returns the store key of a request: the tenant, the client's
// identity (identity.go) and the key, hashed.
func (p *Proxy) scope(r *http.Request, key string) keystore.Key {
	var tenant string // known: see checkKey
	if ex := exchangeOf(r); ex != nil {
		tenant, _ = ex.tenantOf(r.Host)
	} else {
		tenant, _ = p.cur.Load().idem.TenantFor(r.Host)
	}
	return identity.ScopeKey(tenant, p.identityOf(r), key)
}
