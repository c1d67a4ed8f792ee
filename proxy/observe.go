package proxy

import "net/http"

// The outcomes of observe mode: what idemgate would have done to a keyed
// write, had the route been enforced, while it forwarded the request
// instead. They appear in the access log's outcome field and the outcome
// label of idemgate_http_requests_total.
const (
	OutcomeWouldReplay      = "would_replay"      // enforce: replayed
	OutcomeWouldInProgress  = "would_in_progress" // enforce: 409 idempotency_in_progress
	OutcomeWouldKeyReused   = "would_key_reused"  // enforce: 409/422 idempotency_key_reused
	OutcomeWouldTooLarge    = "would_too_large"   // enforce: 409 idempotency_response_too_large
	OutcomeWouldReject      = "would_reject"      // enforce: 400 or 413 (bad, missing or repeated key, no identity, body too large)
	OutcomeWouldUnavailable = "would_unavailable" // enforce: 503 (store unreachable or full, or overloaded)
)

// refuse is the one place where the modes differ. Enforce mode answers a
// keyed write with pr. Observe mode (mode: observe) forwards it instead, as
// if idemgate were absent, with the would_* outcome that says what enforce
// mode would have done; the key check, the body reader and the claim are
// the same in both modes, so a new key is claimed, run and recorded in
// observe mode exactly as in enforce mode, and switching to enforce later
// starts from a true history. A request forwarded unclaimed is never
// resent by the Transport and its answer is not stored; when it then fails
// upstream, its outcome is upstream_error. Session turns and rate limits
// apply in both modes.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, next http.Handler, pr proxyProblem) {
	if exchangeOf(r).route.Observe {
		p.forwardObserved(w, r, next, pr.outcome)
		return
	}
	writeProblem(w, r, pr)
}

// wouldOutcome is the observe-mode outcome of a keyed write whose outcome
// in enforce mode would be outcome.
func wouldOutcome(outcome string) string {
	switch outcome {
	case OutcomeReplayed:
		return OutcomeWouldReplay
	case OutcomeInProgress, OutcomeUnknown:
		return OutcomeWouldInProgress
	case OutcomeKeyReused:
		return OutcomeWouldKeyReused
	case OutcomeTooLarge:
		return OutcomeWouldTooLarge
	case OutcomeUnavailable, OutcomeOverloaded:
		return OutcomeWouldUnavailable
	}
	return OutcomeWouldReject
}

// forwardObserved forwards a keyed write of an observed route without a
// claim, recording what enforce mode would have done: its outcome there.
func (p *Proxy) forwardObserved(w http.ResponseWriter, r *http.Request, next http.Handler, enforce string) {
	exchangeOf(r).observed = enforce
	next.ServeHTTP(w, r)
}
