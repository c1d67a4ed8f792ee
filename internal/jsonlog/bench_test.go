package jsonlog

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// accessRecord is the access log's record as proxy.(*Proxy).logExchange
// makes it for a pass-through GET (proxy/accesslog.go).
func accessRecord() slog.Record {
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
	r.AddAttrs(
		slog.String("host", "api.example.com"),
		slog.String("method", "GET"),
		slog.String("path", "/v1/orders/ord_8a7f3c"),
		slog.String("route", "orders"),
		slog.Int("status", 200),
		slog.String("code", ""),
		slog.String("outcome", "passed"),
		slog.Float64("duration_ms", float64((1234*time.Microsecond).Microseconds())/1000),
		slog.Int64("bytes", 1843),
		slog.String("client", "10.0.3.17"),
		slog.String("request_id", "01JDQ8Z5R6W3F0M7V4T2K9X1AB"),
	)
	return r
}

// BenchmarkAccessLine writes the access log's line through the proxy's
// logger (log.With("component", "proxy")): slog's JSON handler with the
// time in UTC, as cmd/idemgate had it, against this package's.
//
//	go test -run '^$' -bench AccessLine -benchmem ./internal/jsonlog/
func BenchmarkAccessLine(b *testing.B) {
	with := []slog.Attr{slog.String("component", "proxy")}
	for _, bc := range []struct {
		name string
		h    slog.Handler
	}{
		{"slog", utcRef{slog.NewJSONHandler(io.Discard, nil)}.WithAttrs(with)},
		{"jsonlog", New(io.Discard, nil).WithAttrs(with)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			r := accessRecord()
			ctx := context.Background()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := bc.h.Handle(ctx, r); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
