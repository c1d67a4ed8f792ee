package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// receiver collects the names of the spans an OTLP receiver got.
type receiver struct {
	mu    sync.Mutex
	names []string
}

func (rc *receiver) add(req *coltracepb.ExportTraceServiceRequest) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				rc.names = append(rc.names, s.Name)
			}
		}
	}
}

func (rc *receiver) got() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.names...)
}

// newHTTPReceiver is a loopback OTLP/HTTP (protobuf) trace receiver.
func newHTTPReceiver(t *testing.T) (*receiver, string) {
	rc := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			t.Errorf("OTLP/HTTP receiver got %s %s (%s): %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err)
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		rc.add(&req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return rc, srv.URL
}

// grpcReceiver is the TraceService of an OTLP/gRPC collector.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	*receiver
}

func (g grpcReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// newGRPCReceiver is a loopback OTLP/gRPC trace receiver (plaintext); its
// URL is http://host:port, which the gRPC exporter dials without TLS.
func newGRPCReceiver(t *testing.T) (*receiver, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcReceiver{receiver: rc})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return rc, "http://" + ln.Addr().String()
}

// clearOTELEnv unsets (for the test) the variables these tests are about.
func clearOTELEnv(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_TRACES_SAMPLER"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

// exportOne builds a provider from the environment, ends one span named
// name and flushes it.
func exportOne(t *testing.T, name string) error {
	t.Helper()
	p, err := New(context.Background(), "v-test")
	if err != nil {
		return err
	}
	_, span := p.Tracer().Start(context.Background(), name)
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.ForceFlush(ctx); err != nil {
		t.Errorf("ForceFlush: %v", err)
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	return nil
}

// TestExporterFromEnv: the exporter and its protocol are the OTEL_*
// environment's (autoexport): http/protobuf by default, gRPC when
// OTEL_EXPORTER_OTLP_PROTOCOL or OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (which
// wins) says grpc. Each case's endpoint is the receiver it must reach, so
// a wrong protocol delivers nothing (an HTTP POST to the gRPC server, or
// gRPC to the HTTP one).
func TestExporterFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		wantGRPC bool
	}{
		{"default is http/protobuf", nil, false},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, false},
		{"otlp exporter named", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, false},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true},
		{"traces protocol grpc wins", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, true},
		{"traces protocol http wins", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOTELEnv(t)
			hrc, hurl := newHTTPReceiver(t)
			grc, gurl := newGRPCReceiver(t)
			want, other, endpoint := hrc, grc, hurl
			if tc.wantGRPC {
				want, other, endpoint = grc, hrc, gurl
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if err := exportOne(t, "span-"+tc.name); err != nil {
				t.Fatal(err)
			}
			if got := want.got(); len(got) != 1 || got[0] != "span-"+tc.name {
				t.Errorf("receiver got spans %q; want [%q]", got, "span-"+tc.name)
			}
			if got := other.got(); len(got) != 0 {
				t.Errorf("the other protocol's receiver got %q; want nothing", got)
			}
		})
	}
}

// TestConsoleExporter: OTEL_TRACES_EXPORTER=console writes the spans to
// standard output (stdouttrace, which took os.Stdout when it was loaded,
// so the test sees the span in its output) instead of sending them over
// OTLP: the receiver at OTEL_EXPORTER_OTLP_ENDPOINT gets nothing.
func TestConsoleExporter(t *testing.T) {
	clearOTELEnv(t)
	hrc, hurl := newHTTPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", hurl)
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	if err := exportOne(t, "console-span"); err != nil {
		t.Fatal(err)
	}
	if got := hrc.got(); len(got) != 0 {
		t.Errorf("OTLP receiver got %q; want nothing with the console exporter", got)
	}
}

// TestExporterEnvErrors: an exporter or protocol the SDK does not know is
// an error naming the variables, never a silent fallback to OTLP/HTTP.
func TestExporterEnvErrors(t *testing.T) {
	for _, tc := range []struct{ name, key, value string }{
		{"unknown exporter", "OTEL_TRACES_EXPORTER", "zipkin"},
		{"unknown protocol", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
		{"unknown traces protocol", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOTELEnv(t)
			t.Setenv(tc.key, tc.value)
			_, err := New(context.Background(), "v-test")
			if err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") || !strings.Contains(err.Error(), "PROTOCOL") {
				t.Errorf("New with %s=%s: err = %v; want an error naming the variables", tc.key, tc.value, err)
			}
		})
	}
}

// TestOff: OTEL_SDK_DISABLED=true (any case) and OTEL_TRACES_EXPORTER=none
// turn tracing off; other values do not.
func TestOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, ""},
		{map[string]string{"OTEL_SDK_DISABLED": "true"}, "OTEL_SDK_DISABLED=true"},
		{map[string]string{"OTEL_SDK_DISABLED": "TRUE"}, "OTEL_SDK_DISABLED=TRUE"},
		{map[string]string{"OTEL_SDK_DISABLED": "false"}, ""},
		{map[string]string{"OTEL_SDK_DISABLED": "1"}, ""}, // the specification: only "true"
		{map[string]string{"OTEL_TRACES_EXPORTER": "none"}, "OTEL_TRACES_EXPORTER=none"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, ""},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "none"}, "OTEL_SDK_DISABLED=true"},
	} {
		if got := Off(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("Off(%v) = %q; want %q", tc.env, got, tc.want)
		}
	}
}
