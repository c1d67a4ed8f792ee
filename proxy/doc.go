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
// A keyed write is
// claimed in a [keystore.Store] before it is forwarded, its answer is
// streamed to the client while at most MaxResponseBytes are kept, and the
// answer is then stored (and replayed to every retry) or the key is released,
// as DESIGN.md step 8 says. Observe mode and GraphQL routes are
// policies of the same key check, body reader, claim and record. Every
// answer the proxy makes itself goes through one writer (problem.go), in
// the route's shape: application/problem+json with a stable code and the
// request ID, or GraphQL's errors.
package proxy
