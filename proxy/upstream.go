package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/internal/clientaddr"
	"github.com/idemgate/idemgate/keystore"
)

// NewTransport returns the Transport idemgate uses upstream: explicit
// timeouts, enough idle connections per host for a sidecar's traffic, and
// no transparent compression (keyed answers are stored as sent).
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil, // a sidecar talks to its upstream directly
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:      false,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    512,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  1 * time.Second,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// errHeaderTimeout is the cause of a pass-through request's cancellation
// when the upstream sent no headers within the timeout.
var errHeaderTimeout = errors.New("upstream sent no response headers in time")

// bufferPool recycles ReverseProxy's copy buffers. It pools them as
// pointers to arrays, which a slice converts to without allocating (a
// *[]byte would be an allocation per Put).
type bufferPool struct{ p sync.Pool }

const copyBufferSize = 32 << 10

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[copyBufferSize]byte); ok {
		return v[:]
	}
	return make([]byte, copyBufferSize)
}

func (b *bufferPool) Put(buf []byte) {
	if len(buf) == copyBufferSize {
		b.p.Put((*[copyBufferSize]byte)(buf))
	}
}

// headerTimer is a pass-through's response-header deadline: a timer that
// cancels the upstream call with errHeaderTimeout. The timers are pooled
// with their callback (issue 31: a timer and a closure fewer per
// pass-through); one goes back to the pool only when it was stopped before
// it fired, so its callback never runs for a later request. Only the
// request's handler goroutine calls stop and release.
type headerTimer struct {
	t       *time.Timer
	cancel  context.CancelCauseFunc // the call's; set before the timer is armed
	stopped bool                    // a Stop returned true: the callback will not run
}

var headerTimers sync.Pool // of *headerTimer, stopped before they fired

// startHeaderTimer calls cancel(errHeaderTimeout) after d, unless stopped
// first.
func startHeaderTimer(d time.Duration, cancel context.CancelCauseFunc) *headerTimer {
	if ht, ok := headerTimers.Get().(*headerTimer); ok {
		ht.cancel, ht.stopped = cancel, false
		ht.t.Reset(d) // orders the write of cancel before the callback (as AfterFunc does)
		return ht
	}
	ht := &headerTimer{cancel: cancel}
	ht.t = time.AfterFunc(d, ht.fire)
	return ht
}

func (ht *headerTimer) fire() { ht.cancel(errHeaderTimeout) }

// stop stops the timer: the response headers arrived.
func (ht *headerTimer) stop() {
	if !ht.stopped {
		ht.stopped = ht.t.Stop()
	}
}

// release stops the timer and pools it, unless it fired.
func (ht *headerTimer) release() {
	ht.stop()
	if ht.stopped {
		ht.cancel = nil
		headerTimers.Put(ht)
	}
}

// upstreamCall is the per-request state of the upstream stage, kept in the
// request's exchange.
type upstreamCall struct {
	ex           *exchange
	wroteHeaders atomic.Bool // the request's headers reached the wire
	sent         sendState   // how far the request got to the upstream
	// failure is why a sent keyed write got no answer: broken or timed
	// out (late wait over), for an unknown outcome (unknown.go).
	failure     keystore.Cause
	headerTimer *headerTimer // pass-through: the response-header deadline
	late        *lateCall    // keyed writes with a late wait (late.go)
	trace       httptrace.ClientTrace
}

func (p *Proxy) newUpstream() http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: p.metrics.transport(p.traceTransport(p.deps.Transport)),
		// 0: ReverseProxy already flushes every write of an answer of
		// unknown length and of text/event-stream, so streams go out as
		// received; an answer of known length is written once, when whole,
		// instead of flushed per write.
		FlushInterval:  0,
		BufferPool:     &bufferPool{},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := exchangeOf(r)
		// The call lives in the exchange (found again through the outbound
		// request's context, which carries the exchange), not in a context
		// value of its own: one allocation less per request.
		call := &ex.call
		call.ex = ex
		ctx := r.Context()
		timeout := ex.snap.src.Upstream.Timeout
		if ex.route != nil {
			timeout = ex.route.timeout
		}
		if !p.markSent(w, r, ex) { // unknown.go
			return
		}
		if ex.kw != nil && ex.route.lateWait > 0 {
			// A keyed write with a late wait (late.go): its answer is
			// kept past the timeout.
			p.serveKept(rp, w, r, ex, ex.start.Add(timeout), ex.route.lateWait)
			return
		}
		if ex.kw != nil {
			// The whole answer of a keyed write is bounded by the timeout,
			// counted from the request's arrival (session wait included),
			// and survives the client hanging up (DESIGN.md step 7).
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), ex.start.Add(timeout))
			defer cancel()
			ex.swallow = true
		} else {
			// Only the wait for response headers is bounded: streams and
			// upgrades run on.
			cctx, cancel := context.WithCancelCause(ctx)
			ctx = cctx
			defer cancel(nil)
			call.headerTimer = startHeaderTimer(timeout, cancel)
			defer call.headerTimer.release()
		}
		ctx = p.traceWrites(ctx, call)
		if call.sent == notSent {
			call.sent = maybeSent
		}
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
}

