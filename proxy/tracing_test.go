package proxy

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/idemgate/idemgate/internal/tracing"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/session"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver: it decodes the
// exporter's protobuf requests, as a collector would.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	resAttrs []*commonpb.KeyValue
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP receiver got %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("OTLP request does not decode: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			rc.resAttrs = append(rc.resAttrs, rs.GetResource().GetAttributes()...)
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *otlpReceiver) all() []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*tracepb.Span(nil), rc.spans...)
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

// TestTracingOTLP: with a tracer, each request has a server span named by
// its route, child of the client's traceparent, with children for the
// claim, the session wait, the upstream call (which got a new traceparent
// naming it) and the store write, exported over OTLP/HTTP to the endpoint
// of OTEL_EXPORTER_OTLP_ENDPOINT. A replay's span links to the span of the
// request that ran; the replayed answer has no trace or timing header of
// the first run. No span or resource attribute carries the key, the
// identity or the body. The access log names the trace and span.
func TestTracingOTLP(t *testing.T) {
	rc := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.URL)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	prov, err := tracing.New(context.Background(), "v-test")
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	var upMu sync.Mutex
	var upTraceparents []string
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		upMu.Lock()
		upTraceparents = append(upTraceparents, r.Header.Get("Traceparent"))
		upMu.Unlock()
		w.Header().Set("Traceresponse", "00-"+strings.Repeat("a", 32)+"-"+strings.Repeat("b", 16)+"-01")
		w.Header().Set("Server-Timing", "db;dur=53")
		w.Header().Set("X-Kept", "yes")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"ok":true}`)
	}
	q, err := session.New(session.Options{QueueDepth: 2, QueueTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Tracer = prov.Tracer()
		o.Stages.Routes = append([]Route{{Name: "checkout", Method: "POST", Path: "/checkout", Idempotent: true, Session: Session{Header: "X-Session"}}}, defaultRoutes...)
		o.Stages.Sessions = q
	})
	const (
		key       = "secret-key-7f3a"
		identity  = "Bearer identity-token-91c2"
		body      = `{"card":"body-secret-4242"}`
		sessionID = "session-id-55e1"
		parentTID = "4bf92f3577b34da6a3ce929d0e0e4736"
		parentSID = "00f067aa0ba902b7"
	)
	first := tp.do(t, "POST", "/checkout", key, body, "Authorization", identity, "X-Session", sessionID,
		"Traceparent", "00-"+parentTID+"-"+parentSID+"-01")
	if first.status != http.StatusCreated || first.header.Get("Server-Timing") == "" {
		t.Fatalf("first = %v %v; want 201 with the upstream's headers", first, first.header)
	}
	replay := tp.do(t, "POST", "/checkout", key, body, "Authorization", identity, "X-Session", sessionID)
	if replay.status != http.StatusCreated || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %v; want the stored 201", replay)
	}
	for _, h := range []string{"Traceresponse", "Server-Timing", traceOriginHeader} {
		if v := replay.header.Get(h); v != "" {
			t.Errorf("replay carries %s: %q; want it never stored", h, v)
		}
	}
	if replay.header.Get("X-Kept") != "yes" {
		t.Errorf("replay lacks the upstream's X-Kept header")
	}
	tp.do(t, "GET", "/unrouted", "", "")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := prov.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	spans := rc.all()
	byName := map[string][]*tracepb.Span{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	servers := byName["checkout"]
	if len(servers) != 2 || len(byName["POST"]) != 0 || len(byName["GET"]) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Fatalf("spans %v; want two named checkout (the route) and one GET (no route)", names)
	}
	run, rep := servers[0], servers[1]
	if run.StartTimeUnixNano > rep.StartTimeUnixNano {
		run, rep = rep, run
	}
	if run.Kind != tracepb.Span_SPAN_KIND_SERVER || hexID(run.TraceId) != parentTID || hexID(run.ParentSpanId) != parentSID {
		t.Errorf("first server span: kind %v trace %s parent %s; want server, the client's trace %s and span %s",
			run.Kind, hexID(run.TraceId), hexID(run.ParentSpanId), parentTID, parentSID)
	}
	for _, name := range []string{spanClaim, spanSessionWait, spanUpstream, spanStoreWrite} {
		var kids []*tracepb.Span
		for _, s := range byName[name] {
			if string(s.ParentSpanId) == string(run.SpanId) && string(s.TraceId) == string(run.TraceId) {
				kids = append(kids, s)
			}
		}
		if len(kids) != 1 {
			t.Errorf("first request: %d %s spans under its server span; want 1", len(kids), name)
		}
	}
	var upSpans []*tracepb.Span
	for _, s := range byName[spanUpstream] {
		if string(s.TraceId) == string(rep.TraceId) {
			t.Errorf("the replay has an upstream span; want none")
		}
		if string(s.TraceId) == string(run.TraceId) {
			upSpans = append(upSpans, s)
		}
	}
	if len(upSpans) != 1 || upSpans[0].Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Fatalf("upstream spans of the first request = %v; want one client span", upSpans)
	}
	wantTP := "00-" + parentTID + "-" + hexID(upSpans[0].SpanId) + "-01"
	if len(upTraceparents) != 2 || upTraceparents[0] != wantTP {
		t.Errorf("upstream got traceparent %q; want a new one naming the upstream span, %q", upTraceparents, wantTP)
	}
	// The replay: its own trace (the client sent none), a claim span, no
	// upstream call, and a link to the span of the request that ran.
	if len(rep.Links) != 1 || string(rep.Links[0].TraceId) != string(run.TraceId) || string(rep.Links[0].SpanId) != string(run.SpanId) {
		t.Errorf("replay links = %v; want one, to trace %s span %s", rep.Links, hexID(run.TraceId), hexID(run.SpanId))
	}
	if string(rep.TraceId) == string(run.TraceId) {
		t.Errorf("replay span is in the first request's trace; want its own, linked")
	}
	attrs := func(kvs []*commonpb.KeyValue) map[string]string {
		m := map[string]string{}
		for _, kv := range kvs {
			m[kv.Key] = kv.Value.String()
		}
		return m
	}
	if a := attrs(rep.Attributes); !strings.Contains(a["idemgate.outcome"], OutcomeReplayed) || !strings.Contains(a["http.route"], "/checkout") {
		t.Errorf("replay span attributes = %v; want outcome replayed and the route's template", a)
	}
	// Nothing secret anywhere: keys, values, resource, links.
	rc.mu.Lock()
	all, _ := json.Marshal(struct {
		S []*tracepb.Span
		R []*commonpb.KeyValue
	}{spans, rc.resAttrs})
	rc.mu.Unlock()
	for _, secret := range []string{key, "identity-token-91c2", "body-secret-4242", sessionID} {
		if strings.Contains(string(all), secret) {
			t.Errorf("an exported span carries %q", secret)
		}
	}
	if a := attrs(rc.resAttrs); !strings.Contains(a["service.name"], "idemgate") || !strings.Contains(a["service.version"], "v-test") {
		t.Errorf("resource = %v; want service.name idemgate, service.version v-test", a)
	}
	// The access log names each request's trace and span.
	var lines int
	for _, l := range strings.Split(strings.TrimSpace(tp.logs.String()), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(l), &e) != nil || e["msg"] != "request" {
			continue
		}
		lines++
		if e["route"] == "checkout" && e["outcome"] == OutcomeExecuted &&
			(e["trace_id"] != parentTID || e["span_id"] != hexID(run.SpanId)) {
			t.Errorf("access log %v; want trace_id %s span_id %s", e, parentTID, hexID(run.SpanId))
		}
		if e["trace_id"] == nil || e["span_id"] == nil {
			t.Errorf("access log line without trace_id/span_id: %s", l)
		}
	}
	if lines != 3 {
		t.Errorf("%d access log lines; want 3", lines)
	}
}

// TestTracingOffLogsNoTrace: without a tracer the access log has no
// trace fields and a client's traceparent reaches the upstream as sent.
func TestTracingOffLogsNoTrace(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, nil)
	const tp0 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tp.do(t, "GET", "/ucp/v1/carts/1", "", "", "Traceparent", tp0)
	if got := up.lastRequest().Header.Get("Traceparent"); got != tp0 {
		t.Errorf("upstream traceparent = %q; want the client's %q", got, tp0)
	}
	if s := tp.logs.String(); strings.Contains(s, "trace_id") || strings.Contains(s, "span_id") {
		t.Errorf("access log names a trace without tracing: %s", s)
	}
}

// discardExporter drops the spans the SDK batches: the benchmark measures
// what tracing costs a request, not an exporter's network.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkProxyTracing is BenchmarkProxy's pass-through and first write
// with tracing on (every span sampled, batched, dropped), to compare in the
// same run with tracing off.
func BenchmarkProxyTracing(b *testing.B) {
	up := newBenchUpstream(b)
	client := newBenchClient(b)
	for _, on := range []bool{false, true} {
		name := "off"
		var mod func(*Options)
		if on {
			name = "on"
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
			b.Cleanup(func() { tp.Shutdown(context.Background()) })
			mod = func(o *Options) { o.Tracer = tp.Tracer("bench") }
		} else {
			mod = func(*Options) {}
		}
		b.Run("passthrough/"+name, func(b *testing.B) {
			target := newBenchIdemgate(b, up.URL, mod).URL + "/ucp/v1/orders"
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchPost(b, client, target, "", false)
				}
			})
		})
		b.Run("first_write/"+name, func(b *testing.B) {
			target := newBenchIdemgate(b, up.URL, mod).URL + "/ucp/v1/carts"
			var seq atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 0, 32)
				for pb.Next() {
					buf = strconv.AppendUint(append(buf[:0], "bench-"+name+"-"...), seq.Add(1), 36)
					benchPost(b, client, target, string(buf), false)
				}
			})
		})
	}
}
