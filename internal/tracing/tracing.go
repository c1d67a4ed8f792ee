// Package tracing builds idemgate's OpenTelemetry tracer provider
// (tracing.enabled), configured by the standard OTEL_* environment
// variables as the OpenTelemetry SDKs read them: OTEL_SDK_DISABLED,
// OTEL_TRACES_EXPORTER (otlp, console, none), OTEL_EXPORTER_OTLP_PROTOCOL
// and OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (http/protobuf, grpc), the
// endpoint, headers, TLS and timeout variables of each OTLP exporter,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and
// OTEL_BSP_*. The exporter is chosen by go.opentelemetry.io/contrib's
// autoexport, the SDK's own reading of those variables. The spans
// themselves are the proxy's (proxy/tracing.go). Nothing here is global:
// the provider is handed to the proxy, never installed with
// otel.SetTracerProvider.
package tracing

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names idemgate's tracer.
const instrumentationName = "github.com/idemgate/idemgate"

// The variables that turn tracing off although tracing.enabled is true.
const (
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
)

// Off reports why the OTEL_* environment read through getenv turns
// tracing off, or "" when it does not: OTEL_SDK_DISABLED=true (any case,
// as the specification says; other values leave the SDK on) or
// OTEL_TRACES_EXPORTER=none. tracing.enabled is the opt-in; these are the
// environment's opt-outs, so that an operator who sets them, as for any
// other OpenTelemetry SDK, gets no exporter and no span.
func Off(getenv func(string) string) string {
	if v := strings.TrimSpace(getenv(envSDKDisabled)); strings.EqualFold(v, "true") {
		return envSDKDisabled + "=" + v
	}
	if v := strings.TrimSpace(getenv(envTracesExporter)); v == "none" {
		return envTracesExporter + "=none"
	}
	return ""
}

// Provider is a running tracer provider: its Tracer makes the spans, and
// Shutdown flushes what is still queued and stops the exporter.
type Provider struct {
	sdk *sdktrace.TracerProvider
}

// New builds a provider with the exporter the environment names:
// OTEL_TRACES_EXPORTER otlp (default) or console; for otlp,
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL,
// http/protobuf (default, to http://localhost:4318) or grpc (to
// localhost:4317). An unknown exporter or protocol is an error that names
// the variables, never a silent fallback. The caller checks [Off] first.
// The resource's service.name is "idemgate" and service.version version,
// unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise. The
// sampler is the SDK's (parent-based, always on) unless OTEL_TRACES_SAMPLER
// names another. Nothing is sent before the first span ends.
func New(ctx context.Context, version string) (*Provider, error) {
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter of OTEL_TRACES_EXPORTER (otlp, console, none) and OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (http/protobuf, grpc): %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", "idemgate"),
			attribute.String("service.version", version),
		),
		resource.WithFromEnv(), // after: the environment wins
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return &Provider{sdk: sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
	)}, nil
}

// Tracer returns idemgate's tracer.
func (p *Provider) Tracer() trace.Tracer { return p.sdk.Tracer(instrumentationName) }

// ForceFlush exports the spans that ended and are still queued.
func (p *Provider) ForceFlush(ctx context.Context) error { return p.sdk.ForceFlush(ctx) }

// Shutdown exports what is queued (within ctx) and stops the provider.
func (p *Provider) Shutdown(ctx context.Context) error { return p.sdk.Shutdown(ctx) }
