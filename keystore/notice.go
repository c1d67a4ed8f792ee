package keystore

import (
	"context"
	"sync"
)

// Notices carries completion notices: a record was completed or released,
// so that requests waiting for it (DESIGN.md, "Waiting for the original")
// look at it again at once instead of at their next poll. A notice is a
// hint, never a state: a lost notice only delays a waiter until its poll.
type Notices interface {
	// Publish tells every watcher of key, in this process and (for a
	// shared implementation) in every other, that key's record changed.
	Publish(ctx context.Context, key Key) error
	// Watch returns a channel that receives a value (coalesced, never
	// blocking the publisher) after each notice for key, and a function
	// that stops the watch. Both are safe for concurrent use.
	Watch(key Key) (<-chan struct{}, func())
}

// Hub is the in-process [Notices]: the memory store's, and the fan-out of
// a shared implementation's notices to this process's watchers. The zero
// Hub is ready to use.
type Hub struct {
	mu       sync.Mutex
	watchers map[Key]map[chan struct{}]struct{}
}

// Publish implements [Notices]: it notifies this process's watchers.
func (h *Hub) Publish(_ context.Context, key Key) error {
	h.Notify(key)
	return nil
}

// Notify wakes key's watchers in this process.
func (h *Hub) Notify(key Key) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.watchers[key] {
		select {
		case ch <- struct{}{}:
		default: // one pending notice is as good as several
		}
	}
}

// Watch implements [Notices].
func (h *Hub) Watch(key Key) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.watchers == nil {
		h.watchers = make(map[Key]map[chan struct{}]struct{})
	}
	set := h.watchers[key]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		h.watchers[key] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(set, ch)
			if len(set) == 0 && h.watchers[key] != nil && len(h.watchers[key]) == 0 {
				delete(h.watchers, key)
			}
		})
	}
}

// Watched returns how many keys have watchers (for tests and metrics).
func (h *Hub) Watched() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watchers)
}

// FoldedNotice asks the store call that settles a record (a completion or
// a release) to publish the record's completion notice itself, on Channel,
// with its own write: one round trip instead of two for a keyed write on a
// waiting route (issue 31). A store that did publish sets Published; a
// store that cannot leaves it false, and the caller publishes as it would
// without it. Only this process's watchers are then left to wake.
type FoldedNotice struct {
	Channel   string // the shared notices' channel
	Published bool
}

type foldedNoticeKey struct{}

// WithFoldedNotice returns ctx carrying n (see [FoldedNotice]).
func WithFoldedNotice(ctx context.Context, n *FoldedNotice) context.Context {
	return context.WithValue(ctx, foldedNoticeKey{}, n)
}

// FoldedNoticeOf returns the [FoldedNotice] ctx carries, or nil.
func FoldedNoticeOf(ctx context.Context) *FoldedNotice {
	n, _ := ctx.Value(foldedNoticeKey{}).(*FoldedNotice)
	return n
}
