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
	"sync/atomic"

	"golang.org/x/net/http2"
)

// NewTLSListener returns a Listener that serves TLS with config on inner's
// connections (inner is a TCP listener) and watches the decrypted request
// heads under limit as [NewListener] does, so that the TLS listener obeys
// the same bounds as a plain one. errorLog (nil: the log package's) gets
// the handshake errors that net/http would log.
//
// Its connections are not *tls.Conn: net/http runs HTTP/2 (ALPN "h2") only
// on a *tls.Conn, and then hands the whole connection to its HTTP/2 server,
// past any watching. So serve it with an http.Server prepared by
// [ServeTLS] with the same limit: net/http then treats every connection as
// one it must sniff, serves HTTP/1.1 through the guard, and hands one that
// opens with the HTTP/2 preface to an HTTP/2 server over the same
// (decrypted, watched) stream. [Check] gives each request its TLS state (r.TLS).
func NewTLSListener(inner net.Listener, config *tls.Config, limit *Limit, errorLog *log.Logger) *Listener {
	return &Listener{Listener: inner, limit: limit, tls: config, errorLog: errorLog}
}

// ServeTLS prepares s to serve a [NewTLSListener]'s connections: HTTP/1.1,
// and HTTP/2 for a connection that opens with its preface (net/http's
// "unencrypted HTTP/2", here inside TLS: the client negotiated "h2" by
// ALPN); and a connection context from which [Check] sets r.TLS. It
// replaces s.Protocols, s.ConnContext and s.TLSNextProto, and registers a
// shutdown hook that sends the HTTP/2 connections GOAWAY. Call it after
// s's other fields are set, before s serves.
//
// Over HTTP/2, max_header_bytes is the header list size that RFC 9113
// §6.5.2 defines (names and values plus 32 bytes a field, pseudo-headers
// included), advertised in SETTINGS_MAX_HEADER_LIST_SIZE once per
// connection. Go's HTTP/2 server advertises and enforces its base
// http.Server's MaxHeaderBytes plus 320 (its allowance for ten fields'
// overhead), accepting a list of exactly that size and answering 431
// above it; so H2MaxHeaderBytes(n) is the MaxHeaderBytes that makes the
// limit n exactly. s.MaxHeaderBytes is not what HTTP/2 uses: each HTTP/2
// connection is served (golang.org/x/net/http2's ServeConn) with a base
// http.Server made for limit's value as the connection starts, a copy of
// s's settings with that MaxHeaderBytes, never changed once made (net/http
// reads it unsynchronized). When limit changes, the next connection gets a
// new base, and the connections of the old one get a graceful GOAWAY:
// their requests in flight finish, and clients open a new connection,
// with the new limit, for the next ones. HTTP/1.1 heads are counted by the
// Listener, exactly, under s.MaxHeaderBytes, which must be at least the
// largest value limit may take.
func ServeTLS(s *http.Server, limit *Limit) error {
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
	h2 := &h2Servers{tmpl: s, limit: limit}
	// An "h2" entry keeps net/http from configuring its own HTTP/2 server
	// on s; s's connections are never *tls.Conn, so it is never used.
	if err := http2.ConfigureServer(s, new(http2.Server)); err != nil {
		return err
	}
	s.TLSNextProto[nextProtoUnencryptedHTTP2] = h2.serve
	s.RegisterOnShutdown(h2.shutdown)
	if limit != nil {
		limit.notify(func() { h2.server() })
	}
	return nil
}

// nextProtoUnencryptedHTTP2 is the TLSNextProto key under which net/http
// hands over a connection that opened with the HTTP/2 preface
// (http.Protocols.SetUnencryptedHTTP2).
const nextProtoUnencryptedHTTP2 = "unencrypted_http2"

// h2Servers serves the HTTP/2 connections of a server prepared by
// ServeTLS, each with the header list limit in force as it started.
type h2Servers struct {
	tmpl  *http.Server // whose settings each base copies
	limit *Limit

	mu     sync.Mutex
	cur    *h2Server // the current limit's; nil before the first connection
	closed bool      // tmpl is shutting down
}

