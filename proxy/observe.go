package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/idemgate/idemgate/keystore"
)

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

// observe is the idempotency stage of a route in observe mode (mode:
// observe). It forwards every request as if idemgate were absent, and keeps
// the store as enforce mode would: a new key is claimed, run and recorded
// (released or stored) exactly as in enforce mode, so that switching to
// enforce later starts from a true history. A request that enforce mode
// would have refused or replayed — a duplicate of a completed or running
// request, a key reused with another request, a malformed key, a body over
// max_body_bytes, a store that cannot be reached — is forwarded unclaimed
// instead: its answer is not stored, and its outcome is the would_*
// outcome that says what enforce mode would have done. (When the forwarded
// request then fails upstream, the outcome is upstream_error.)
//
// Like every keyed write, a request forwarded unclaimed is never resent by
// the Transport. Session turns and rate limits are not part of this stage:
// they apply in both modes.
func (p *Proxy) observe(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ex := exchangeOf(r)
	rt := ex.route
	opts := &p.opts.Idempotency

	// 4. Key check, as enforce mode does it.
	vals := r.Header.Values(opts.Header)
	switch {
	case len(vals) > 1:
		p.forwardObserved(w, r, next, OutcomeWouldReject)
		return
	case len(vals) == 0 || vals[0] == "":
		if rt.RequireKey {
			p.forwardObserved(w, r, next, OutcomeWouldReject)
			return
		}
		ex.outcome = OutcomeUnprotected
		next.ServeHTTP(w, r)
		return
	case !ValidKey(vals[0]), opts.RequireIdentity && !p.hasIdentity(r):
		p.forwardObserved(w, r, next, OutcomeWouldReject)
		return
	}
	key := vals[0]
	body, release, would := p.observeBody(r)
	if would != "" {
		p.forwardObserved(w, r, next, would)
		return
	}
	defer release()

	// 5. Claim.
	sk := p.scope(r, key)
	fp := Fingerprint(rt.Name, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Content-Type"), body, rt.ignore)
	res, err := p.opts.Store.Reserve(r.Context(), sk, keystore.ReserveOptions{
		Fingerprint: fp,
		Route:       rt.Name,
		Lease:       opts.Lease,
		Retention:   opts.Retention,
	})
	switch {
	case err == nil && res.Response == nil:
		p.runClaimed(w, r, next, sk, res)
		return
	case err == nil && res.Response.TooLarge:
		would = OutcomeWouldTooLarge
	case err == nil:
		would = OutcomeWouldReplay
	case errors.Is(err, keystore.ErrInFlight):
		would = OutcomeWouldInProgress
	case errors.Is(err, keystore.ErrFingerprintMismatch):
		would = OutcomeWouldKeyReused
	case r.Context().Err() != nil:
		ex.outcome = OutcomeRejected
		return // the client left; logged as 499
	default:
		p.log.Error("idempotency store unavailable; observe mode forwards the request", "error", err, logRequestID, ex.id, logRoute, rt.Name)
		would = OutcomeWouldUnavailable
	}
	p.forwardObserved(w, r, next, would)
}

// forwardObserved forwards a keyed write of an observed route without a
// claim, recording what enforce mode would have done.
func (p *Proxy) forwardObserved(w http.ResponseWriter, r *http.Request, next http.Handler, would string) {
	ex := exchangeOf(r)
	ex.observed = true
	ex.outcome = would
	next.ServeHTTP(w, r)
}

// observeBody reads a keyed request's body whole, as readBody does for
// enforce mode, but never refuses it: a body that enforce mode would refuse
// (over max_body_bytes, or over the max_buffered_bytes budget) is left to
// stream to the upstream whole, and would names the outcome enforce mode
// would have had. The caller calls release when would is "".
func (p *Proxy) observeBody(r *http.Request) (body []byte, release func(), would string) {
	limit := p.opts.Idempotency.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, nil, OutcomeWouldReject
	}
	hold := limit
	if r.ContentLength >= 0 {
		hold = r.ContentLength
	}
	if p.buffered.Add(hold) > p.opts.MaxBufferedBytes {
		p.buffered.Add(-hold)
		return nil, nil, OutcomeWouldUnavailable
	}
	release = func() { p.buffered.Add(-hold) }
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil, release, ""
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 512)))
	_, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	if err != nil || int64(buf.Len()) > limit {
		// Forward what was read, then the rest (or the same failure), as
		// the upstream would have seen it without idemgate.
		release()
		rest := r.Body
		if err != nil {
			rest = &failedBody{err: err, Closer: r.Body}
		}
		r.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(buf.Bytes()), rest), Closer: r.Body}
		return nil, nil, OutcomeWouldReject
	}
	body = buf.Bytes()
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = nil
	return body, release, ""
}

// prefixedBody is a request body whose start was read already.
type prefixedBody struct {
	io.Reader
	io.Closer
}

// failedBody replays a body's read error.
type failedBody struct {
	err error
	io.Closer
}

func (f *failedBody) Read([]byte) (int, error) { return 0, f.err }
