package testutil

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// DupKeys is a [slog.Handler] that records every log line carrying one
// attribute key twice (counting the attributes of [slog.Logger.With] and
// group prefixes), the mistake of a child logger that sets "component"
// again. It is safe for concurrent use; it writes nothing.
type DupKeys struct {
	shared *dupShared
	prefix string   // the open groups, "a.b."
	keys   []string // keys of the WithAttrs so far, prefixed
}

type dupShared struct {
	mu    sync.Mutex // protects lines
	lines []string
}

// NewDupKeys returns a DupKeys handler with no lines recorded.
func NewDupKeys() *DupKeys { return &DupKeys{shared: &dupShared{}} }

// Enabled implements [slog.Handler]: every level.
func (*DupKeys) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements [slog.Handler].
func (h *DupKeys) Handle(_ context.Context, r slog.Record) error {
	keys := slices.Clone(h.keys)
	r.Attrs(func(a slog.Attr) bool {
		keys = appendKeys(keys, h.prefix, a)
		return true
	})
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			h.shared.mu.Lock()
			h.shared.lines = append(h.shared.lines, r.Message+": key "+k+" twice")
			h.shared.mu.Unlock()
		}
		seen[k] = true
	}
	return nil
}

func appendKeys(keys []string, prefix string, a slog.Attr) []string {
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			keys = appendKeys(keys, p, g)
		}
		return keys
	}
	if a.Key == "" {
		return keys
	}
	return append(keys, prefix+a.Key)
}

// WithAttrs implements [slog.Handler].
func (h *DupKeys) WithAttrs(as []slog.Attr) slog.Handler {
	out := *h
	out.keys = slices.Clone(h.keys)
	for _, a := range as {
		out.keys = appendKeys(out.keys, h.prefix, a)
	}
	return &out
}

// WithGroup implements [slog.Handler].
func (h *DupKeys) WithGroup(name string) slog.Handler {
	out := *h
	out.keys = slices.Clone(h.keys)
	if name != "" {
		out.prefix += name + "."
	}
	return &out
}

// Lines returns the lines that carried a key twice, as "message: key K
// twice".
func (h *DupKeys) Lines() []string {
	h.shared.mu.Lock()
	defer h.shared.mu.Unlock()
	return slices.Clone(h.shared.lines)
}
