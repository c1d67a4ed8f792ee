package jsonlog

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var at = time.Date(2026, 12, 2, 3, 4, 5, 6e6, time.FixedZone("CET", 3600))

// TestSameBytes compares New's lines with slog's (time in UTC) for named
// records: each kind, each escape, slog's group rules and quirks, and the
// records slog's handler writes for this package.
func TestSameBytes(t *testing.T) {
	t.Parallel()
	all := &slog.HandlerOptions{Level: slog.Level(-100)}
	rec := func(as ...slog.Attr) slog.Record {
		r := slog.NewRecord(at, slog.LevelInfo, "request", 0)
		r.AddAttrs(as...)
		return r
	}
	var floats []slog.Attr
	for i, f := range corners {
		floats = append(floats, slog.Float64(fmt.Sprint("f", i), f))
	}
	var strs []slog.Attr
	for _, s := range tricky {
		strs = append(strs, slog.String(s, s))
	}
	emptyGroup := slog.Group("g", slog.Attr{})
	var nilErrPtr *nilErr
	pc, _, _, _ := runtime.Caller(0)
	withPC := slog.NewRecord(at, slog.LevelWarn, "with source", pc)
	tests := []struct {
		name string
		p    program
		slog bool // written by slog's handler
	}{
		{"access line", program{opts: all, steps: []step{{attrs: []slog.Attr{slog.String("component", "proxy")}}}, rec: accessRecord()}, false},
		{"no attributes", program{opts: all, rec: rec()}, false},
		{"zero time", program{opts: all, rec: slog.NewRecord(time.Time{}, slog.LevelInfo, "m", 0)}, false},
		{"floats", program{opts: all, rec: rec(floats...)}, false},
		{"strings as keys and values", program{opts: all, rec: rec(strs...)}, false},
		{"message escaped", program{opts: all, rec: slog.NewRecord(at, slog.LevelInfo, "a\"b\\c\n\u2028\xff<&>", 0)}, false},
		{"ints, bools, durations, times", program{opts: all, rec: rec(slog.Int64("i", math.MinInt64), slog.Uint64("u", math.MaxUint64),
			slog.Bool("t", true), slog.Bool("f", false), slog.Duration("d", -time.Hour), slog.Time("at", at), slog.Time("zero", time.Time{}))}, false},
		{"custom levels", program{opts: all, rec: slog.NewRecord(at, slog.LevelError+2, "m", 0)}, false},
		{"level below debug", program{opts: all, rec: slog.NewRecord(at, slog.LevelDebug-3, "m", 0)}, false},
		{"nil and errors", program{opts: all, rec: rec(slog.Any("nil", nil), slog.Any("err", &plainErr{"boom \"x\""}),
			slog.Any("wrapped", fmt.Errorf("w: %w", &plainErr{"in"})))}, false},
		{"nested groups", program{opts: all, rec: rec(slog.Group("a", slog.Int("x", 1), slog.Group("b", slog.String("y", "z"))), slog.Int("after", 2))}, false},
		{"inline group", program{opts: all, rec: rec(slog.Group("", slog.Int("x", 1)), slog.Int("y", 2))}, false},
		{"empty group value", program{opts: all, rec: rec(slog.Any("g", slog.GroupValue()), slog.Int("y", 2))}, false},
		{"group of empty attributes: slog drops the comma", program{opts: all, rec: rec(slog.Int("x", 1), emptyGroup, slog.Int("y", 2))}, false},
		{"only empty attributes", program{opts: all, steps: []step{{group: "g"}}, rec: rec(slog.Attr{}, slog.Any("", nil))}, false},
		{"WithGroup, record without attributes", program{opts: all, steps: []step{{group: "g"}}, rec: rec()}, false},
		{"WithGroup then attributes", program{opts: all, steps: []step{{group: "g"}}, rec: rec(slog.Int("a", 1))}, false},
		{"WithGroup empty name", program{opts: all, steps: []step{{group: ""}}, rec: rec(slog.Int("a", 1))}, false},
		{"chain", program{opts: all, steps: []step{{attrs: []slog.Attr{slog.Int("a", 1)}}, {group: "g"}, {attrs: []slog.Attr{slog.Int("b", 2)}},
			{group: "h"}, {group: "i"}, {attrs: []slog.Attr{slog.Float64("c", 1e21)}}}, rec: rec(slog.Int("d", 4))}, false},
		{"chain, record without attributes", program{opts: all, steps: []step{{group: "g"}, {attrs: []slog.Attr{slog.Int("b", 2)}}, {group: "h"}}, rec: rec()}, false},
		{"WithAttrs of empty groups only", program{opts: all, steps: []step{{attrs: []slog.Attr{slog.Group("e")}}}, rec: rec(slog.Int("a", 1))}, false},
		{"WithAttrs of empty attributes", program{opts: all, steps: []step{{group: "g"}, {attrs: []slog.Attr{{}}}}, rec: rec(slog.Int("a", 1))}, false},
		{"WithAttrs group of empty attributes", program{opts: all, steps: []step{{attrs: []slog.Attr{slog.Int("x", 1)}}, {attrs: []slog.Attr{emptyGroup, slog.Int("y", 2)}}}, rec: rec(slog.Int("a", 1))}, false},
		// slog's handler writes these.
		{"year 10000", program{opts: all, rec: slog.NewRecord(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), slog.LevelInfo, "m", 0)}, true},
		{"year -1 attribute", program{opts: all, rec: rec(slog.Time("t", time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)))}, true},
		{"struct", program{opts: all, rec: rec(slog.Any("s", someState{1, "x"}))}, true},
		{"json.Marshaler error", program{opts: all, rec: rec(slog.Any("e", jsonErr{}))}, true},
		{"failing MarshalJSON", program{opts: all, rec: rec(slog.Any("e", badJSON{}))}, true},
		{"nil pointer error", program{opts: all, rec: rec(slog.Any("e", nilErrPtr))}, true},
		{"source value", program{opts: all, rec: rec(slog.Any("src", &slog.Source{File: "f.go", Line: 3}))}, true},
		{"LogValuer", program{opts: all, rec: rec(slog.Any("v", valuer{slog.IntValue(3)}))}, true},
		{"LogValuer in WithAttrs", program{opts: all, steps: []step{{attrs: []slog.Attr{slog.Any("v", valuer{slog.GroupValue(slog.Int("x", 1))})}}, {group: "g"}}, rec: rec(slog.Int("a", 1))}, true},
		{"struct in WithAttrs", program{opts: all, steps: []step{{group: "g"}, {attrs: []slog.Attr{slog.Any("s", someState{})}}}, rec: rec(slog.Int("a", 1))}, true},
		{"ReplaceAttr", program{opts: &slog.HandlerOptions{ReplaceAttr: rename}, steps: []step{{group: "g"}, {attrs: []slog.Attr{slog.Int("a", 1)}}}, rec: rec(slog.Int("b", 1))}, true},
		{"AddSource", program{opts: &slog.HandlerOptions{AddSource: true}, steps: []step{{attrs: []slog.Attr{slog.Int("a", 1)}}}, rec: withPC}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if used := compare(t, tc.p, func() string { return tc.name }); used != tc.slog {
				t.Errorf("slog's handler used: %v; want %v", used, tc.slog)
			}
		})
	}
}

