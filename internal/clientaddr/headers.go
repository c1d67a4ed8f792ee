package clientaddr

import "strings"

// clientAddrHeaders are the request headers, besides the X-Forwarded-*
// family, through which a request can claim a client address: DESIGN.md's
// X-Real-IP, True-Client-IP and Forwarded (RFC 7239), and the CDN and
// load-balancer variants that upstream frameworks also read.
var clientAddrHeaders = [...]string{
	"X-Real-Ip", "True-Client-Ip", "Forwarded",
	"X-Client-Ip", "X-Cluster-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip",
}

// StripHeaders removes from h every header through which a client
// could claim an address: X-Real-IP, True-Client-IP, Forwarded, X-Client-IP,
// X-Cluster-Client-IP, CF-Connecting-IP, Fastly-Client-IP and every
// X-Forwarded-* header (X-Forwarded-For, -Host, -Proto, -Port, -Prefix, ...),
// in every spelling an upstream may fold into one of them: any case, and "_"
// for "-" (X_Real_IP, x-forwarded_proto): WSGI and CGI servers turn both
// into HTTP_X_REAL_IP (DESIGN.md, Hardening). It returns the number of
// header names removed.
//
// h is a request's header map (an http.Header converts implicitly; this
// package does not import net/http). Call it for a request whose TCP peer is
// not trusted ([Trusted] is false) before forwarding it: DESIGN.md, "Bounds"
// (issue 15). Then set X-Forwarded-For/-Host/-Proto afresh from the
// connection. For a trusted peer, call [StripFoldedHeaders], keep
// what it sent under the proper names and append to X-Forwarded-For (its
// X-Real-IP names the client it saw).
func StripHeaders(h map[string][]string) int {
	return stripClientAddr(h, false)
}

// StripFoldedHeaders removes from h the client-address headers (as
// [StripHeaders] names them) spelled with a "_": no proxy sets
// X_Real_IP or X-Forwarded_For, so from a trusted peer they are a client's
// own, passed through (Envoy allows underscores by default), which a WSGI
// upstream would read as, or in place of, the proxy's X-Real-IP. It returns
// the number of header names removed.
func StripFoldedHeaders(h map[string][]string) int {
	return stripClientAddr(h, true)
}

func stripClientAddr(h map[string][]string, folded bool) int {
	n := 0
	for k := range h {
		if isClientAddrHeader(k) && (!folded || strings.IndexByte(k, '_') >= 0) {
			delete(h, k)
			n++
		}
	}
	return n
}

// isClientAddrHeader is the one rule that names a client-address header:
// the names compare without case and with "_" read as "-".
func isClientAddrHeader(k string) bool {
	// Every name below starts with X, T, F or C: most of a request's
	// headers (Accept, User-Agent, Authorization, Idempotency-Key) are
	// passed over at their first byte, on every forwarded request.
	if k == "" {
		return false
	}
	switch fold(k[0]) {
	case 'x', 't', 'f', 'c':
	default:
		return false
	}
	const xf = "X-Forwarded-"
	if len(k) >= len(xf) && foldEqual(k[:len(xf)], xf) {
		return true
	}
	for _, c := range clientAddrHeaders {
		if foldEqual(k, c) {
			return true
		}
	}
	return false
}

// foldEqual reports whether the header names a and b are one name to an
// upstream that ignores case and reads "_" as "-" (WSGI, CGI, PHP).
func foldEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if fold(a[i]) != fold(b[i]) {
			return false
		}
	}
	return true
}

func fold(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '_':
		return '-'
	}
	return c
}
