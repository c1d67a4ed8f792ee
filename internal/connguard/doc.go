// Package connguard watches HTTP/1 request heads on the connection, below
// net/http, for what a handler cannot see (DESIGN.md, "Bounds"; issue 15):
//
//   - A request with both Content-Length and Transfer-Encoding (RFC 9112
//     §6.3: the connection must be closed after it, since a front proxy that
//     honours Content-Length reads a different next request than we do).
//     net/http reads such a body by Transfer-Encoding and deletes
//     Content-Length from the request, so the handler cannot tell. The
//     [Listener] inserts a marker header, [Marker], into that request's head
//     as the server reads it, and [Check] (called by the outermost handler)
//     removes the marker and sets "Connection: close", so no pipelined
//     request after it is served.
//   - max_header_bytes, exactly. net/http's MaxHeaderBytes lets up to 4096
//     more bytes through (its read limit is MaxHeaderBytes + 4096 for bufio
//     slop, counted over whatever the connection delivered). The Listener
//     counts each head's bytes itself (request line, header lines and the
//     final empty line, CRLFs included) and, once a head passes the limit,
//     hands the server filler bytes in place of the rest, so that net/http's
//     own limit trips and it answers its usual plain-text 431 and closes.
//     Set http.Server.MaxHeaderBytes to the same limit (any value works;
//     a larger one only costs more filler).
//
// To stay in step with pipelined requests the Listener follows each body's
// framing as net/http does (Content-Length; chunked Transfer-Encoding, chunk
// extensions and trailers; Transfer-Encoding ignored on HTTP/1.0). A head it
// cannot frame with certainty (an unparsable Content-Length or chunk line,
// a Transfer-Encoding other than chunked) is marked too, and the Listener
// stops watching that connection, as it does after an Upgrade request (the
// bytes after it may be another protocol) and after the HTTP/2 preface.
// A connection that is no longer watched still has net/http's own
// MaxHeaderBytes limit (4096 bytes looser).
//
// The Listener must see the plain-text stream: wrap a TCP listener, not a
// TLS one. For TLS, [NewTLSListener] serves TLS itself and watches the
// decrypted stream. net/http runs HTTP/2 only on a *tls.Conn, handing it
// whole to its HTTP/2 server, so its connections are not *tls.Conn:
// [ServeTLS] has the server sniff the HTTP/2 preface instead (its
// "unencrypted HTTP/2", inside our TLS) and serve HTTP/2 on the watched
// stream; [Check] sets r.TLS. HTTP/2 frames its own bodies and forbids
// Transfer-Encoding (RFC 9113 §8.2.2; Go's HTTP/2 server answers 400
// before any handler runs), so there the Listener only passes frames on;
// max_header_bytes becomes the HTTP/2 header list size, exactly (see
// [H2MaxHeaderBytes]).
package connguard
