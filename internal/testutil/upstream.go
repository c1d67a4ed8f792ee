package testutil

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// HeldUpstream is a loopback HTTP API whose requests, once arrived, wait
// until the test opens it: a write the proxy forwarded whose answer has not
// come yet. It starts shut. It counts every request's arrival by its
// Idempotency-Key, keeps the keys' order and the requests running at once,
// and queues the held requests' keys for [HeldUpstream.Arrival]. A held
// request whose client (the proxy) cancels it is counted and not answered.
// It is safe for concurrent use.
type HeldUpstream struct {
	*httptest.Server
	opts HeldOptions

	mu        sync.Mutex    // protects the fields below
	gate      chan struct{} // closed while open
	open      bool
	queue     []string      // the held requests' keys, in arrival order, not yet taken
	queued    chan struct{} // closed (and replaced) when the queue grows
	count     map[string]int
	order     []string
	active    map[string]int // running requests per path
	maxActive map[string]int
	running   int
	peak      int
	cancelled int
}

// HeldOptions are a [HeldUpstream]'s knobs. The zero value holds every
// request and answers it with [WriteCreated].
type HeldOptions struct {
	// Hold reports whether r waits for Open; nil holds every request. Only
	// held requests are queued for Arrival and Next.
	Hold func(r *http.Request) bool
	// Answer answers r, the n-th arrival of its Idempotency-Key, once it
	// may (at once, or when the upstream opens); nil is WriteCreated. It
	// runs while r counts as running.
	Answer func(w http.ResponseWriter, r *http.Request, n int)
}

// NewHeldUpstream starts a shut HeldUpstream. When t ends it is opened,
// so that no held request holds up its Close, and closed.
func NewHeldUpstream(t testing.TB, o HeldOptions) *HeldUpstream {
	t.Helper()
	u := &HeldUpstream{
		opts:      o,
		gate:      make(chan struct{}),
		queued:    make(chan struct{}),
		count:     map[string]int{},
		active:    map[string]int{},
		maxActive: map[string]int{},
	}
	if u.opts.Answer == nil {
		u.opts.Answer = WriteCreated
	}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	t.Cleanup(u.Open) // runs first
	return u
}

func (u *HeldUpstream) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	key, path := r.Header.Get("Idempotency-Key"), r.URL.Path
	held := u.opts.Hold == nil || u.opts.Hold(r)
	u.mu.Lock()
	u.count[key]++
	n := u.count[key]
	u.order = append(u.order, key)
	u.active[path]++
	u.maxActive[path] = max(u.maxActive[path], u.active[path])
	u.running++
	u.peak = max(u.peak, u.running)
	gate := u.gate
	if held {
		u.queue = append(u.queue, key)
		close(u.queued)
		u.queued = make(chan struct{})
	}
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.active[path]--
		u.running--
		u.mu.Unlock()
	}()
	if held {
		select {
		case <-gate:
		case <-r.Context().Done():
			u.mu.Lock()
			u.cancelled++
			u.mu.Unlock()
			return
		}
	}
	u.opts.Answer(w, r, n)
}

// WriteCreated is a HeldUpstream's default answer: 201 with the JSON
// {"key": the Idempotency-Key, "execution": n}, and n in X-Execution.
func WriteCreated(w http.ResponseWriter, r *http.Request, n int) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Execution", fmt.Sprint(n))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"key":%q,"execution":%d}`, r.Header.Get("Idempotency-Key"), n)
}

// Open lets the held requests, and every later one, answer. Opening an
// open upstream does nothing.
func (u *HeldUpstream) Open() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.open {
		close(u.gate)
		u.open = true
	}
}

// Shut makes the next requests wait for Open again; requests already let
// through answer. Shutting a shut upstream does nothing.
func (u *HeldUpstream) Shut() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.open {
		u.gate, u.open = make(chan struct{}), false
	}
}

// Next takes the key of the next held request to arrive, in arrival order,
// waiting at most within for it; ok is false when none came.
func (u *HeldUpstream) Next(within time.Duration) (key string, ok bool) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		u.mu.Lock()
		if len(u.queue) > 0 {
			key = u.queue[0]
			u.queue = u.queue[1:]
			u.mu.Unlock()
			return key, true
		}
		queued := u.queued
		u.mu.Unlock()
		select {
		case <-queued:
		case <-timer.C:
			return "", false
		}
	}
}

// Arrival waits (at most 10 s) for the next held request to arrive, and
// fails t unless it came with key.
func (u *HeldUpstream) Arrival(t testing.TB, key string) {
	t.Helper()
	got, ok := u.Next(10 * time.Second)
	switch {
	case !ok:
		t.Fatalf("request %q did not arrive upstream within 10s", key)
	case got != key:
		t.Fatalf("request %q arrived upstream; want %q", got, key)
	}
}

// Count returns the number of requests with key that arrived, held or not.
func (u *HeldUpstream) Count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.count[key]
}

// Order returns every arrived request's key, in arrival order.
func (u *HeldUpstream) Order() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.order...)
}

// Concurrency returns the most requests that ran at once per path, and
// in all.
func (u *HeldUpstream) Concurrency() (perPath map[string]int, peak int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.maxActive), u.peak
}

// Cancelled returns the number of held requests cancelled before they
// could answer.
func (u *HeldUpstream) Cancelled() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cancelled
}
