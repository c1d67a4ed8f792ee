package proxy

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// renewer renews the leases of the claims of requests still running. A
// claim costs one timer, re-armed after each renewal, not a goroutine; the
// renewer tracks every claim so that Close can wait for them.
type renewer struct {
	store keystore.Store
	log   *slog.Logger
	now   func() time.Time
	wg    sync.WaitGroup // one per claim not yet stopped, and per background task
	// claims and tasks count what wg waits for, for the shutdown's log.
	claims, tasks atomic.Int64
	// stopped ends the background tasks at the shutdown deadline.
	stopped context.Context
	stop    context.CancelFunc
}

func (rn *renewer) init(s keystore.Store, log *slog.Logger, now func() time.Time) {
	rn.store, rn.log, rn.now = s, log, now
	rn.stopped, rn.stop = context.WithCancel(context.Background())
}

// leaseHandle is one claim's renewals.
type leaseHandle struct {
	rn              *renewer
	key             keystore.Key
	token           uint64
	lease, maxLease time.Duration
	every           time.Duration
	claimed         time.Time
	mu              sync.Mutex // protects stopped, timer and the renewing count
	stopped         bool
	timer           *time.Timer
	renewing        sync.WaitGroup
}

// start renews (key, token)'s lease every lease/3 until stop is called or
// maxLease has passed since the claim (DESIGN.md step 5).
func (rn *renewer) start(key keystore.Key, token uint64, lease, maxLease time.Duration) *leaseHandle {
	h := &leaseHandle{
		rn: rn, key: key, token: token, lease: lease, maxLease: maxLease,
		every:   max(lease/3, time.Millisecond),
		claimed: rn.now(),
	}
	rn.wg.Add(1)
	rn.claims.Add(1)
	h.mu.Lock()
	h.timer = time.AfterFunc(h.every, h.renew)
	h.mu.Unlock()
	return h
}

func (h *leaseHandle) renew() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.renewing.Add(1)
	h.mu.Unlock()
	defer h.renewing.Done()

	elapsed := h.rn.now().Sub(h.claimed)
	if elapsed >= h.maxLease {
		h.rn.log.Warn("request outlived max_lease; its claim is no longer renewed")
		return
	}
	// Never past max_lease from the claim.
	l := min(h.lease, h.maxLease-elapsed)
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	_, err := h.rn.store.Renew(ctx, h.key, h.token, l)
	cancel()
	switch {
	case errors.Is(err, keystore.ErrLeaseLost), errors.Is(err, keystore.ErrNotFound):
		h.rn.log.Warn("lease lost while the request ran", "error", err)
		return
	case err != nil:
		h.rn.log.Warn("lease renewal failed", "error", err)
	}
	h.mu.Lock()
	if !h.stopped {
		h.timer.Reset(h.every)
	}
	h.mu.Unlock()
}

// stop ends the renewals and waits for a renewal in progress, so that no
// renewal races the record's completion. The claim still counts for the
// renewer's close until finish.
func (h *leaseHandle) stop() {
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	h.mu.Unlock()
	h.renewing.Wait()
}

// finish ends the claim's part in the renewer, after its record: work the
// record left behind was handed to background while the claim still
// counted, so that the renewer's WaitGroup never goes from zero to one
// while close waits on it (a panic, seen when a shutdown met a completion
// that failed).
func (h *leaseHandle) finish() {
	h.rn.claims.Add(-1)
	h.rn.wg.Done()
}

// background runs f in a goroutine the renewer owns: work a claim leaves
// behind when its request is over (retrying a failed completion). The
// caller must hold a claim (not yet finished), so that the WaitGroup is
// not at zero. f must return soon after stop is done (the shutdown's
// deadline passed).
func (rn *renewer) background(f func(stop context.Context)) {
	rn.wg.Add(1)
	rn.tasks.Add(1)
	go func() {
		defer rn.wg.Done()
		defer rn.tasks.Add(-1)
		f(rn.stopped)
	}()
}

// close waits until every claim's renewals and background work have
// stopped, or ctx ends: then it stops the background work and returns at
// once, with the number of background tasks and of claims of requests that
// were still running.
func (rn *renewer) close(ctx context.Context) (tasks, claims int64) {
	done := make(chan struct{})
	go func() {
		rn.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		rn.stop()
		return 0, 0
	case <-ctx.Done():
		tasks, claims = rn.tasks.Load(), rn.claims.Load()
		rn.stop()
		return tasks, claims
	}
}
