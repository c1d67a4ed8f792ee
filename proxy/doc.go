// Package proxy is idemgate's request pipeline: an [http.Handler] that sits
// in front of an unmodified HTTP API and makes its keyed writes idempotent.
//
// [New] takes the long-lived dependencies ([Deps]: the store, the
// transport, the clock, the logger, the metrics, the tracer);
// [Proxy.Apply] compiles a [Policy] (every setting: the routes, the
// limiters, the session queue, the idempotency keys) into one immutable
// snapshot, swapped atomically, and a request runs on the snapshot current
// at its arrival from its first stage to its last. The proxy builds every
// stage itself, in the order of DESIGN.md, which is authoritative; chain.go
// assembles it on one screen:
//
//	begin, in-flight, access log, recover  (outermost, every request)
//	edge limit                              (every request)
//	route match                             (exact method + path template)
//	route limit                             (per route)
//	key check                               (keyed writes: key, identity, body)
//	claim                                   (keyed writes; records the answer)
//	session turn                            (routes with a session)
//	upstream                                (httputil.ReverseProxy)
//
// A request's state is its exchange (exchange.go): the client's
// ResponseWriter, wrapped, and what the stages found out. A keyed write is
// claimed in a [keystore.Store] before it is forwarded; the claim stage
// then makes it a keyed write (keyedwrite.go), the one value that holds
// the claim, the answer kept for storage (at most MaxResponseBytes, while
// the answer streams to the client) and the record step: the answer is
// stored (and replayed to every retry) or the key is released, as
// DESIGN.md step 8 says, once: as soon as the whole answer was read,
// before its last bytes reach the client, or when the request ends
// without one. Observe mode and GraphQL routes
// are policies of the same key check, body reader, claim and record. Every
// answer the proxy makes itself goes through one writer (problem.go), in
// the route's shape: application/problem+json with a stable code and the
// request ID, or GraphQL's errors. A request's outcome (the access log's,
// the metrics', the server span's) is the problem writer's, or derived in
// one place from the keyed write's record or how the request went on
// (exchange.outcome).
package proxy
