package jsonlog

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Handler writes slog records as JSON lines, the bytes of
// [slog.NewJSONHandler] with the record's time in UTC. Make one with [New];
// the zero value is not usable. Its methods are safe for concurrent use;
// every line is one Write call, serialized with those of every Handler
// derived from the same New (as slog's are).
type Handler struct {
	out *output
	// pre holds the attributes of WithAttrs, encoded as slog's handler
	// encodes them (its preformattedAttrs), and nOpen how many of groups
	// pre opened.
	pre    []byte
	groups []string // every name of WithGroup, outermost first
	nOpen  int
	// slow is slog's own handler, derived through the same chain, for the
	// records this package does not encode; slowOnly sends it every record
	// (options it does not reproduce; a WithAttrs value it does not encode).
	slow     *slowNode
	slowOnly bool
}

var _ slog.Handler = (*Handler)(nil)

// output is what every Handler derived from one New shares.
type output struct {
	mu    sync.Mutex // protects w
	w     io.Writer
	level slog.Leveler // nil: INFO
}

// New returns a Handler that writes to w with opts (nil: the defaults), as
// slog.NewJSONHandler(w, opts) would, with each record's time in UTC.
// opts.Level is read on every Enabled call, so a *slog.LevelVar changes
// the level of a running Handler. With opts.ReplaceAttr or opts.AddSource
// set, every record is written by slog's handler.
func New(w io.Writer, opts *slog.HandlerOptions) *Handler {
	var o slog.HandlerOptions
	if opts != nil {
		o = *opts
	}
	out := &output{w: w, level: o.Level}
	h := &Handler{out: out, slowOnly: o.ReplaceAttr != nil || o.AddSource}
	h.slow = &slowNode{root: func() slog.Handler { return slog.NewJSONHandler(lockedWriter{out}, &o) }}
	return h
}

// Enabled reports whether level is at least the options' Level (INFO
// when it is nil).
func (h *Handler) Enabled(_ context.Context, level slog.Level) bool {
	min := slog.LevelInfo
	if h.out.level != nil {
		min = h.out.level.Level()
	}
	return level >= min
}

// maxPooled is the largest buffer kept for reuse, as slog keeps its own:
// one long line must not pin its memory for good.
const maxPooled = 16 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Handle writes r as one JSON line with one Write, its time in UTC, and
// returns the Write's error.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if !r.Time.IsZero() {
		r.Time = r.Time.UTC()
	}
	if h.slowOnly {
		return h.slow.get().Handle(ctx, r)
	}
	// The attributes in an array on the stack (most records have a few):
	// iterating through a func value would move the record to the heap.
	var arr [16]slog.Attr
	as := arr[:0]
	if r.NumAttrs() > len(arr) {
		as = make([]slog.Attr, 0, r.NumAttrs())
	}
	r.Attrs(func(a slog.Attr) bool {
		as = append(as, a)
		return true
	})
	bp := bufPool.Get().(*[]byte)
	e := encoder{buf: (*bp)[:0]}
	if !h.encode(&e, r.Time, r.Level, r.Message, as) {
		h.put(bp, e.buf)
		return h.slow.get().Handle(ctx, r)
	}
	return h.write(bp, e.buf)
}

// HandleAttrs writes the line Handle writes for a record made of t, level,
// msg and as (slog.NewRecord(t, level, msg, 0) with AddAttrs(as...)),
// without the Record: a record of more than five attributes keeps the rest
// in a slice of its own, which a caller with its attributes at hand (the
// access log, one line per request) need not make (issue 31).
func (h *Handler) HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, as ...slog.Attr) error {
	if !h.slowOnly && !slices.ContainsFunc(as, isEmptyGroup) {
		bp := bufPool.Get().(*[]byte)
		e := encoder{buf: (*bp)[:0]}
		if !t.IsZero() {
			t = t.UTC()
		}
		if h.encode(&e, t, level, msg, as) {
			return h.write(bp, e.buf)
		}
		h.put(bp, e.buf)
	}
	// What AddAttrs makes of as (it drops empty groups), as Handle writes it.
	r := slog.NewRecord(t, level, msg, 0)
	r.AddAttrs(as...)
	return h.Handle(ctx, r)
}

// isEmptyGroup reports whether a is a group without attributes, which
// slog.Record.AddAttrs leaves out.
func isEmptyGroup(a slog.Attr) bool {
	return a.Value.Kind() == slog.KindGroup && len(a.Value.Group()) == 0
}

// write writes one encoded line b (in *bp's buffer) and pools the buffer.
func (h *Handler) write(bp *[]byte, b []byte) error {
	h.out.mu.Lock()
	_, err := h.out.w.Write(b)
	h.out.mu.Unlock()
	h.put(bp, b)
	return err
}

func (h *Handler) put(bp *[]byte, b []byte) {
	if cap(b) > maxPooled {
		return
	}
	*bp = b
	bufPool.Put(bp)
}

