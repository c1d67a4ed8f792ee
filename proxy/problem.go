package proxy

import (
	"net/http"

	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/internal/problem"
)

// Outcome names, as in DESIGN.md: the access log's outcome field and the
// metrics' outcome label.
const (
	OutcomeExecuted       = "executed"
	OutcomeReplayed       = "replayed"
	OutcomeInProgress     = "in_progress"
	OutcomeKeyReused      = "key_reused"
	OutcomeTooLarge       = "too_large"
	OutcomeReleased       = "released"
	OutcomeUnprotected    = "unprotected"
	OutcomePassthrough    = "passthrough"
	OutcomeRejected       = "rejected"
	OutcomeRateLimited    = "rate_limited"
	OutcomeSessionBusy    = "session_busy"
	OutcomeUnavailable    = "unavailable"
	OutcomeUpstreamError  = "upstream_error"
	OutcomeTenantUnknown  = "tenant_unknown"
	OutcomeOverloaded     = "overloaded"      // 503: max_buffered_bytes or the client's share
	OutcomeRequestTimeout = "request_timeout" // 408: the body did not arrive in time
	// OutcomeUnknown is a keyed write refused with 409
	// idempotency_outcome_unknown: its original's outcome is unknown and
	// held until it is resolved (unknown_outcome: hold).
	OutcomeUnknown = "unknown"
	// OutcomeLate is a keyed write whose client got 504 upstream_timeout
	// and whose late answer was recorded afterwards (late.go).
	OutcomeLate = "late"
	// OutcomeIdentityInvalid is a keyed write whose token did not verify
	// (401 idempotency_identity_invalid).
	OutcomeIdentityInvalid = "identity_invalid"
)

// proxyProblem is an answer the proxy makes itself, with a stable code from
// DESIGN.md's error table, and the outcome it records for the request ("":
// none; [exchange.outcome] decides). Problems are values: stages copy one and
// change its copy, then hand it to [writeProblem].
type proxyProblem struct {
	problem.Problem
	outcome      string
	authenticate string // the WWW-Authenticate header; "" for none
}

func newProblem(status int, code, title, detail, retryAfter, outcome string) proxyProblem {
	return proxyProblem{Problem: problem.Problem{Status: status, Code: code, Title: title, Detail: detail, RetryAfter: retryAfter}, outcome: outcome}
}

// The problems of DESIGN.md's error table.
var (
	problemKeyInvalid       = newProblem(400, "idempotency_key_invalid", "Invalid idempotency key", "Idempotency-Key is not valid", "", OutcomeRejected)
	problemKeyMissing       = newProblem(400, "idempotency_key_missing", "Idempotency key required", "This operation requires an Idempotency-Key header", "", OutcomeRejected)
	problemIdentityMissing  = newProblem(400, "idempotency_identity_missing", "Client identity required", "A keyed request must carry a client identity", "", OutcomeRejected)
	problemIdentityInvalid  = newProblem(401, "idempotency_identity_invalid", "Client identity invalid", "The request's token does not verify", "", OutcomeIdentityInvalid).withAuthenticate(identity.WWWAuthenticate)
	problemInProgress       = newProblem(409, "idempotency_in_progress", "Request in progress", "A request with this idempotency key is still being processed; retry later", "2", OutcomeInProgress)
	problemOutcomeUnknown   = newProblem(409, "idempotency_outcome_unknown", "Outcome unknown", "An earlier request with this idempotency key may or may not have run; nothing runs until an operator or a reconcile probe resolves it", "", OutcomeUnknown)
	problemKeyReused        = newProblem(409, "idempotency_key_reused", "Idempotency key reused", "This idempotency key was used with a different request", "", OutcomeKeyReused)
	problemResponseTooLarge = newProblem(409, "idempotency_response_too_large", "Stored response too large", "The request ran, but its response was too large to store; do not retry, read the result instead", "", OutcomeTooLarge)
	problemUnavailable      = newProblem(503, "idempotency_unavailable", "Idempotency store unavailable", "The request was not processed; retry later", "1", OutcomeUnavailable)
	problemSessionBusy      = newProblem(503, "session_busy", "Session busy", "Too many requests for this session are waiting; retry later", "1", OutcomeSessionBusy)
	problemSessionTimeout   = newProblem(503, "session_busy", "Session busy", "This session's earlier requests took too long; retry later", "1", OutcomeSessionBusy)
	problemOverloaded       = newProblem(503, "overloaded", "Overloaded", "The proxy is holding too many request bodies; retry later", "1", OutcomeOverloaded)
	problemRequestTimeout   = newProblem(408, "request_timeout", "Request timeout", "The request body did not arrive in time", "", OutcomeRequestTimeout)
	problemRateLimited      = newProblem(429, "rate_limited", "Too many requests", "Rate limit exceeded; retry later", "1", OutcomeRateLimited)
	problemRequestTooLarge  = newProblem(413, "request_too_large", "Request too large", "The request body is larger than this operation accepts", "", OutcomeRejected)
	problemBodyInvalid      = newProblem(400, "request_body_invalid", "Request body unreadable", "The request body could not be read", "", OutcomeRejected)
	problemUpstreamDown     = newProblem(502, "upstream_unavailable", "Upstream unavailable", "The upstream could not be reached; the request was not sent", "", OutcomeUpstreamError)
	problemUpstreamBroken   = newProblem(502, "upstream_broken", "Upstream connection broken", "The connection to the upstream broke after the request was sent", "", OutcomeUpstreamError)
	problemUpstreamTimeout  = newProblem(504, "upstream_timeout", "Upstream timeout", "The upstream did not answer in time", "", OutcomeUpstreamError)
	problemRequestInvalid   = newProblem(400, "request_invalid", "Invalid request path", "The request path cannot be normalized", "", OutcomeRejected)
	problemIdentityUnread   = newProblem(400, "request_invalid", "Invalid request", "A cookie of the client's identity cannot be read as one value", "", OutcomeRejected)
	problemTenantUnknown    = newProblem(421, "tenant_unknown", "Unknown host", "This host serves no tenant; keyed requests are refused", "", OutcomeTenantUnknown)
	problemInternal         = newProblem(500, "internal", "Internal error", "The proxy failed to serve this request", "", "")
)

