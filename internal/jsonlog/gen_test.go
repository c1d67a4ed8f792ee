package jsonlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
)

// This file turns bytes into what a logger can be asked to write: options,
// a chain of WithAttrs and WithGroup, a record. FuzzHandler feeds it the
// fuzzer's bytes, TestRandomRecords math/rand's; compare writes the
// program with this package's Handler and with slog's own.

// utcRef is the reference: slog.NewJSONHandler with the record's time set
// to UTC, as cmd/idemgate's utcHandler did before this package.
type utcRef struct{ slog.Handler }

func (h utcRef) Handle(ctx context.Context, r slog.Record) error {
	r.Time = r.Time.UTC()
	return h.Handler.Handle(ctx, r)
}

func (h utcRef) WithAttrs(as []slog.Attr) slog.Handler { return utcRef{h.Handler.WithAttrs(as)} }
func (h utcRef) WithGroup(name string) slog.Handler    { return utcRef{h.Handler.WithGroup(name)} }

// step is one derivation: WithGroup(group) when attrs is nil, else
// WithAttrs(attrs).
type step struct {
	group string
	attrs []slog.Attr
}

// program is one logger and one record.
type program struct {
	opts  *slog.HandlerOptions
	steps []step
	rec   slog.Record
	attrs []slog.Attr // rec's attributes as they were added (empty groups and all); nil: rec's own
	probe slog.Level  // a level to ask Enabled about
}

// run writes p with h (New or the reference) and returns the bytes and
// the number of Write calls.
// With viaAttrs the record goes through Handler.HandleAttrs instead of
// Handle.
func (p program) run(t testing.TB, viaAttrs bool, mk func(w *countWriter) slog.Handler) ([]byte, int, bool, slog.Handler) {
	t.Helper()
	w := &countWriter{}
	h := mk(w)
	for _, s := range p.steps {
		if s.attrs == nil {
			h = h.WithGroup(s.group)
		} else {
			// Each handler gets its own copy: a handler may keep it.
			h = h.WithAttrs(append([]slog.Attr(nil), s.attrs...))
		}
	}
	enabled := h.Enabled(context.Background(), p.probe)
	if viaAttrs {
		as := p.attrs
		if as == nil {
			p.rec.Attrs(func(a slog.Attr) bool { as = append(as, a); return true })
		}
		if err := h.(*Handler).HandleAttrs(context.Background(), p.rec.Time, p.rec.Level, p.rec.Message, as...); err != nil {
			t.Fatalf("HandleAttrs: %v", err)
		}
	} else if err := h.Handle(context.Background(), p.rec.Clone()); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	return w.buf.Bytes(), w.writes, enabled, h
}

// compare fails t unless New writes p's record as the reference does, with
// one Write, through Handle and (a record without a program counter)
// through HandleAttrs, and answers Enabled
// as it does. It reports whether slog's handler was used (for the record,
// or for a WithAttrs).
func compare(t testing.TB, p program, desc func() string) (usedSlog bool) {
	t.Helper()
	want, _, wantOn, _ := p.run(t, false, func(w *countWriter) slog.Handler { return utcRef{slog.NewJSONHandler(w, p.opts)} })
	got, writes, gotOn, h := p.run(t, false, func(w *countWriter) slog.Handler { return New(w, p.opts) })
	if !bytes.Equal(got, want) {
		t.Fatalf("%s\n got %q\nwant %q", desc(), got, want)
	}
	if p.rec.PC == 0 { // HandleAttrs has no program counter to give
		gotAttrs, writesAttrs, _, _ := p.run(t, true, func(w *countWriter) slog.Handler { return New(w, p.opts) })
		if !bytes.Equal(gotAttrs, want) {
			t.Fatalf("%s: HandleAttrs\n got %q\nwant %q", desc(), gotAttrs, want)
		}
		if writesAttrs != 1 {
			t.Errorf("%s: HandleAttrs: %d Write calls; want 1", desc(), writesAttrs)
		}
	}
	if writes != 1 {
		t.Errorf("%s: %d Write calls; want 1", desc(), writes)
	}
	if gotOn != wantOn {
		t.Errorf("%s: Enabled(%v) = %v; want %v", desc(), p.probe, gotOn, wantOn)
	}
	jh := h.(*Handler)
	return jh.slowOnly || jh.slow.h != nil
}

type countWriter struct {
	buf    bytes.Buffer
	writes int
}

func (w *countWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.buf.Write(p)
}

// gen reads choices from data; past its end every choice is 0.
type gen struct {
	data []byte
	log  []string // what was chosen, for a failure's message
}

