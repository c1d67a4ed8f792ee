package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/jsonlog"
)

// Access-log attribute keys.
const (
	logHost      = "host"
	logMethod    = "method"
	logPath      = "path"
	logRoute     = "route"
	logStatus    = "status"
	logCode      = "code"
	logOutcome   = "outcome"
	logDuration  = "duration_ms"
	logClient    = "client"
	logRequestID = "request_id"
	logBytes     = "bytes"
	logTraceID   = "trace_id" // with tracing on: the server span's trace
	logSpanID    = "span_id"
)

// statusClientClosed is logged (never sent) when the client hung up first.
const statusClientClosed = 499

// logAccess writes one access-log line per request, and records the
// request's metrics, when the rest of the chain returns (a panic included).
func (p *Proxy) logAccess(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := exchangeOf(r)
		defer func() {
			if !ex.kept() {
				p.logExchange(r, ex)
				return
			}
			ex.after(func() { p.logExchange(r, ex) }) // a kept call logs when it ends (late.go)
		}()
		next.ServeHTTP(w, r)
	})
}

// recoverPanic answers a request whose stage panicked with 500 internal, in
// the route's problem shape, when nothing was written yet; otherwise (and
// for http.ErrAbortHandler, an upstream body that broke mid-stream) it
// aborts the connection, so that the client sees the answer cut.
func (p *Proxy) recoverPanic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := exchangeOf(r)
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v != http.ErrAbortHandler {
				p.log.Error("panic serving request", "panic", v, logRequestID, ex.id)
				if !ex.wroteHeader {
					writeProblem(w, r, problemInternal)
					return
				}
			} else {
				ex.aborted = true
			}
			panic(http.ErrAbortHandler) // abort the connection: the answer is cut
		}()
		next.ServeHTTP(w, r)
	})
}

func (p *Proxy) logExchange(r *http.Request, ex *exchange) {
	status := ex.status
	if !ex.wroteHeader || (ex.clientGone && errors.Is(r.Context().Err(), context.Canceled)) {
		status = statusClientClosed
	}
	route := ""
	if ex.route != nil {
		route = ex.route.Name
	}
	outcome := ex.outcome()
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelWarn
	}
	now := time.Now()
	took := now.Sub(ex.start)
	p.metrics.observeRequest(r, ex, status, outcome, took)
	// The handler, not the Logger: the line is the same, without the
	// caller's program counter that LogAttrs takes for every line
	// (runtime.Callers) and that no handler of idemgate's writes (a
	// handler with AddSource would show no source for these lines; it
	// would be this function anyway). Issue 31.
	ctx := context.Background()
	h := p.log.Handler()
	if !h.Enabled(ctx, level) {
		return // before the attributes are made
	}
	var arr [14]slog.Attr // on the stack
	as := append(arr[:0],
		slog.String(logHost, r.Host),
		slog.String(logMethod, r.Method),
		slog.String(logPath, r.URL.EscapedPath()),
		slog.String(logRoute, route),
		slog.Int(logStatus, status),
		slog.String(logCode, ex.code),
		slog.String(logOutcome, outcome),
		slog.Float64(logDuration, float64(took.Microseconds())/1000),
		slog.Int64(logBytes, ex.written),
		slog.String(logClient, clientText(r, ex)),
		slog.String(logRequestID, ex.id),
	)
	if ex.waited > 0 {
		as = append(as, slog.Float64("waited_ms", float64(ex.waited.Microseconds())/1000))
	}
	if ex.span != nil {
		sc := ex.span.SpanContext()
		as = append(as, slog.String(logTraceID, sc.TraceID().String()), slog.String(logSpanID, sc.SpanID().String()))
	}
	if jh, ok := h.(*jsonlog.Handler); ok {
		// The same line, without a Record, whose attributes past the
		// fifth would take a slice of their own (issue 31).
		// (A concrete call: through an interface, as would escape.)
		_ = jh.HandleAttrs(ctx, now, level, "request", as...)
		return
	}
	rec := slog.NewRecord(now, level, "request", 0)
	rec.AddAttrs(as...)
	_ = h.Handle(ctx, rec)
}

// clientText returns ex.clientString(). When the client is r's TCP peer
// and an IPv4 address, the text is r.RemoteAddr's host, which already spells
// it so (netip.ParseAddr takes IPv4 only in that spelling): no allocation
// for the usual client (issue 31). The access log and X-Forwarded-For use it.
func clientText(r *http.Request, ex *exchange) string {
	if ex.clientText == "" && ex.client.Is4() {
		if i := strings.LastIndexByte(r.RemoteAddr, ':'); i > 0 {
			if a, err := netip.ParseAddr(r.RemoteAddr[:i]); err == nil && a == ex.client {
				ex.clientText = r.RemoteAddr[:i]
			}
		}
	}
	return ex.clientString()
}

// remoteAddr parses the TCP peer of r.
func remoteAddr(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}
