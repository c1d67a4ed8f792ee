// Package gql reads GraphQL-over-HTTP requests and answers for routes with
// `protocol: graphql` (DESIGN.md, "Fingerprint"; issue #10). It is pure: no
// net/http handlers, no I/O, no global state, and everything in it is safe for
// concurrent use.
//
// The proxy uses it in three places:
//
//  1. [ParseRequest] reads a keyed request's body and tells which operation
//     it runs ([Request.Operation]). Queries and subscriptions ignore the
//     Idempotency-Key ([Request.Keyed] is false); mutations, and requests
//     whose operation cannot be told (a document the parser refuses, an
//     operationName that selects nothing, a persisted query sent by hash
//     only), are keyed. An error from ParseRequest means the body is not a
//     GraphQL request this package understands (another media type, a JSON
//     batch array, invalid JSON): the proxy should then treat it as any other
//     keyed write, fingerprinting the raw body, since it may still write.
//  2. [Request.AppendFingerprint] gives the bytes that stand for the body in
//     the route's fingerprint: the operation name, the document normalized by
//     a real GraphQL parser, the canonical variables, the persisted-query
//     hash, and the request's other members.
//  3. [ReleaseOnAnswer] decides, from the upstream's answer, whether the key
//     is released (the answer proves nothing ran) or the answer is stored.
//
// [ErrorBody] builds idemgate's own answers on GraphQL routes.
//
// # Normalization
//
// The document is parsed by github.com/vektah/gqlparser/v2 (syntax only: no
// schema is known) and printed again by this package's own canonical printer
// ([AppendNormalized]): comments, descriptions, whitespace and insignificant
// commas are dropped, `{ a }` is printed as `query{a}`, an alias equal to the
// field name is dropped, and every string (block strings included) is
// printed as one quoted string with minimal escapes. Everything else is kept
// in document order: fields, arguments, input object fields, directives and
// variable definitions, so reordering any of them is a different request
// (conservative: equal fingerprints must mean equal requests). Numbers are
// kept as written (1 and 1.0 differ).
//
// Only the operation the request selects and the fragments it uses,
// directly or through other fragments, are printed, the fragments sorted by
// name: unused operations and fragments, and the order of fragment
// definitions, cannot change what runs, so they do not change the
// fingerprint. When no operation is selected (see [Operation]) the whole
// document is printed, in document order. Printing is idempotent: normalizing
// the printed text again yields the same bytes.
//
// # Fingerprint
//
// The variables are canonicalized by internal/canonjson (member order
// ignored, numbers kept as written); absent, null and {} variables are the
// same request, since GraphQL executes them alike. The members of the JSON
// body other than query, operationName and variables (extensions, and
// non-standard members such as Relay's doc_id) are fingerprinted as
// canonical JSON too: a server may give them meaning, so a difference there
// is treated as a different request. Retries resend the same body, so this
// costs nothing in practice.
//
// # Release rule
//
// See [ReleaseOnAnswer]. Clients should send one mutation per request: when
// a request holds several mutation fields and one fails, the others may have
// written, so the key stays taken and the failure is replayed.
package gql
