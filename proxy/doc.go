// Package proxy is idemgate's request pipeline: an [http.Handler] that sits
// in front of an unmodified HTTP API and makes its keyed writes idempotent.
//
// The pipeline is a chain of [Middleware] stages in the order of
// DESIGN.md, which is authoritative (see chain.go):
//
//	recover, request ID, access log  (outermost, every request)
//	edge limit                        (every request; filled by the limiter)
//	route match                       (exact method + path template)
//	route limit                       (per route; filled by the limiter)
//	key check + claim                 (keyed writes only)
//	session turn                      (routes with a session)
//	upstream                          (httputil.ReverseProxy)
//
// A keyed write is claimed in a [keystore.Store] before it is forwarded, its
// answer is streamed to the client while at most MaxResponseBytes are kept,
// and the answer is then stored (and replayed to every retry) or the key is
// released, as DESIGN.md step 8 says. Every answer the proxy makes itself is
// an application/problem+json document with a stable code; see errors.go.
package proxy
