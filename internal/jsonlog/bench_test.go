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

// BenchmarkAccessLineMade makes the access log's line as the proxy does,
// every time: a Record with its attributes (AddAttrs) and Handle, against
// the attributes alone and HandleAttrs (issue 31).
//
//	go test -run '^$' -bench AccessLineMade -benchmem ./internal/jsonlog/
func BenchmarkAccessLineMade(b *testing.B) {
	h := New(io.Discard, nil).WithAttrs([]slog.Attr{slog.String("component", "proxy")}).(*Handler)
	ctx := context.Background()
	attrs := func(status int, took time.Duration) [11]slog.Attr {
		return [11]slog.Attr{
			slog.String("host", "api.example.com"),
			slog.String("method", "GET"),
			slog.String("path", "/v1/orders/ord_8a7f3c"),
			slog.String("route", "orders"),
			slog.Int("status", status),
			slog.String("code", ""),
			slog.String("outcome", "passed"),
			slog.Float64("duration_ms", float64(took.Microseconds())/1000),
			slog.Int64("bytes", 1843),
			slog.String("client", "10.0.3.17"),
			slog.String("request_id", "01JDQ8Z5R6W3F0M7V4T2K9X1AB"),
		}
	}
	b.Run("record", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			as := attrs(200+i%2, 1234*time.Microsecond)
			r := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
			r.AddAttrs(as[:]...)
			if err := h.Handle(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("attrs", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			as := attrs(200+i%2, 1234*time.Microsecond)
			if err := h.HandleAttrs(ctx, time.Now(), slog.LevelInfo, "request", as[:]...); err != nil {
				b.Fatal(err)
			}
		}
	})
}