// traceWrites returns ctx with a trace that marks call's request headers
// written when they reach the wire.
func (p *Proxy) traceWrites(ctx context.Context, call *upstreamCall) context.Context {
	// The trace lives in the call, which lives in the exchange: no
	// allocation of its own (issue 31).
	call.trace = httptrace.ClientTrace{WroteHeaders: func() { call.wroteHeaders.Store(true) }}
	return httptrace.WithClientTrace(ctx, &call.trace)
}

// callOf returns the upstream call of a request the upstream stage runs
// (the inbound or the outbound one), or nil.
func callOf(r *http.Request) *upstreamCall {
	ex := exchangeOf(r)
	if ex == nil || ex.call.ex == nil {
		return nil
	}
	return &ex.call
}

// rewrite forwards the request as received (DESIGN.md step 7).
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	in := pr.In
	ex := exchangeOf(in) // the upstream stage's: set for every request it runs
	up := ex.snap.src.Upstream
	target := up.URL
	pr.SetURL(target)
	// The raw query is never re-encoded (ReverseProxy "cleans" queries with
	// ';' or bad escapes before Rewrite runs).
	switch {
	case target.RawQuery == "" || in.URL.RawQuery == "":
		pr.Out.URL.RawQuery = target.RawQuery + in.URL.RawQuery
	default:
		pr.Out.URL.RawQuery = target.RawQuery + "&" + in.URL.RawQuery
	}
	if !up.Host {
		pr.Out.Host = in.Host
	}
	p.setForwarded(pr, ex)
	if ex.held != nil && pr.Out.Body != nil {
		// A body read whole goes as a *bytes.Reader under io.NopCloser, a
		// body net/http's Transport knows to be in memory: it then writes
		// the headers and the body in one system call instead of flushing
		// the headers first (Go issue 22088). ReverseProxy's own wrapper
		// hides the held body from that check. One write less per keyed
		// request (issue 17).
		ex.bodyR.Reset(ex.held.Bytes()) // in the exchange: no allocation of its own
		pr.Out.Body = io.NopCloser(&ex.bodyR)
	}
	noResend(pr.Out)

	if ex.kw != nil {
		// Stored answers must be plain.
		delete(pr.Out.Header, "Accept-Encoding")
	}
}

// noResend makes sure the Transport never sends out more often than the
// client sent it (DESIGN.md step 7): the one guard for every forwarded
// request whose method is not GET, HEAD, OPTIONS or TRACE — matched or not,
// keyed or not. Go's Transport resends a request after a failure on a
// reused connection when it is replayable (net/http Request.isReplayable):
// its body is nil, NoBody or has GetBody, and its method is one of those
// four or it carries Idempotency-Key or X-Idempotency-Key (under those
// canonical names). Here GetBody is dropped (a body without it is never
// rewound), and an empty body's key headers travel under their lower-case
// names, which the Transport's check does not see. Header names are
// case-insensitive (RFC 9110 §5.1): the upstream reads the same header. A
// request the Transport failed to write at all may still be retried on
// another connection: nothing of it reached the upstream.
func noResend(out *http.Request) {
	switch out.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return // safe methods: a resend is allowed (RFC 9110 §9.2.2)
	}
	out.GetBody = nil
	if out.Body == nil || out.Body == http.NoBody {
		hideFromRetry(out.Header, "Idempotency-Key")
		hideFromRetry(out.Header, "X-Idempotency-Key")
	}
}

func hideFromRetry(h http.Header, name string) {
	if v, ok := h[name]; ok {
		delete(h, name)
		h[strings.ToLower(name)] = v
	}
}

