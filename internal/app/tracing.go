package app

import (
	"context"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/tracing"
)

// tracerFlushTimeout bounds the export of the spans still queued at close.
const tracerFlushTimeout = 5 * time.Second

// newTracer builds the tracer of tracing.enabled (nil when off) and pushes
// its shutdown onto cs: it closes after the proxy, so that the spans of
// requests that drained are exported. Tracing is on when tracing.enabled
// is true and the OTEL_* environment does not turn it off
// (OTEL_SDK_DISABLED=true, OTEL_TRACES_EXPORTER=none: see [tracing.Off]);
// then, as when tracing.enabled is false, no request pays for it.
func newTracer(cfg *config.Config, version string, log *slog.Logger, cs *closeStack) (trace.Tracer, error) {
	if !cfg.Tracing.Enabled {
		return nil, nil
	}
	if why := tracing.Off(os.Getenv); why != "" {
		log.Info("tracing off: tracing.enabled is true but the environment says " + why)
		return nil, nil
	}
	p, err := tracing.New(context.Background(), version)
	if err != nil {
		return nil, err
	}
	cs.push(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), tracerFlushTimeout)
		defer cancel()
		return p.Shutdown(ctx)
	})
	log.Info("tracing on: spans are exported as the OTEL_* environment says",
		"exporter", envOr("OTEL_TRACES_EXPORTER", "otlp"),
		"protocol", envOr("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", envOr("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")))
	return p.Tracer(), nil
}

// envOr is the environment variable k, or def when it is unset or empty.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
