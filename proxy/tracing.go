package proxy

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/keystore"
)

// Span names of a request's trace (DESIGN.md, Tracing). The server span is
// named by the request's route (its method when no route matched).
const (
	spanClaim       = "idemgate.claim"
	spanSessionWait = "idemgate.session_wait"
	spanUpstream    = "idemgate.upstream"
	spanStoreWrite  = "idemgate.store_write"
)

// traceOriginHeader carries, inside a stored answer's header, the
// traceparent of the request that ran: a replay links its span to it. It
// is added after the upstream's headers were captured and is never sent
// to a client (replay drops it). Records stored without tracing lack it.
const traceOriginHeader = "Idemgate-Trace-Origin"

// Headers of a first run that a stored answer never keeps: they describe
// that run's trace and timing, not the answer (capture.go drops them).
const (
	headerTraceResponse = "Traceresponse"
	headerServerTiming  = "Server-Timing"
)

// propagator reads the client's traceparent and writes the upstream's.
var propagator = propagation.TraceContext{}

// tracing returns the stage that starts each request's server span (nil
// without Options.Tracer: the chain leaves it out, and no request pays for
// tracing). The span's parent is the client's traceparent, when it sent
// one; it ends after the access log was written. Its attributes are the
// method, the route's name and template, the status and the outcome: never
// the path as sent, a key, an identity or a body.
func (p *Proxy) tracing() middleware {
	t := p.deps.Tracer
	if t == nil {
		return nil
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ex := exchangeOf(r)
			ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := t.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("http.request.method", r.Method)))
			ex.span = span
			defer func() {
				if ex.kept() { // the span ends when the kept call does (late.go)
					ex.after(func() { endServerSpan(span, ex) })
					return
				}
				endServerSpan(span, ex) // no closure for after (issue 31)
			}()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// endServerSpan names the server span by the route and ends it.
func endServerSpan(span trace.Span, ex *exchange) {
	status := ex.status
	if !ex.wroteHeader {
		status = statusClientClosed
	}
	outcome := ex.outcome()
	if ex.route != nil {
		span.SetName(ex.route.Name)
		span.SetAttributes(
			attribute.String("idemgate.route", ex.route.Name),
			attribute.String("http.route", ex.route.Path),
		)
	}
	span.SetAttributes(
		attribute.Int("http.response.status_code", status),
		attribute.String("idemgate.outcome", outcome),
	)
	if ex.code != "" {
		span.SetAttributes(attribute.String("idemgate.code", ex.code))
	}
	if status >= 500 && status != statusClientClosed {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// startSpan starts a child span of ctx's span named name; with tracing off
// it returns ctx and a nil span, at no cost.
func (p *Proxy) startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	if p.deps.Tracer == nil {
		return ctx, nil
	}
	return p.deps.Tracer.Start(ctx, name)
}

// endSpan ends a span startSpan made (nil: nothing). A store's normal
// answers (in flight, key reused, lease lost, not found) are not errors;
// an error's text is never recorded (it may name a store key).
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil && !errors.Is(err, keystore.ErrInFlight) && !errors.Is(err, keystore.ErrFingerprintMismatch) &&
		!errors.Is(err, keystore.ErrLeaseLost) && !errors.Is(err, keystore.ErrNotFound) {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// markOrigin records the request's trace in h, a keyed answer's header
// about to be stored, when its server span is sampled, so that replays
// can link to it.
func markOrigin(ex *exchange, h http.Header) {
	if ex.span == nil || h == nil {
		return
	}
	if sc := ex.span.SpanContext(); sc.IsSampled() {
		h[traceOriginHeader] = []string{"00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"}
	}
}

// linkOrigin links a replay's server span to the trace of the request
// that ran, from the stored answer's header.
func linkOrigin(ex *exchange, h http.Header) {
	if ex.span == nil {
		return
	}
	v := h[traceOriginHeader]
	if len(v) != 1 {
		return
	}
	// 00-<32 hex trace id>-<16 hex span id>-<flags>
	parts := strings.Split(v[0], "-")
	if len(parts) != 4 || parts[0] != "00" {
		return
	}
	tid, err1 := trace.TraceIDFromHex(parts[1])
	sid, err2 := trace.SpanIDFromHex(parts[2])
	if err1 != nil || err2 != nil {
		return
	}
	ex.span.AddLink(trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
	})})
}

// tracingTransport makes a client span per upstream attempt, from the
// request's span to its response headers, and sends the upstream a new
// traceparent naming that span.
type tracingTransport struct {
	next   http.RoundTripper
	tracer trace.Tracer
}

// traceTransport wraps rt when tracing is on.
func (p *Proxy) traceTransport(rt http.RoundTripper) http.RoundTripper {
	if p.deps.Tracer == nil {
		return rt
	}
	return &tracingTransport{next: rt, tracer: p.deps.Tracer}
}

func (t *tracingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, span := t.tracer.Start(req.Context(), spanUpstream, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", req.Method)))
	defer span.End()
	// The outbound request is ReverseProxy's own copy: its header is ours
	// to change. The client's traceparent is replaced by one naming this
	// span.
	propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	res, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		span.SetStatus(codes.Error, "")
		return nil, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", res.StatusCode))
	if res.StatusCode >= 500 {
		span.SetStatus(codes.Error, "")
	}
	return res, nil
}

// CloseIdleConnections lets ReverseProxy's owner close the wrapped
// Transport's idle connections.
func (t *tracingTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
