package jsonlog_test

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/idemgate/idemgate/internal/jsonlog"
)

// A line as the proxy's logger writes it: slog's JSON, the time in UTC.
func ExampleNew() {
	var lv slog.LevelVar // --log-level
	h := jsonlog.New(os.Stdout, &slog.HandlerOptions{Level: &lv}).WithAttrs([]slog.Attr{slog.String("component", "proxy")})
	at := time.Date(2026, 12, 2, 3, 4, 5, 6e6, time.FixedZone("CET", 3600))
	r := slog.NewRecord(at, slog.LevelInfo, "request", 0)
	r.AddAttrs(slog.String("path", "/v1/orders"), slog.Int("status", 200), slog.Float64("duration_ms", 0.084), slog.Float64("tiny", 1e-7))
	_ = h.Handle(context.Background(), r)
	// Output:
	// {"time":"2026-12-02T02:04:05.006Z","level":"INFO","msg":"request","component":"proxy","path":"/v1/orders","status":200,"duration_ms":0.084,"tiny":1e-7}
}
