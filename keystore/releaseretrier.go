package keystore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ReleaseRetrier retries, in the background, the releases of claims whose
// replies were lost (DESIGN.md §8): a claim that timed out may still be made
// when the store answers again, and would then hold the key for a whole
// lease although nothing ran. The caller hands such a claim to
// [ReleaseRetrier.Add] as soon as the claim fails, and the ReleaseRetrier
// calls [Store.ReleaseClaim] until the store answers: within about
// Interval + AttemptTimeout (750 ms by default) of the store answering again.
//
// It is bounded: at most MaxPending releases wait at once; more are dropped
// and counted. [ReleaseRetrier.Close] tries the pending releases until its
// context is done (the shutdown deadline), then drops and counts the rest.
// It is safe for concurrent use.
type ReleaseRetrier struct {
	store    Store
	max      int
	interval time.Duration
	attempt  time.Duration
	now      func() time.Time

	mu      sync.Mutex // protects pending and closed
	pending []*pendingRelease
	closed  bool

	wake     chan struct{}      // a release was added
	cancel   context.CancelFunc // stops the loop
	done     chan struct{}      // closed when the loop has ended
	once     sync.Once
	released atomic.Uint64
	dropped  atomic.Uint64
}

type pendingRelease struct {
	key   Key
	id    ClaimID
	lease time.Duration
	added time.Time
}

// ReleaseRetrierOptions configure a [ReleaseRetrier]. Zero fields take the
// defaults.
type ReleaseRetrierOptions struct {
	// MaxPending is the most releases waiting at once. Default 10,000.
	MaxPending int
	// Interval is the wait between two rounds of attempts while releases
	// wait. Default 250 ms.
	Interval time.Duration
	// AttemptTimeout bounds one ReleaseClaim call. Default 500 ms.
	AttemptTimeout time.Duration
	// Now is the clock that dates pending releases (Stats.Oldest). Default
	// time.Now.
	Now func() time.Time
}

// ReleaseRetrierStats are a [ReleaseRetrier]'s counters, for metrics.
type ReleaseRetrierStats struct {
	// Pending is the number of releases waiting.
	Pending int
	// Oldest is how long the oldest pending release has waited.
	Oldest time.Duration
	// Released counts the releases done.
	Released uint64
	// Dropped counts the releases given up: over MaxPending, added after
	// Close, or still pending at Close's deadline.
	Dropped uint64
}

// parallelReleases bounds the ReleaseClaim calls a round makes at once once
// the store answers.
const parallelReleases = 16

// NewReleaseRetrier returns a ReleaseRetrier for s and starts its
// goroutine; Close stops it.
func NewReleaseRetrier(s Store, opts ReleaseRetrierOptions) *ReleaseRetrier {
	if opts.MaxPending <= 0 {
		opts.MaxPending = 10_000
	}
	if opts.Interval <= 0 {
		opts.Interval = 250 * time.Millisecond
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = 500 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &ReleaseRetrier{
		store:    s,
		max:      opts.MaxPending,
		interval: opts.Interval,
		attempt:  opts.AttemptTimeout,
		now:      opts.Now,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.loop(ctx)
	return r
}

// Add queues the release of claim id on key, whose tombstone lives for
// lease (the claim's lease). It reports false, and counts a drop, when
// MaxPending releases wait already or the ReleaseRetrier is closed; and
// false, without counting, for a zero id or a lease <= 0.
func (r *ReleaseRetrier) Add(key Key, id ClaimID, lease time.Duration) bool {
	if id.IsZero() || lease <= 0 {
		return false
	}
	r.mu.Lock()
	if r.closed || len(r.pending) >= r.max {
		r.mu.Unlock()
		r.dropped.Add(1)
		return false
	}
	r.pending = append(r.pending, &pendingRelease{key: key, id: id, lease: lease, added: r.now()})
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return true
}

// Stats returns the ReleaseRetrier's counters.
func (r *ReleaseRetrier) Stats() ReleaseRetrierStats {
	r.mu.Lock()
	st := ReleaseRetrierStats{Pending: len(r.pending)}
	now := r.now()
	for _, p := range r.pending {
		st.Oldest = max(st.Oldest, now.Sub(p.added))
	}
	r.mu.Unlock()
	st.Released = r.released.Load()
	st.Dropped = r.dropped.Load()
	return st
}

// Close stops taking releases, tries the pending ones until ctx is done,
// then drops the rest and returns an error that counts them (nil when none
// was dropped). Later calls return nil.
func (r *ReleaseRetrier) Close(ctx context.Context) error {
	first := false
	r.once.Do(func() {
		first = true
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.cancel()
		<-r.done
	})
	if !first {
		return nil
	}
	for r.round(ctx) {
		t := time.NewTimer(r.interval)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			break
		}
	}
	r.mu.Lock()
	n := len(r.pending)
	r.pending = nil
	r.mu.Unlock()
	if n == 0 {
		return nil
	}
	r.dropped.Add(uint64(n))
	return fmt.Errorf("keystore: %d releases of claims with lost replies dropped at shutdown: %w", n, context.Cause(ctx))
}

func (r *ReleaseRetrier) loop(ctx context.Context) {
	defer close(r.done)
	for {
		if !r.round(ctx) {
			// Nothing waits: sleep until something is added.
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			}
			continue
		}
		t := time.NewTimer(r.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// round attempts the pending releases once and reports whether some still
// wait. The first goes alone: if the store does not answer it, the round
// ends there (a round against a dead store costs one attempt), and it moves
// to the back, so that a release that keeps failing on its own (a foreign
// value at its key) cannot hold the others; if it does, the rest go in
// parallel.
func (r *ReleaseRetrier) round(ctx context.Context) bool {
	r.mu.Lock()
	batch := append([]*pendingRelease(nil), r.pending...)
	r.mu.Unlock()
	if len(batch) == 0 || ctx.Err() != nil {
		return len(batch) > 0
	}
	finished := make([]bool, len(batch))
	finished[0] = r.release(ctx, batch[0])
	if finished[0] && len(batch) > 1 {
		sem := make(chan struct{}, parallelReleases)
		var wg sync.WaitGroup
		for i, p := range batch[1:] {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				finished[i+1] = r.release(ctx, p)
			})
		}
		wg.Wait()
	}
	gone := make(map[*pendingRelease]bool, len(batch))
	for i, p := range batch {
		if finished[i] {
			gone[p] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.pending[:0]
	for _, p := range r.pending {
		if !gone[p] && p != batch[0] {
			kept = append(kept, p)
		}
	}
	if !finished[0] {
		kept = append(kept, batch[0])
	}
	clear(r.pending[len(kept):])
	r.pending = kept
	return len(r.pending) > 0
}

// release makes one attempt and reports whether p is finished with: done,
// or impossible because the store is closed (counted as dropped).
func (r *ReleaseRetrier) release(ctx context.Context, p *pendingRelease) bool {
	actx, cancel := context.WithTimeout(ctx, r.attempt)
	defer cancel()
	err := r.store.ReleaseClaim(actx, p.key, p.id, p.lease)
	switch {
	case err == nil:
		r.released.Add(1)
		return true
	case errors.Is(err, ErrClosed):
		r.dropped.Add(1)
		return true
	}
	return false
}