func (g *gen) byte() byte {
	if len(g.data) == 0 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return b
}

func (g *gen) n(k int) int { return int(g.byte()) % k }

func (g *gen) bytes(n int) []byte {
	n = min(n, len(g.data))
	b := g.data[:n]
	g.data = g.data[n:]
	return b
}

func (g *gen) u64() uint64 {
	var b [8]byte
	copy(b[:], g.bytes(8))
	return binary.LittleEndian.Uint64(b[:])
}

// tricky are strings that exercise every branch of slog's escaping.
var tricky = []string{
	"", "a", "request", `"`, `\`, "\n\r\t", "\x00\x01\x1f\x7f", "<b>&amp;</b>", "\u2028\u2029",
	"a\u2028b", "\xff", "\xe2\x80", "\xe2\x80\xa8", "\xed\xa0\x80", "é", "日本語", "\U0001F600",
	"\xc0\xaf", "level", `"level":"WARN`, " level=ERROR", "}{", "time", "msg", "WARN", "\ufffd",
	strings.Repeat("x", 300), strings.Repeat("\x01é\"", 40),
}

func (g *gen) str() string {
	var s string
	switch g.n(6) {
	case 0, 1:
		s = string(g.bytes(g.n(24)))
	case 2:
		s = tricky[g.n(len(tricky))]
	case 3:
		s = tricky[g.n(len(tricky))] + string(g.bytes(g.n(8))) + tricky[g.n(len(tricky))]
	case 4:
		s = ""
	case 5:
		s = []string{"component", "proxy", "g", "a", "status", "duration_ms"}[g.n(6)]
	}
	return s
}

// corners are float64s where encoding/json's format changes or breaks.
var corners = []float64{
	0, math.Copysign(0, -1), 1e-7, -1e-7, 1e-6, 9.999999e-7, 1e-5, 1e20, 1e21, -1e21, 9.99e20,
	123456789.123, math.NaN(), math.Inf(1), math.Inf(-1), 5e-324, 1e-310, 2.2250738585072014e-308,
	math.MaxFloat64, -math.MaxFloat64, 0.084, 1.5, 100, 1e-100, 1e100, 0.1 + 0.2, 1e-9, 1.234e-10,
	float64(1 << 53), 1e15, 1e16, 12345678901234567890, math.Float64frombits(0x7ff8000000000001),
}

func (g *gen) float() float64 {
	switch g.n(3) {
	case 0:
		return corners[g.n(len(corners))]
	case 1:
		return math.Float64frombits(g.u64())
	default:
		return float64(int64(g.u64())%10_000_000) / 1000
	}
}

func (g *gen) time() time.Time {
	var loc *time.Location
	switch g.n(4) {
	case 0:
		loc = time.UTC
	case 1:
		loc = time.FixedZone("CET", 3600)
	case 2:
		loc = time.FixedZone("odd", int(int16(g.u64()))) // seconds too
	case 3:
		loc = time.Local
	}
	switch g.n(5) {
	case 0:
		return time.Time{}
	case 1:
		return time.Date(2026, 12, 2, 3, 4, 5, 6e6, loc)
	case 2:
		return time.Unix(0, int64(g.u64())).In(loc)
	case 3:
		years := []int{-1, 0, 1, 1969, 9999, 10000, 2026}
		return time.Date(years[g.n(len(years))], time.Month(1+g.n(12)), 1+g.n(31), g.n(24), g.n(60), g.n(60), g.n(1000)*1e6+g.n(1000), loc)
	default:
		return time.Unix(int64(g.u64()), int64(g.u64()%1e9)).In(loc) // years far out of range
	}
}

func (g *gen) level() slog.Level {
	ls := []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelError + 2, slog.LevelInfo + 1, slog.LevelDebug - 4}
	if i := g.n(len(ls) + 1); i < len(ls) {
		return ls[i]
	}
	return slog.Level(int8(g.byte()))
}

// Values of KindAny and LogValuers: some this package encodes, the rest
// slog's handler writes.
type (
	plainErr  struct{ s string }
	nilErr    struct{ s string }
	jsonErr   struct{}
	badJSON   struct{}
	valuer    struct{ v slog.Value }
	someState struct {
		A int
		B string
	}
)