// TestRandomRecords compares New with slog for random programs: a few
// thousand every run, from seeds that change with the run (logged, to
// replay one).
func TestRandomRecords(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 31))
	const n = 3000
	fast := 0
	for range n {
		data := make([]byte, rng.IntN(400))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		g := &gen{data: data}
		p := g.program()
		if !compare(t, p, func() string { return fmt.Sprintf("program %q", data) }) {
			fast++
		}
	}
	// The generator must exercise this package's encoder, not only slog's.
	if t.Logf("%d of %d records encoded here", fast, n); fast < n/5 {
		t.Errorf("%d of %d records encoded here; want at least a fifth", fast, n)
	}
}

// FuzzHandler compares New with slog for programs made of the fuzzer's
// bytes. Its corpus is in testdata/fuzz/FuzzHandler; run it with
//
//	go test -run '^$' -fuzz FuzzHandler -fuzztime 60s ./internal/jsonlog/
func FuzzHandler(f *testing.F) {
	for _, s := range []string{
		"", "\x03\x05hello\x02\x00", strings.Repeat("\x01\x07\x02", 40), strings.Repeat("\x11\xff\x80\x00\x13", 30),
		"\x07\x04\x01\x00\x02\x05\x06\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &gen{data: data}
		p := g.program()
		compare(t, p, func() string { return fmt.Sprintf("program %q", data) })
	})
}

// TestLevel: Enabled follows the options' Leveler as it changes, through
// derived handlers; nil is INFO.
func TestLevel(t *testing.T) {
	t.Parallel()
	var lv slog.LevelVar
	lv.Set(slog.LevelWarn)
	h := New(nil, &slog.HandlerOptions{Level: &lv}).WithAttrs([]slog.Attr{slog.Int("a", 1)}).WithGroup("g")
	ctx := context.Background()
	tests := []struct {
		set, ask slog.Level
		want     bool
	}{
		{slog.LevelWarn, slog.LevelInfo, false},
		{slog.LevelWarn, slog.LevelWarn, true},
		{slog.LevelDebug, slog.LevelInfo, true},
		{slog.LevelError, slog.LevelWarn, false},
	}
	for _, tc := range tests {
		lv.Set(tc.set)
		if got := h.Enabled(ctx, tc.ask); got != tc.want {
			t.Errorf("level %v: Enabled(%v) = %v; want %v", tc.set, tc.ask, got, tc.want)
		}
	}
	d := New(nil, nil)
	if d.Enabled(ctx, slog.LevelDebug) || !d.Enabled(ctx, slog.LevelInfo) {
		t.Error("New(nil, nil): want INFO and above enabled")
	}
}