// encode appends the line of a record (its time t, level, message msg and
// attributes as) to e.buf as
// slog's commonHandler.handle does (without ReplaceAttr and AddSource),
// step for step, its separator state included. It reports false, leaving
// e.buf to be discarded, when the record holds something only slog's
// handler writes.
func (h *Handler) encode(e *encoder, t time.Time, level slog.Level, msg string, as []slog.Attr) bool {
	e.buf = append(e.buf, '{')
	if !t.IsZero() {
		e.key(slog.TimeKey)
		e.buf = append(e.buf, '"')
		var ok bool
		if e.buf, ok = appendUTC(e.buf, t); !ok {
			return false
		}
		e.buf = append(e.buf, '"')
	}
	e.key(slog.LevelKey)
	e.string(level.String())
	e.key(slog.MessageKey)
	e.string(msg)
	// slog's appendNonBuiltIns.
	if len(h.pre) > 0 {
		if e.sep {
			e.buf = append(e.buf, ',')
		}
		e.buf = append(e.buf, h.pre...)
		e.sep = h.pre[len(h.pre)-1] != '{'
	}
	nOpen := h.nOpen
	if len(as) > 0 {
		pos := len(e.buf)
		e.openGroups(h.groups[h.nOpen:])
		nOpen = len(h.groups)
		empty := true
		for _, a := range as {
			if e.attr(a) {
				empty = false
			}
			if e.failed {
				break
			}
		}
		if e.failed {
			return false
		}
		if empty {
			e.buf = e.buf[:pos]
			nOpen = h.nOpen
		}
	}
	for range nOpen {
		e.buf = append(e.buf, '}')
	}
	e.buf = append(e.buf, '}', '\n')
	return true
}

// WithAttrs returns a Handler whose lines carry as after the receiver's
// attributes, in its groups.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	// As slog: a list of empty groups changes nothing.
	if countEmptyGroups(as) == len(as) {
		return h
	}
	h2 := h.clone()
	h2.slow = &slowNode{parent: h.slow, attrs: as}
	if h.slowOnly || needsNow(as) {
		// slog resolves and encodes these at WithAttrs; so must its
		// handler here, not at the first record that needs it.
		h2.slow.get()
	}
	if h2.slowOnly {
		return h2
	}
	// slog's commonHandler.withAttrs.
	e := encoder{buf: h2.pre, sep: len(h2.pre) > 0 && h2.pre[len(h2.pre)-1] != '{'}
	pos := len(e.buf)
	e.openGroups(h2.groups[h2.nOpen:])
	appended := e.attrs(as)
	switch {
	case e.failed:
		h2.slowOnly = true
		h2.slow.get()
	case !appended:
		h2.pre = e.buf[:pos]
	default:
		h2.pre = e.buf
		h2.nOpen = len(h2.groups)
	}
	return h2
}

// WithGroup returns a Handler whose attributes, from here on, are in a
// group of that name. As slog's own handler, it opens a group for the
// empty name too (slog.Logger's WithGroup skips it).
func (h *Handler) WithGroup(name string) slog.Handler {
	h2 := h.clone()
	h2.groups = append(h2.groups, name)
	h2.slow = &slowNode{parent: h.slow, group: name, isGroup: true}
	if h.slowOnly {
		h2.slow.get()
	}
	return h2
}

func (h *Handler) clone() *Handler {
	return &Handler{
		out:      h.out,
		pre:      slices.Clip(h.pre),
		groups:   slices.Clip(h.groups),
		nOpen:    h.nOpen,
		slow:     h.slow,
		slowOnly: h.slowOnly,
	}
}

func countEmptyGroups(as []slog.Attr) int {
	n := 0
	for _, a := range as {
		if a.Value.Kind() == slog.KindGroup && len(a.Value.Group()) == 0 {
			n++
		}
	}
	return n
}

// needsNow reports whether as holds a value whose encoding may change
// after WithAttrs returns (a LogValuer, an error, any other non-nil
// KindAny), so
// that slog's handler must see it now.
func needsNow(as []slog.Attr) bool {
	for _, a := range as {
		switch a.Value.Kind() {
		case slog.KindAny:
			if a.Value.Any() != nil {
				return true
			}
		case slog.KindLogValuer:
			return true
		case slog.KindGroup:
			if needsNow(a.Value.Group()) {
				return true
			}
		}
	}
	return false
}

// slowNode is slog's handler for one Handler: built on first use from its
// parent's by the same WithAttrs or WithGroup call, so that a chain whose
// records this package encodes costs nothing here.
type slowNode struct {
	once    sync.Once
	h       slog.Handler
	root    func() slog.Handler // the root's: slog.NewJSONHandler
	parent  *slowNode
	attrs   []slog.Attr
	group   string
	isGroup bool
}