// h2Server is one limit's HTTP/2 server: base is the http.Server its
// connections are configured from (never served, never changed), and its
// Shutdown sends them GOAWAY.
type h2Server struct {
	n       int
	base    *http.Server
	srv     *http2.Server
	retired atomic.Bool // its connections are sent GOAWAY
}

// retire sends s's connections GOAWAY.
func (s *h2Server) retire() {
	s.retired.Store(true)
	go s.base.Shutdown(context.Background())
}

// serve is the TLSNextProto function for a connection that opened with
// the HTTP/2 preface, as the one golang.org/x/net/http2.ConfigureServer
// installs, but with the base for the limit in force.
func (hs *h2Servers) serve(_ *http.Server, c *tls.Conn, h http.Handler) {
	nc, ok := c.NetConn().(interface{ UnencryptedNetConn() net.Conn })
	if !ok {
		const msg = "http2: TLS conn unexpectedly found in unencrypted handoff"
		if lg := hs.tmpl.ErrorLog; lg != nil {
			lg.Print(msg)
		} else {
			log.Print(msg)
		}
		go c.Close()
		return
	}
	// net/http passes its per-connection context (with ConnContext's
	// values) through the handler, as it does to its own HTTP/2 server.
	ctx := context.Background()
	if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
		ctx = bc.BaseContext()
	}
	s := hs.server()
	s.srv.ServeConn(nc.UnencryptedNetConn(), &http2.ServeConnOpts{
		Context:          ctx,
		Handler:          h,
		BaseConfig:       s.base,
		SawClientPreface: true,
	})
}

// server returns the server for the limit in force, making it if the
// limit changed; the old one's connections get GOAWAY. It runs as each
// HTTP/2 connection starts and when the limit changes.
func (hs *h2Servers) server() *h2Server {
	n := hs.limit.Load()
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.cur != nil && hs.cur.n == n {
		return hs.cur
	}
	old := hs.cur
	hs.cur = hs.newServer(n)
	if old != nil {
		old.retire()
	}
	if hs.closed {
		hs.cur.retire()
	}
	return hs.cur
}

// newServer makes the server for limit n: a base with tmpl's settings and
// the MaxHeaderBytes that makes n the header list limit.
func (hs *h2Servers) newServer(n int) *h2Server {
	t := hs.tmpl
	base := &http.Server{
		Handler:           t.Handler,
		ReadTimeout:       t.ReadTimeout,
		ReadHeaderTimeout: t.ReadHeaderTimeout,
		WriteTimeout:      t.WriteTimeout,
		IdleTimeout:       t.IdleTimeout,
		MaxHeaderBytes:    t.MaxHeaderBytes,
		ErrorLog:          t.ErrorLog,
		HTTP2:             t.HTTP2,
	}
	if n > 0 {
		base.MaxHeaderBytes = H2MaxHeaderBytes(n)
	}
	s := &h2Server{n: n, base: base, srv: new(http2.Server)}
	// Registers srv's graceful shutdown with base.Shutdown (base is never
	// served: its Shutdown only runs that).
	if err := http2.ConfigureServer(base, s.srv); err != nil {
		panic(err) // only for a TLSConfig, which base has not
	}
	// A connection handed s just before it retired registers with srv
	// after the GOAWAY went out; its first state change (x/net/http2
	// reports Idle as it starts serving) sends it one too.
	base.ConnState = func(c net.Conn, st http.ConnState) {
		if t.ConnState != nil {
			t.ConnState(c, st)
		}
		if st == http.StateIdle && s.retired.Load() {
			go base.Shutdown(context.Background())
		}
	}
	return s
}

// shutdown sends every HTTP/2 connection of the current limit GOAWAY (the
// old limits' had theirs); it runs when tmpl shuts down.
func (hs *h2Servers) shutdown() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.closed = true
	if hs.cur != nil {
		hs.cur.retire()
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