func (e *plainErr) Error() string              { return e.s }
func (e *nilErr) Error() string                { return e.s } // panics for a nil *nilErr
func (jsonErr) Error() string                  { return "not this" }
func (jsonErr) MarshalJSON() ([]byte, error)   { return []byte(`{"json":true}`), nil }
func (badJSON) MarshalJSON() ([]byte, error)   { return nil, errors.New("refused") }
func (v valuer) LogValue() slog.Value          { return v.v }
func (g *gen) error() error                    { return &plainErr{g.str()} }
func (g *gen) wrapped() error                  { return fmt.Errorf("wrap %s: %w", g.str(), g.error()) }
func (g *gen) joined() error                   { return errors.Join(g.error(), g.error()) }
func (g *gen) sourceAny() any                  { return &slog.Source{Function: g.str(), File: g.str(), Line: g.n(100)} }
func (g *gen) anyStruct() any                  { return someState{A: g.n(100), B: g.str()} }
func (g *gen) anyMap() any                     { return map[string]any{g.str(): g.float(), "k": []byte(g.str())} }
func (g *gen) nilPtrErr() error                { var e *nilErr; return e }
func (g *gen) groupValue(depth int) slog.Value { return slog.GroupValue(g.attrList(depth+1, 4)...) }

func (g *gen) value(depth int) slog.Value {
	switch g.n(32) {
	case 0, 1, 2, 18, 19, 20, 21, 22:
		return slog.StringValue(g.str())
	case 3, 4:
		return slog.Int64Value(int64(g.u64()))
	case 5:
		return slog.Uint64Value(g.u64())
	case 6, 7, 8:
		return slog.Float64Value(g.float())
	case 9:
		return slog.BoolValue(g.n(2) == 1)
	case 10:
		return slog.DurationValue(time.Duration(g.u64()))
	case 11:
		return slog.TimeValue(g.time())
	case 12:
		return slog.AnyValue(nil)
	case 13:
		return slog.AnyValue([]func() error{g.error, g.wrapped, g.joined, g.nilPtrErr}[g.n(4)]())
	case 14:
		return slog.AnyValue([]any{jsonErr{}, badJSON{}, g.sourceAny(), g.anyStruct(), g.anyMap(), []byte(g.str()), slog.KindInt64, &someState{}, (*someState)(nil)}[g.n(9)])
	case 15:
		if depth > 3 {
			return slog.StringValue("deep")
		}
		return slog.AnyValue(valuer{g.value(depth + 1)})
	case 16:
		return slog.GroupValue()
	case 17:
		return slog.Float64Value(corners[g.n(len(corners))])
	case 23, 24, 25:
		return slog.IntValue(int(int16(g.u64())))
	default:
		if depth > 3 {
			return slog.IntValue(depth)
		}
		return g.groupValue(depth)
	}
}

func (g *gen) attr(depth int) slog.Attr {
	switch g.n(12) {
	case 0:
		return slog.Attr{} // empty: elided
	case 1:
		return slog.Any("", nil) // empty too
	case 2:
		return slog.Group(g.str(), slog.Attr{}) // a group of empty attributes
	}
	return slog.Attr{Key: g.str(), Value: g.value(depth)}
}

func (g *gen) attrList(depth, max int) []slog.Attr {
	as := make([]slog.Attr, g.n(max+1))
	for i := range as {
		as[i] = g.attr(depth)
	}
	return as
}

// rename is a ReplaceAttr: slog's handler writes every line then.
func rename(groups []string, a slog.Attr) slog.Attr {
	if a.Key == "msg" {
		a.Key = "message"
	}
	if len(groups) > 0 && a.Key == "a" {
		return slog.Attr{}
	}
	return a
}

func (g *gen) program() program {
	var p program
	switch g.n(8) {
	case 0:
		p.opts = nil
	case 1:
		p.opts = &slog.HandlerOptions{ReplaceAttr: rename, Level: slog.LevelDebug}
	case 2:
		p.opts = &slog.HandlerOptions{AddSource: true, Level: slog.LevelDebug}
	default:
		var lv slog.LevelVar
		lv.Set(slog.Level(-100))
		p.opts = &slog.HandlerOptions{Level: &lv}
	}
	for range g.n(5) {
		if g.n(2) == 0 {
			p.steps = append(p.steps, step{group: g.str()})
		} else {
			p.steps = append(p.steps, step{attrs: g.attrList(0, 4)})
		}
	}
	p.rec = slog.NewRecord(g.time(), g.level(), g.str(), 0)
	if g.n(4) == 0 {
		p.rec = slog.NewRecord(time.Now(), p.rec.Level, p.rec.Message, 0) // with a monotonic reading
	}
	p.attrs = g.attrList(0, 12)
	p.rec.AddAttrs(p.attrs...)
	p.probe = g.level()
	return p
}