func (n *slowNode) get() slog.Handler {
	n.once.Do(func() {
		switch {
		case n.root != nil:
			n.h = n.root()
		case n.isGroup:
			n.h = n.parent.get().WithGroup(n.group)
		default:
			n.h = n.parent.get().WithAttrs(n.attrs)
		}
	})
	return n.h
}

// lockedWriter is slog's handler's writer: its lines are serialized with
// the Handler's own.
type lockedWriter struct{ o *output }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	return w.o.w.Write(p)
}

// encoder is slog's handleState for JSON: the line and whether the next
// key needs a comma first.
type encoder struct {
	buf    []byte
	sep    bool
	failed bool // something only slog's handler writes
}

func (e *encoder) openGroups(names []string) {
	for _, n := range names {
		e.openGroup(n)
	}
}

func (e *encoder) openGroup(name string) {
	e.key(name)
	e.buf = append(e.buf, '{')
	e.sep = false
}

func (e *encoder) key(k string) {
	if e.sep {
		e.buf = append(e.buf, ',')
	}
	e.string(k)
	e.buf = append(e.buf, ':')
	e.sep = true
}

func (e *encoder) string(s string) {
	e.buf = append(e.buf, '"')
	e.buf = appendEscaped(e.buf, s)
	e.buf = append(e.buf, '"')
}

// attrs is slog's appendAttrs: it reports whether something was appended.
func (e *encoder) attrs(as []slog.Attr) bool {
	nonEmpty := false
	for _, a := range as {
		if e.attr(a) {
			nonEmpty = true
		}
		if e.failed {
			return false
		}
	}
	return nonEmpty
}

// attr is slog's appendAttr without ReplaceAttr: it reports whether
// something was appended. slog resolves LogValuers first; this leaves
// them to slog.
func (e *encoder) attr(a slog.Attr) bool {
	v := a.Value
	switch v.Kind() {
	case slog.KindLogValuer:
		e.failed = true
		return false
	case slog.KindAny:
		if a.Key == "" && v.Any() == nil {
			return false // slog's Attr.isEmpty
		}
	case slog.KindGroup:
		as := v.Group()
		if len(as) == 0 {
			return true // as slog: nothing written, yet not empty
		}
		pos := len(e.buf)
		if a.Key != "" {
			e.openGroup(a.Key)
		}
		if !e.attrs(as) {
			// As slog: the comma state stays as the group left it.
			e.buf = e.buf[:pos]
			return false
		}
		if a.Key != "" {
			e.buf = append(e.buf, '}')
			e.sep = true
		}
		return true
	}
	e.key(a.Key)
	e.value(v)
	return true
}

// value is slog's appendJSONValue for the kinds it encodes without
// encoding/json, and encoding/json's output for nil and errors.
func (e *encoder) value(v slog.Value) {
	switch v.Kind() {
	case slog.KindString:
		e.string(v.String())
	case slog.KindInt64:
		e.buf = strconv.AppendInt(e.buf, v.Int64(), 10)
	case slog.KindUint64:
		e.buf = strconv.AppendUint(e.buf, v.Uint64(), 10)
	case slog.KindFloat64:
		e.float(v.Float64())
	case slog.KindBool:
		e.buf = strconv.AppendBool(e.buf, v.Bool())
	case slog.KindDuration:
		e.buf = strconv.AppendInt(e.buf, int64(v.Duration()), 10)
	case slog.KindTime:
		t := v.Time()
		if y := t.Year(); y < 0 || y >= 10000 {
			e.failed = true
			return
		}
		e.time(t)
	case slog.KindAny:
		switch a := v.Any().(type) {
		case nil:
			e.buf = append(e.buf, "null"...)
		case json.Marshaler:
			e.failed = true
		case error:
			s, ok := errorText(a)
			if !ok {
				e.failed = true
				return
			}
			e.string(s)
		default:
			e.failed = true
		}
	default:
		e.failed = true
	}
}

// errorText is err.Error(), or false when it panics (slog writes "<nil>"
// or "!PANIC: ..." then, and its handler will).
func errorText(err error) (s string, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return err.Error(), true
}

// time is slog's appendJSONTime for a year in [0, 9999].
func (e *encoder) time(t time.Time) {
	e.buf = append(e.buf, '"')
	e.buf = t.AppendFormat(e.buf, time.RFC3339Nano)
	e.buf = append(e.buf, '"')
}

// float is encoding/json's float64 encoding (ES6 number to string: 'f'
// unless the exponent is below -6 or at least 21, then 'e' with the
// exponent unpadded), which slog uses for every float64; NaN and ±Inf are
// errors there, and slog writes the error as a string.
func (e *encoder) float(f float64) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		e.string("!ERROR:json: unsupported value: " + strconv.FormatFloat(f, 'g', -1, 64))
		return
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b := strconv.AppendFloat(e.buf, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	e.buf = b
}
