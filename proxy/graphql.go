package proxy

import (
	"net/http"
	"strconv"

	"github.com/idemgate/idemgate/internal/gql"
)

// ProtocolGraphQL is the Route.Protocol of a GraphQL-over-HTTP endpoint.
const ProtocolGraphQL = "graphql"

// serveGraphQL is the key check of a route with protocol: graphql (issue
// 10): every operation is a POST to one path, so the body decides. Queries
// and subscriptions ignore the key and pass through; mutations, and bodies
// whose operation cannot be told, follow the core rules with a fingerprint
// of the normalized operation (internal/gql) and the GraphQL release rule.
// vals are the request's key header values.
func (p *Proxy) serveGraphQL(w http.ResponseWriter, r *http.Request, next http.Handler, vals []string) {
	ex := exchangeOf(r)
	rt := ex.route
	noKey := len(vals) == 0 || (len(vals) == 1 && vals[0] == "")
	if noKey && !rt.RequireKey {
		// Nothing to protect whatever the operation: stream it.
		ex.outcome = OutcomeUnprotected
		next.ServeHTTP(w, r)
		return
	}
	body, release, prob := p.readBody(w, r)
	if prob != nil {
		WriteProblem(w, r, *prob)
		return
	}
	defer release()
	req, err := gql.ParseRequest(r.Header.Get("Content-Type"), body)
	if err == nil && !req.Keyed() {
		ex.outcome = OutcomePassthrough
		next.ServeHTTP(w, r)
		return
	}
	// A mutation, or a body that may write (not a GraphQL request this
	// proxy understands: fingerprinted raw, released only by status).
	switch {
	case len(vals) > 1:
		WriteProblem(w, r, p.keyInvalid())
		return
	case noKey:
		WriteProblem(w, r, ProblemKeyMissing)
		return
	case !ValidKey(vals[0]):
		WriteProblem(w, r, p.keyInvalid())
		return
	case p.opts.Idempotency.RequireIdentity && !p.hasIdentity(r):
		WriteProblem(w, r, ProblemIdentityMissing)
		return
	}
	if err == nil {
		ex.gql = &req
	}
	if prob := p.serveKeyed(w, r, next, vals[0], body); prob != nil {
		WriteProblem(w, r, *prob)
	}
}

// graphqlFingerprintBody returns what stands for a GraphQL request's body in
// its fingerprint.
func graphqlFingerprintBody(req *gql.Request) []byte { return req.AppendFingerprint(nil) }

// releaseGraphQL reports whether a GraphQL answer proves nothing ran.
func (p *Proxy) releaseGraphQL(req *gql.Request, status int, body []byte) bool {
	return gql.ReleaseOnAnswer(*req, status, func(s int) bool { return s >= 0 && s < len(p.release) && p.release[s] }, body)
}

// writeGraphQLProblem answers with a problem in GraphQL's shape, same status
// and headers (issue 10): {"errors":[{"message":…,"extensions":{"code":…}}]}.
func writeGraphQLProblem(w http.ResponseWriter, r *http.Request, p Problem, requestID string) {
	h := w.Header()
	h.Set("Content-Type", gql.ContentType)
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter != "" {
		h.Set("Retry-After", p.RetryAfter)
	}
	body := gql.ErrorBody(p.Detail, p.Code, map[string]any{"status": p.Status, "request_id": requestID})
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}
