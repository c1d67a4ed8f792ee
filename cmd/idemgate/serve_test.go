package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLoggerLines pins what newLogger writes: slog's JSON lines, the time
// in UTC, through the loggers With and WithGroup derive too (the proxy's
// is log.With("component", "proxy")), for the lines internal/jsonlog
// encodes and for those it leaves to slog's handler.
func TestLoggerLines(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 6e6, time.FixedZone("CET", 3600))
	const local, utc = `"time":"2026-12-02T03:04:05.006+01:00"`, `"time":"2026-12-02T02:04:05.006Z"`
	derive := []struct {
		name string
		f    func(*slog.Logger) *slog.Logger
	}{
		{"root", func(l *slog.Logger) *slog.Logger { return l }},
		{"With", func(l *slog.Logger) *slog.Logger { return l.With("component", "proxy") }},
		{"WithGroup", func(l *slog.Logger) *slog.Logger { return l.WithGroup("g").With("a", 1) }},
	}
	for _, d := range derive {
		for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelError + 2, slog.LevelInfo + 1} {
			var got, ref bytes.Buffer
			log, err := newLogger(&got, "debug")
			if err != nil {
				t.Fatal(err)
			}
			// The reference: slog's own JSON handler, as it is.
			refLog := slog.New(slog.NewJSONHandler(&ref, &slog.HandlerOptions{Level: slog.LevelDebug}))
			for _, l := range []*slog.Logger{d.f(log), d.f(refLog)} {
				r := slog.NewRecord(at, level, "request", 0)
				r.AddAttrs(slog.String("path", "/a"), slog.Int("status", 201), slog.Float64("duration_ms", 0.084),
					slog.Group("g", slog.String("level", "x"), slog.Time("time", at)))
				if level == slog.LevelWarn {
					// A value internal/jsonlog leaves to slog's handler.
					r.AddAttrs(slog.Any("state", struct{ A []int }{[]int{1}}))
				}
				if err := l.Handler().Handle(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			if !strings.HasPrefix(got.String(), "{"+utc+",") {
				t.Errorf("%s %v: %s; want it to start with %s", d.name, level, got.String(), utc)
			}
			if want := strings.Replace(ref.String(), local, utc, 1); got.String() != want {
				t.Errorf("%s %v:\n got %s\nwant %s", d.name, level, got.String(), want)
			}
			var m map[string]any
			if err := json.Unmarshal(got.Bytes(), &m); err != nil {
				t.Errorf("%s %v: not JSON: %v", d.name, level, err)
			}
		}
	}
}

// TestLoggerLevel: --log-level filters, through derived loggers too.
func TestLoggerLevel(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "warn")
	if err != nil {
		t.Fatal(err)
	}
	log = log.With("component", "proxy")
	log.Info("dropped")
	log.Warn("kept")
	if got := strings.Count(buf.String(), "\n"); got != 1 || !strings.Contains(buf.String(), `"msg":"kept"`) {
		t.Errorf("wrote %q; want the WARN line alone", buf.String())
	}
	if _, err := newLogger(&buf, "loud"); err == nil {
		t.Error("newLogger(loud) = nil error; want one")
	}
}
