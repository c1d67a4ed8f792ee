package proxy

import (
	"net/http"
	"strconv"
)

// Outcome names, as in DESIGN.md: the access log's outcome field and the
// metrics' outcome label.
const (
	OutcomeExecuted      = "executed"
	OutcomeReplayed      = "replayed"
	OutcomeInProgress    = "in_progress"
	OutcomeKeyReused     = "key_reused"
	OutcomeTooLarge      = "too_large"
	OutcomeReleased      = "released"
	OutcomeUnprotected   = "unprotected"
	OutcomePassthrough   = "passthrough"
	OutcomeRejected      = "rejected"
	OutcomeRateLimited   = "rate_limited"
	OutcomeSessionBusy   = "session_busy"
	OutcomeUnavailable   = "unavailable"
	OutcomeUpstreamError = "upstream_error"
)

// Problem is an answer the proxy makes itself: an RFC 9457
// application/problem+json document with a stable code from DESIGN.md's
// error table. Problems are values; stages hand them to [WriteProblem].
type Problem struct {
	Status     int
	Code       string
	Title      string
	Detail     string
	RetryAfter string // Retry-After header value, "" for none
	Outcome    string // the outcome recorded for the request
}

// The problems of DESIGN.md's error table.
var (
	ProblemKeyInvalid       = Problem{400, "idempotency_key_invalid", "Invalid idempotency key", "Idempotency-Key is not valid", "", OutcomeRejected}
	ProblemKeyMissing       = Problem{400, "idempotency_key_missing", "Idempotency key required", "This operation requires an Idempotency-Key header", "", OutcomeRejected}
	ProblemIdentityMissing  = Problem{400, "idempotency_identity_missing", "Client identity required", "A keyed request must carry a client identity header", "", OutcomeRejected}
	ProblemInProgress       = Problem{409, "idempotency_in_progress", "Request in progress", "A request with this idempotency key is still being processed; retry later", "2", OutcomeInProgress}
	ProblemKeyReused        = Problem{409, "idempotency_key_reused", "Idempotency key reused", "This idempotency key was used with a different request", "", OutcomeKeyReused}
	ProblemResponseTooLarge = Problem{409, "idempotency_response_too_large", "Stored response too large", "The request ran, but its response was too large to store; do not retry, read the result instead", "", OutcomeTooLarge}
	ProblemUnavailable      = Problem{503, "idempotency_unavailable", "Idempotency store unavailable", "The request was not processed; retry later", "1", OutcomeUnavailable}
	ProblemSessionBusy      = Problem{503, "session_busy", "Session busy", "Too many requests for this session are waiting; retry later", "1", OutcomeSessionBusy}
	ProblemOverloaded       = Problem{503, "overloaded", "Overloaded", "The proxy is holding too many request bodies; retry later", "1", OutcomeUnavailable}
	ProblemRateLimited      = Problem{429, "rate_limited", "Too many requests", "Rate limit exceeded; retry later", "1", OutcomeRateLimited}
	ProblemRequestTooLarge  = Problem{413, "request_too_large", "Request too large", "The request body is larger than this operation accepts", "", OutcomeRejected}
	ProblemUpstreamDown     = Problem{502, "upstream_unavailable", "Upstream unavailable", "The upstream could not be reached; the request was not sent", "", OutcomeUpstreamError}
	ProblemUpstreamBroken   = Problem{502, "upstream_broken", "Upstream connection broken", "The connection to the upstream broke after the request was sent", "", OutcomeUpstreamError}
	ProblemUpstreamTimeout  = Problem{504, "upstream_timeout", "Upstream timeout", "The upstream did not answer in time", "", OutcomeUpstreamError}
)

// WithRetryAfter returns p with its Retry-After header set to secs.
func (p Problem) WithRetryAfter(secs int) Problem {
	p.RetryAfter = strconv.Itoa(secs)
	return p
}

// problemContentType is the media type of every problem document.
const problemContentType = "application/problem+json"

// WriteProblem answers r with p. It records p's code and outcome for the
// access log. The body carries the request ID; nothing internal is ever
// sent.
func WriteProblem(w http.ResponseWriter, r *http.Request, p Problem) {
	ex := exchangeOf(r)
	id := ""
	if ex != nil {
		ex.code = p.Code
		ex.outcome = p.Outcome
		id = ex.id
	}
	if ex != nil && ex.route != nil && ex.route.Protocol == ProtocolGraphQL {
		writeGraphQLProblem(w, r, p, id)
		return
	}
	h := w.Header()
	h.Set("Content-Type", problemContentType)
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter != "" {
		h.Set("Retry-After", p.RetryAfter)
	}
	body := appendProblem(make([]byte, 0, 256), p, id)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

func appendProblem(b []byte, p Problem, requestID string) []byte {
	b = append(b, `{"type":`...)
	b = strconv.AppendQuote(b, "urn:idemgate:problem:"+p.Code)
	b = append(b, `,"title":`...)
	b = strconv.AppendQuote(b, p.Title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(p.Status), 10)
	b = append(b, `,"code":`...)
	b = strconv.AppendQuote(b, p.Code)
	b = append(b, `,"detail":`...)
	b = strconv.AppendQuote(b, p.Detail)
	b = append(b, `,"request_id":`...)
	b = strconv.AppendQuote(b, requestID)
	return append(b, "}\n"...)
}