// problemIdentityUnavailable answers a keyed write whose token could not be
// checked (no JWK Set loaded yet, or its fetch is slow): 503, never 401,
// since the token may be good and invalid_token tells a client to discard
// it.
var problemIdentityUnavailable = newProblem(503, "idempotency_unavailable", "Client identity cannot be checked yet", "The request was not processed; retry later", "1", OutcomeUnavailable)

// withRetryAfter returns p with its Retry-After header set to secs.
func (p proxyProblem) withRetryAfter(secs int) proxyProblem {
	p.Problem = p.Problem.WithRetryAfter(secs)
	return p
}

// withAuthenticate returns p with its WWW-Authenticate header set to v.
func (p proxyProblem) withAuthenticate(v string) proxyProblem {
	p.authenticate = v
	return p
}

// writeProblem answers r with p, in its route's shape (see [problemShape]).
// It records p's code and outcome for the access log. The body carries the
// request ID; nothing internal is ever sent.
func writeProblem(w http.ResponseWriter, r *http.Request, p proxyProblem) {
	ex := exchangeOf(r)
	id := ""
	if ex != nil {
		ex.code = p.Code
		if p.outcome != "" {
			ex.problem = p.outcome
		}
		id = ex.id
	}
	if p.authenticate != "" {
		w.Header().Set("WWW-Authenticate", p.authenticate)
	}
	if ex != nil && ex.snap != nil && ex.snap.src.StripeShouldRetry {
		setShouldRetry(w.Header(), p.Code)
	}
	problem.Write(w, r, problemShape(ex), p.Problem, id)
}

// unanswered records outcome for a request refused without an answer: its
// client left first (logged as 499).
func (ex *exchange) unanswered(outcome string) { ex.problem = outcome }

// setShouldRetry sets Stripe-Should-Retry for code, the header Stripe's
// SDKs obey before their own retry rules: a reused key, an unknown outcome
// or a too-large answer never succeeds on a retry; a running original's
// duplicate does once the original is done.
func setShouldRetry(h http.Header, code string) {
	switch code {
	case problemKeyReused.Code, "idempotency_outcome_unknown", problemResponseTooLarge.Code:
		h.Set("Stripe-Should-Retry", "false")
	case problemInProgress.Code:
		h.Set("Stripe-Should-Retry", "true")
	}
}

// templateFailed logs and counts an errors template that failed at run
// time; the answer went out as problem+json.
func (s *snapshot) templateFailed(err error, route, requestID string) {
	s.log.Error("errors template failed; answered with problem+json", "error", err, logRoute, route, logRequestID, requestID)
	if s.onErrTmpl != nil {
		s.onErrTmpl(route)
	}
}

// problemShape is the one place that picks the body shape of a request's
// problems: GraphQL's errors shape on GraphQL routes, else the route's
// errors (DESIGN.md, Error shapes), or the global errors before a route
// matched; problem+json when none is configured.
func problemShape(ex *exchange) problem.Shape {
	if ex == nil || ex.snap == nil {
		return problem.JSON{}
	}
	t, route := ex.snap.errs, ""
	if ex.route != nil {
		t, route = ex.route.errs, ex.route.Name
	}
	onError := func(err error) {
		ex.snap.templateFailed(err, route, ex.id)
	}
	if ex.route != nil && ex.route.Protocol == ProtocolGraphQL {
		return graphQLShape{t: t, onError: onError}
	}
	return problem.Custom{T: t, OnError: onError}
}
