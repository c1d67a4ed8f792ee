package proxy

import (
	"net/http"

	"github.com/idemgate/idemgate/internal/canonjson"
	"github.com/idemgate/idemgate/internal/gql"
	"github.com/idemgate/idemgate/internal/problem"
)

// ProtocolGraphQL is the Route.Protocol of a GraphQL-over-HTTP endpoint.
const ProtocolGraphQL = "graphql"

// keyCheckGraphQL is the key check of a route with protocol: graphql (issue
// 10): every operation is a POST to one path, so the body decides. Queries
// and subscriptions ignore the key and pass through; mutations, and bodies
// whose operation cannot be told, must carry a key (the core rule of
// [Proxy.checkKey]) and are claimed with a fingerprint of the normalized
// operation (internal/gql) and recorded with the GraphQL release rule.
// vals are the request's key header values.
func (p *Proxy) keyCheckGraphQL(w http.ResponseWriter, r *http.Request, next http.Handler, vals []string) {
	ex := exchangeOf(r)
	noKey := len(vals) == 0 || (len(vals) == 1 && vals[0] == "")
	if noKey && !ex.route.RequireKey {
		// Nothing to protect whatever the operation: stream it.
		ex.via = viaNoKey
		next.ServeHTTP(w, r)
		return
	}
	body, held, prob := p.readBody(w, r, false)
	if prob != nil {
		writeProblem(w, r, *prob)
		return
	}
	defer ex.free(held) // a kept call holds the body on (late.go)
	fp, prob := p.decodeBody(r, body)
	if prob != nil {
		writeProblem(w, r, *prob)
		return
	}
	req, err := gql.ParseRequest(fp.contentType, graphqlIgnore(fp, ex.route.ignore))
	if err == nil && !req.Keyed() {
		ex.via = viaRead
		next.ServeHTTP(w, r)
		return
	}
	// A mutation, or a body that may write (not a GraphQL request this
	// proxy understands: fingerprinted raw, released only by status).
	key, prob := p.checkKey(r, vals, true)
	if prob != nil {
		writeProblem(w, r, *prob)
		return
	}
	if err == nil {
		ex.gql = &req
	}
	ex.key, ex.body, ex.fp = key, body, fp
	next.ServeHTTP(w, r)
}

// graphqlIgnore returns the request object in, with the route's
// fingerprint_ignore pointers removed (e.g.
// /variables/input/clientMutationId) when it is a JSON object and there
// are any, for parsing into what the fingerprint hashes.
func graphqlIgnore(in fingerprintInput, ignore []canonjson.Pointer) []byte {
	if len(ignore) == 0 || !isJSON(in.contentType) && in.contentType != "" {
		return in.body
	}
	if c, ok := canonjson.Append(nil, in.body, ignore); ok {
		return c
	}
	return in.body
}

// graphqlFingerprintBody returns what stands for a GraphQL request's body in
// its fingerprint.
func graphqlFingerprintBody(req *gql.Request) []byte { return req.AppendFingerprint(nil) }

// graphQLShape is the problem shape of GraphQL routes (issue 10), same
// status and headers: {"errors":[{"message":…,"extensions":{"code":…}}]},
// the code renamed by the route's errors.codes and its errors.extensions
// merged into extensions (DESIGN.md, Error shapes). A failing extensions
// template leaves them out and is reported to onError.
type graphQLShape struct {
	t       *problem.Template
	onError func(error)
}

func (graphQLShape) ContentType() string { return gql.ContentType }

func (s graphQLShape) AppendBody(b []byte, p problem.Problem, requestID string) []byte {
	p.Code = s.t.Code(p.Code)
	ext, err := s.t.Extensions(p, requestID)
	if err != nil && s.onError != nil {
		s.onError(err)
	}
	extra := make(map[string]any, len(ext)+2)
	for k, v := range ext {
		extra[k] = v
	}
	extra["status"], extra["request_id"] = p.Status, requestID
	return append(b, gql.ErrorBody(p.Detail, p.Code, extra)...)
}