// TestSerialWrites: many goroutines, through handlers derived from one
// New, writing lines this package encodes and lines slog's handler writes,
// never call Write at the same time, and every line arrives whole.
func TestSerialWrites(t *testing.T) {
	t.Parallel()
	w := &exclusiveWriter{}
	root := New(w, nil)
	const goroutines, each = 16, 200
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := root.WithAttrs([]slog.Attr{slog.Int("g", i)})
			for j := range each {
				r := slog.NewRecord(at, slog.LevelInfo, "m", 0)
				if j%2 == 0 {
					r.AddAttrs(slog.Int("j", j))
				} else {
					r.AddAttrs(slog.Any("s", someState{A: j})) // slog's handler
				}
				if err := h.Handle(context.Background(), r); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if w.overlaps.Load() != 0 {
		t.Errorf("%d overlapping Write calls; want 0", w.overlaps.Load())
	}
	lines := strings.Split(strings.TrimSuffix(w.buf.String(), "\n"), "\n")
	if len(lines) != goroutines*each {
		t.Fatalf("%d lines; want %d", len(lines), goroutines*each)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, `{"time":"2026-12-02T02:04:05.006Z","level":"INFO","msg":"m","g":`) || !strings.HasSuffix(l, "}") {
			t.Fatalf("line %q", l)
		}
	}
}

// exclusiveWriter counts Write calls that overlap another.
type exclusiveWriter struct {
	busy     atomic.Bool
	overlaps atomic.Int64
	buf      strings.Builder
}

func (w *exclusiveWriter) Write(p []byte) (int, error) {
	if !w.busy.CompareAndSwap(false, true) {
		w.overlaps.Add(1)
		return len(p), nil
	}
	defer w.busy.Store(false)
	runtime.Gosched()
	return w.buf.Write(p)
}

// TestAppendUTC compares appendUTC with time's RFC 3339 formatting on
// the first and last second of every year it writes, and on random
// instants with random fractions; it refuses the years slog's handler
// writes an error for.
func TestAppendUTC(t *testing.T) {
	t.Parallel()
	check := func(tm time.Time) {
		t.Helper()
		got, ok := appendUTC([]byte("x"), tm)
		if want := tm.AppendFormat([]byte("x"), time.RFC3339Nano); !ok || string(got) != string(want) {
			t.Fatalf("appendUTC(%d.%09d) = %s, %v; want %s", tm.Unix(), tm.Nanosecond(), got, ok, want)
		}
	}
	for y := range 10000 {
		check(time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC))
		check(time.Date(y, 12, 31, 23, 59, 59, 999999999, time.UTC))
		check(time.Date(y, 2, 28, 12, 0, 0, 100, time.UTC).AddDate(0, 0, 1)) // Feb 29 or Mar 1
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		ns := rng.IntN(1e9)
		switch rng.IntN(4) {
		case 0:
			ns = 0
		case 1:
			ns -= ns % 1e6 // milliseconds: trailing zeros
		}
		check(time.Unix(minUnix+rng.Int64N(maxUnix-minUnix), int64(ns)).UTC())
	}
	for _, tm := range []time.Time{time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if b, ok := appendUTC(nil, tm); ok || len(b) != 0 {
			t.Errorf("appendUTC(%v) = %q, %v; want nothing, false", tm, b, ok)
		}
	}
}

// TestPlain: the word-at-a-time check agrees with the byte-at-a-time one
// for every byte value at every place of strings of 0 to 17 bytes.
func TestPlain(t *testing.T) {
	t.Parallel()
	slow := func(s string) bool {
		for i := range len(s) {
			if s[i] >= 0x80 || s[i] < 0x20 || s[i] == '"' || s[i] == '\\' {
				return false
			}
		}
		return true
	}
	for n := range 18 {
		for at := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("a", n))
				b[at] = byte(c)
				if s := string(b); plain(s) != slow(s) {
					t.Fatalf("plain(%q) = %v; want %v", s, plain(s), slow(s))
				}
			}
		}
	}
}

// TestHandleAttrsEmptyGroups: HandleAttrs leaves out empty groups, as
// slog.Record.AddAttrs does, under a pending WithGroup too (the group is
// then not opened at all).
func TestHandleAttrsEmptyGroups(t *testing.T) {
	for _, as := range [][]slog.Attr{
		{slog.Group("e")},
		{slog.Group("e"), {}},
		{slog.Group("e"), slog.Int("a", 1)},
		{slog.Int("a", 1), slog.Group("e", slog.Group("f"))},
	} {
		var got, want bytes.Buffer
		h := New(&got, nil).WithGroup("g").(*Handler)
		if err := h.HandleAttrs(context.Background(), time.Time{}, slog.LevelInfo, "m", as...); err != nil {
			t.Fatal(err)
		}
		r := slog.NewRecord(time.Time{}, slog.LevelInfo, "m", 0)
		r.AddAttrs(as...)
		if err := slog.NewJSONHandler(&want, nil).WithGroup("g").Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("HandleAttrs(%v)\n got %q\nwant %q", as, got.String(), want.String())
		}
	}
}
