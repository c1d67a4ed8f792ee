package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"
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
)

// statusClientClosed is logged (never sent) when the client hung up first.
const statusClientClosed = 499

const requestIDHeader = "X-Request-Id"

// serveExchange is the outermost stage: it recovers panics, takes or makes
// the request ID, decides the client address and writes one access-log line
// per request.
func (p *Proxy) serveExchange(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := &exchange{ResponseWriter: w, start: time.Now()}
		ex.id = requestID(r.Header.Get(requestIDHeader))
		r.Header.Set(requestIDHeader, ex.id)
		w.Header().Set(requestIDHeader, ex.id)
		ex.client = p.opts.ClientAddr(remoteAddr(r), r.Header.Values("X-Forwarded-For"), p.opts.TrustedProxies)
		r = withExchange(r, ex)
		if m := p.metrics; m != nil {
			// Registered before the access-log defer, so it runs after it:
			// when in-flight drops, the request has been counted.
			m.inFlight.Inc()
			defer m.inFlight.Dec()
		}
		defer func() {
			v := recover()
			if v != nil && v != http.ErrAbortHandler {
				p.log.Error("panic serving request", "panic", v, logRequestID, ex.id)
				if !ex.wroteHeader {
					ex.code = "internal"
					ex.status = http.StatusInternalServerError
					http.Error(ex, "internal error", http.StatusInternalServerError)
					v = nil
				}
			}
			if v == http.ErrAbortHandler && ex.outcome == "" {
				ex.outcome = OutcomeUpstreamError
			}
			p.logExchange(r, ex)
			if v != nil {
				panic(http.ErrAbortHandler) // abort the connection: the answer is cut
			}
		}()
		next.ServeHTTP(ex, r)
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
	outcome := ex.outcome
	if outcome == "" {
		outcome = OutcomePassthrough
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelWarn
	}
	p.metrics.observeRequest(r, ex, status, outcome, time.Since(ex.start))
	p.log.LogAttrs(context.Background(), level, "request",
		slog.String(logHost, r.Host),
		slog.String(logMethod, r.Method),
		slog.String(logPath, r.URL.EscapedPath()),
		slog.String(logRoute, route),
		slog.Int(logStatus, status),
		slog.String(logCode, ex.code),
		slog.String(logOutcome, outcome),
		slog.Float64(logDuration, float64(time.Since(ex.start).Microseconds())/1000),
		slog.Int64(logBytes, ex.written),
		slog.String(logClient, ex.client.String()),
		slog.String(logRequestID, ex.id),
	)
}

// requestID returns the client's X-Request-Id when it is sane (1–128
// characters from '!' to '~' other than quote and backslash), else a new
// one.
func requestID(v string) string {
	if len(v) > 0 && len(v) <= 128 {
		ok := true
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < '!' || c > '~' || c == '"' || c == '\\' {
				ok = false
				break
			}
		}
		if ok {
			return v
		}
	}
	return newRequestID()
}

var (
	idPrefix = func() string {
		var b [6]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
	idSeq atomic.Uint64
)

// newRequestID returns a process-unique ID: a random per-process prefix and
// a counter, cheaper than reading crypto/rand per request.
func newRequestID() string {
	b := make([]byte, 0, 32)
	b = append(b, idPrefix...)
	b = append(b, '-')
	b = strconv.AppendUint(b, idSeq.Add(1), 36)
	return string(b)
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
