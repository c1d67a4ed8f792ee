// Package tracing builds idemgate's OpenTelemetry tracer provider
// (tracing.enabled): spans exported over OTLP/HTTP, configured by the
// standard OTEL_* environment variables (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER,
// OTEL_BSP_* ...). The spans themselves are the proxy's (proxy/tracing.go).
// Nothing here is global: the provider is handed to the proxy, never
// installed with otel.SetTracerProvider.
package tracing

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names idemgate's tracer.
const InstrumentationName = "github.com/idemgate/idemgate"

// Provider is a running tracer provider: its Tracer makes the spans, and
// Shutdown flushes what is still queued and stops the exporter.
type Provider struct {
	sdk *sdktrace.TracerProvider
}

// New builds a provider exporting over OTLP/HTTP (protobuf) to the
// endpoint of the OTEL_* environment, by default http://localhost:4318.
// The resource's service.name is "idemgate" and service.version version,
// unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise. The
// sampler is the SDK's (parent-based, always on) unless OTEL_TRACES_SAMPLER
// names another. Nothing is sent before the first span ends.
func New(ctx context.Context, version string) (*Provider, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
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
func (p *Provider) Tracer() trace.Tracer { return p.sdk.Tracer(InstrumentationName) }

// ForceFlush exports the spans that ended and are still queued.
func (p *Provider) ForceFlush(ctx context.Context) error { return p.sdk.ForceFlush(ctx) }

// Shutdown exports what is queued (within ctx) and stops the provider.
func (p *Provider) Shutdown(ctx context.Context) error { return p.sdk.Shutdown(ctx) }