// setForwarded sets X-Forwarded-For, -Host and -Proto: appended to a trusted
// peer's values, replaced for anyone else. ex is in's exchange.
func (p *Proxy) setForwarded(pr *httputil.ProxyRequest, ex *exchange) {
	in := pr.In
	peer := remoteAddr(in)
	trusted := clientaddr.Trusted(peer, ex.snap.src.TrustedProxies)
	out := pr.Out.Header
	if !trusted {
		// No one but a trusted proxy names the client (DESIGN.md, Bounds):
		// X-Real-IP, True-Client-IP, Forwarded, X-Forwarded-* and the like
		// go, in every spelling an upstream folds into them (X_Real_IP);
		// X-Forwarded-For, -Host and -Proto are set afresh below.
		clientaddr.StripHeaders(out)
	} else {
		// A trusted proxy's own headers stay; spellings with "_" are a
		// client's that it passed through (DESIGN.md, Hardening).
		clientaddr.StripFoldedHeaders(out)
	}
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	if !peer.IsValid() {
		return
	}
	if trusted {
		if prior := in.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			out.Set("X-Forwarded-For", strings.Join(prior, ", ")+", "+peer.String())
		} else {
			out.Set("X-Forwarded-For", peer.String())
		}
		if v := in.Header.Get("X-Forwarded-Host"); v != "" {
			out.Set("X-Forwarded-Host", v)
		} else {
			out.Set("X-Forwarded-Host", in.Host)
		}
		if v := in.Header.Get("X-Forwarded-Proto"); v != "" {
			out.Set("X-Forwarded-Proto", v)
		} else {
			out.Set("X-Forwarded-Proto", proto)
		}
		if v := in.Header.Values("Forwarded"); len(v) > 0 {
			out["Forwarded"] = v
		}
		return
	}
	// Header.Set for the three, with one array for their values.
	var peerText string
	if peer == ex.client {
		peerText = clientText(in, ex) // the access log's too
	} else {
		peerText = peer.String()
	}
	vals := &[3]string{peerText, in.Host, proto}
	out["X-Forwarded-For"] = vals[0:1:1]
	out["X-Forwarded-Host"] = vals[1:2:2]
	out["X-Forwarded-Proto"] = vals[2:3:3]
}

// modifyResponse runs when the upstream's headers arrived.
func (p *Proxy) modifyResponse(res *http.Response) error {
	call := callOf(res.Request)
	if call == nil {
		return nil
	}
	if call.headerTimer != nil {
		call.headerTimer.stop()
	}
	call.sent = answered
	// A live answer keeps the upstream's own request ID (what its logs
	// know); idemgate's, set by the outermost stage, stands only where the
	// upstream sent none. A replay carries this request's (record.go).
	if headerValue(res.Header, call.ex.snap.requestID) != "" { // canonical (compileRoutes)
		delete(call.ex.Header(), call.ex.snap.requestID)
	}
	if kw := call.ex.kw; kw != nil {
		kw.answer(res) // the keyed write keeps it for storage
		markOrigin(call.ex, kw.capture.header)
	}
	return nil
}

// upstreamError answers a request the upstream did not answer.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	call := callOf(r)
	ex := call.ex
	ctx := r.Context()
	if lc := call.late; lc != nil {
		lc.mu.Lock()
		detached := lc.detached
		lc.started = true // this answer goes out now: the call is not detached
		lc.mu.Unlock()
		if detached {
			// The client got its 504 long ago: only what the record
			// needs to know is left to note.
			if !call.wroteHeaders.Load() {
				call.sent = notSent
			}
			call.failure = keystore.CauseBroken
			if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				call.failure = keystore.CauseLateTimeout
			}
			p.log.Warn("kept upstream call failed", "error", err, logRequestID, ex.id)
			return
		}
	}
	switch {
	case !call.wroteHeaders.Load() && ctx.Err() == nil:
		// Refused, unreachable, or failed before a byte of the request was
		// sent: nothing ran.
		call.sent = notSent
		p.log.Warn("upstream unreachable", "error", err, logRequestID, ex.id)
		writeProblem(w, r, problemUpstreamDown)
	case errors.Is(context.Cause(ctx), errHeaderTimeout) || errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		if !call.wroteHeaders.Load() {
			call.sent = notSent
		}
		p.log.Warn("upstream timeout", "error", err, logRequestID, ex.id)
		call.failure = keystore.CauseLateTimeout
		writeProblem(w, r, problemUpstreamTimeout)
	case ctx.Err() != nil:
		// The client hung up on a pass-through request.
		ex.via = viaHungUp
		ex.code = ""
	default:
		p.log.Warn("upstream connection broken", "error", err, logRequestID, ex.id)
		writeProblem(w, r, problemUpstreamBroken)
	}
}
