package app

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/tracing"
)

// tracerFlushTimeout bounds the export of the spans still queued at close.
const tracerFlushTimeout = 5 * time.Second

// newTracer builds the tracer of tracing.enabled (nil when off) and pushes
// its shutdown onto cs: it closes after the proxy, so that the spans of
// requests that drained are exported.
func newTracer(cfg *config.Config, version string, log *slog.Logger, cs *closeStack) (trace.Tracer, error) {
	if !cfg.Tracing.Enabled {
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
	log.Info("tracing on: spans are exported over OTLP (OTEL_* environment)")
	return p.Tracer(), nil
}
