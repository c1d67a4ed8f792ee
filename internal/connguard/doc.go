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
//   - max_header_bytes, exactly, and live. net/http's MaxHeaderBytes lets
//     up to 4096 more bytes through (its read limit is MaxHeaderBytes +
//     4096 for bufio slop, counted over whatever the connection
//     delivered), and it cannot change while the server runs (net/http
//     reads it unsynchronized). The Listener counts each head's bytes
//     itself (request line, header lines and the final empty line, CRLFs
//     included) against a [Limit] read as the head starts, so a reload's
//     new limit holds from the next head on, on every connection. Once a
//     head passes it, the server reads the head up to the limit and then
//     the end of the stream; its answer to the cut head (a 400, or none)
//     is replaced by net/http's own 431, byte for byte, and the
//     connection closes as after net/http's (its writing side first, the
//     rest 500 ms later). The server never reads more of the head than
//     the limit, whatever its own MaxHeaderBytes: set that to the largest
//     value the Limit may take, so that net/http's limit never trips
//     first. (Handing the server filler until its own limit trips, as
//     this package did, costs the server a read of its whole
//     MaxHeaderBytes per oversized head: 0.6 s and 180 MB at 16 MiB.)
//     The answer is written when the server reads the end of the head,
//     never while it answers an earlier request: with a limit of at least
//     4096 bytes (net/http's read buffer), a pipelined head cannot pass
//     the limit before the server has answered the request before it.
//
// To stay in step with pipelined requests the Listener follows each body's
// framing as net/http does (Content-Length; chunked Transfer-Encoding, chunk
// extensions and trailers; Transfer-Encoding ignored on HTTP/1.0). A head it
// cannot frame with certainty (an unparsable Content-Length, a
// Transfer-Encoding other than chunked) is marked too, counted to its end,
// and then the Listener stops watching that connection (it closes after
// that request); it also stops after an unparsable chunk line (net/http
// refuses the body), after the HTTP/2 preface (HTTP/2 has its own limit,
// below), and once the server answers an Upgrade request with 101 (the
// bytes after it are another protocol; an Upgrade answered otherwise
// leaves the connection HTTP/1, watched). A connection that is no longer
// watched has only net/http's own MaxHeaderBytes limit, which the server
// never reaches on any of those: they close, or no longer speak HTTP/1.
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
// max_header_bytes becomes the HTTP/2 header list size, exactly, read from
// the Limit as each HTTP/2 connection starts (SETTINGS_MAX_HEADER_LIST_SIZE
// is advertised once per connection); when it changes, the connections of
// the old limit get a graceful GOAWAY (see [ServeTLS] and
// [H2MaxHeaderBytes]).
package connguard
