package connguard

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
)

// NewTLSListener returns a Listener that serves TLS with config on inner's
// connections (inner is a TCP listener) and watches the decrypted request
// heads as [NewListener] does, so that the TLS listener obeys the same
// bounds as a plain one. errorLog (nil: the log package's) gets the
// handshake errors that net/http would log.
//
// Its connections are not *tls.Conn: net/http runs HTTP/2 (ALPN "h2") only
// on a *tls.Conn, and then hands the whole connection to its HTTP/2 server,
// past any watching. So serve it with an http.Server prepared by
// [ServeTLS]: net/http then treats every connection as one it must sniff,
// serves HTTP/1.1 through the guard, and hands one that opens with the
// HTTP/2 preface to its own HTTP/2 server over the same (decrypted,
// watched) stream. [Check] gives each request its TLS state (r.TLS).
func NewTLSListener(inner net.Listener, config *tls.Config, maxHeaderBytes int, errorLog *log.Logger) *Listener {
	return &Listener{Listener: inner, maxHeaderBytes: maxHeaderBytes, tls: config, errorLog: errorLog}
}

// ServeTLS prepares s to serve a [NewTLSListener]'s connections: HTTP/1.1,
// and HTTP/2 for a connection that opens with its preface (net/http's
// "unencrypted HTTP/2", here inside TLS: the client negotiated "h2" by
// ALPN); and a connection context from which [Check] sets r.TLS. It
// replaces s.Protocols and s.ConnContext.
//
// Over HTTP/2, max_header_bytes is the header list size that RFC 9113
// §6.5.2 defines (names and values plus 32 bytes a field, pseudo-headers
// included), advertised in SETTINGS_MAX_HEADER_LIST_SIZE. Go's HTTP/2
// server advertises and enforces MaxHeaderBytes plus 320 (its allowance
// for ten fields' overhead), accepting a list of exactly that size and
// answering 431 above it; so H2MaxHeaderBytes(n) is the MaxHeaderBytes
// that makes the limit n exactly. HTTP/1.1 heads are still counted by the
// Listener, exactly, and net/http's own looser limit stays above n.
func ServeTLS(s *http.Server) {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	s.Protocols = p
	s.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if gc, ok := c.(*conn); ok && gc.tls != nil {
			return context.WithValue(ctx, tlsKey{}, gc.tls)
		}
		return ctx
	}
}

// h2FieldAllowance is what Go's HTTP/2 server adds to MaxHeaderBytes for
// its SETTINGS_MAX_HEADER_LIST_SIZE: ten fields' 32 bytes of overhead.
const h2FieldAllowance = 10 * 32

// H2MaxHeaderBytes returns the http.Server.MaxHeaderBytes under which Go's
// HTTP/2 server accepts a header list of at most n bytes (RFC 9113
// §6.5.2), exactly. n must be above 320.
func H2MaxHeaderBytes(n int) int { return n - h2FieldAllowance }

type tlsKey struct{}

// setTLS gives r the TLS state of the connection it came on, when it came
// through a [NewTLSListener] and net/http did not set it.
func setTLS(r *http.Request) {
	if r.TLS != nil {
		return
	}
	if tc, ok := r.Context().Value(tlsKey{}).(*tlsConn); ok {
		st := tc.ConnectionState()
		r.TLS = &st
	}
}

// tlsConn is a server-side *tls.Conn that completes its handshake on the
// first Read, doing what net/http does for a *tls.Conn it serves: a
// client that speaks plain HTTP gets a 400, handshake errors are logged,
// and a connection that negotiated an ALPN protocol other than HTTP/1.1 or
// HTTP/2 (acme-tls/1: the handshake was all it was for) is closed.
type tlsConn struct {
	*tls.Conn
	errorLog *log.Logger

	once sync.Once // the handshake
	err  error     // io.EOF once it failed or the connection is not served, set in once
}

func (c *tlsConn) Read(p []byte) (int, error) {
	c.once.Do(c.handshake)
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(p)
}

func (c *tlsConn) handshake() {
	if err := c.Conn.Handshake(); err != nil {
		var re tls.RecordHeaderError
		reason := err.Error()
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			re.Conn.Close()
			reason = "client sent an HTTP request to an HTTPS server"
		}
		c.logf("http: TLS handshake error from %s: %v", c.RemoteAddr(), reason)
		c.err = io.EOF // net/http closes quietly (it would answer 400 to any other error)
		return
	}
	switch c.ConnectionState().NegotiatedProtocol {
	case "", "http/1.1", "http/1.0", "h2":
	default:
		c.err = io.EOF
	}
}

func (c *tlsConn) logf(format string, args ...any) {
	if c.errorLog != nil {
		c.errorLog.Printf(format, args...)
	} else {
		log.Printf(format, args...)
	}
}

// looksLikeHTTP reports whether a TLS record header is the start of a
// plain-text HTTP request (as net/http tells it).
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}
