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

// TestLoggerLines pins what newLogger writes: the time in UTC, and the
// level as slog's JSON handler writes it without a ReplaceAttr (logAttr
// hands it over as text, not as a slog.Level for encoding/json).
func TestLoggerLines(t *testing.T) {
	for _, c := range []struct {
		level slog.Level
		want  string
	}{
		{slog.LevelDebug, `"level":"DEBUG"`},
		{slog.LevelInfo, `"level":"INFO"`},
		{slog.LevelWarn, `"level":"WARN"`},
		{slog.LevelError, `"level":"ERROR"`},
		{slog.LevelError + 2, `"level":"ERROR+2"`},
		{slog.LevelDebug - 4, `"level":"DEBUG-4"`},
		{slog.LevelInfo + 1, `"level":"INFO+1"`},
	} {
		var got, ref bytes.Buffer
		log, err := newLogger(&got, "debug")
		if err != nil {
			t.Fatal(err)
		}
		// The reference: slog's own JSON handler, no ReplaceAttr.
		refLog := slog.New(slog.NewJSONHandler(&ref, nil))
		at := time.Date(2026, 12, 2, 3, 4, 5, 6e6, time.FixedZone("CET", 3600))
		for _, l := range []*slog.Logger{log, refLog} {
			r := slog.NewRecord(at, c.level, "request", 0)
			r.AddAttrs(slog.String("path", "/a"), slog.Int("status", 201), slog.Group("g", slog.String("level", "x")))
			if err := l.Handler().Handle(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		line := got.String()
		if !strings.Contains(line, c.want) {
			t.Errorf("%v: %s; want %s", c.level, line, c.want)
		}
		wantLine := strings.Replace(ref.String(), `"time":"2026-12-02T03:04:05.006+01:00"`, `"time":"2026-12-02T02:04:05.006Z"`, 1)
		if line != wantLine {
			t.Errorf("%v:\n got %s\nwant %s", c.level, line, wantLine)
		}
		var m map[string]any
		if err := json.Unmarshal(got.Bytes(), &m); err != nil {
			t.Errorf("%v: not JSON: %v", c.level, err)
		}
		// The handler gets text, which it writes as it is, not a Level
		// for encoding/json.
		if v := logAttr(nil, slog.Any(slog.LevelKey, c.level)).Value; v.Kind() != slog.KindString {
			t.Errorf("%v: logAttr gave the handler a %v; want a string", c.level, v.Kind())
		}
	}
}
