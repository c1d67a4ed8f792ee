package proxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// Waiting for the original (DESIGN.md): with in_progress: wait, a
// duplicate of a running request does not get 409 at once. It waits, holding
// no claim and no session turn (this runs in the claim stage, before the
// session turn), for a completion notice or its next jittered poll, and then
// asks the store again with the same Reserve the claim stage made: completed
// → replay, completed too large → 409 too_large, another fingerprint →
// key_reused, released, vanished or its lease ended → the Reserve claims it
// (one waiter wins and runs; the others find it running and wait on, under
// the same deadline). The claim stage answers whatever the last Reserve
// said, so every transition is the claim stage's own rule.

// waitPoll is the mean interval of a waiter's poll, the fallback for lost
// notices and for changes nobody announces (a lease that ended, an
// operator's release). Each wait is jittered by ±50%.
const waitPoll = time.Second

// waiters counts the waiters per key in this process.
type waiters struct {
	mu sync.Mutex
	n  map[keystore.Key]int
}

// enter admits one more waiter on key, unless depth wait already.
func (ws *waiters) enter(key keystore.Key, depth int) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.n == nil {
		ws.n = make(map[keystore.Key]int)
	}
	if ws.n[key] >= depth {
		return false
	}
	ws.n[key]++
	return true
}

func (ws *waiters) leave(key keystore.Key) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.n[key]--; ws.n[key] <= 0 {
		delete(ws.n, key)
	}
}

// waitOriginal waits while reserve reports the key in flight, up to the
// route's wait_timeout, and returns the last answer of reserve: the claim
// stage answers it (an ErrInFlight still is the 409). A waiter over the
// per-key cap gets ErrInFlight at once; a waiter whose client left gets the
// context's error.
func (p *Proxy) waitOriginal(r *http.Request, sk keystore.Key, reserve func() (keystore.Reservation, error)) (keystore.Reservation, error) {
	ex := exchangeOf(r)
	depth := ex.snap.idem.MaxWaiters
	if depth <= 0 || !p.waiters.enter(sk, depth) {
		return keystore.Reservation{}, keystore.ErrInFlight
	}
	defer p.waiters.leave(sk)
	notices, stop := p.deps.Notices.Watch(sk)
	defer stop()
	start := time.Now()
	defer func() { ex.waited = time.Since(start) }()
	ctx, cancel := context.WithTimeout(r.Context(), ex.route.waitTimeout)
	defer cancel()
	poll := time.NewTimer(jitter(waitPoll))
	defer poll.Stop()
	last := error(keystore.ErrInFlight)
	for {
		select {
		case <-ctx.Done():
			if err := r.Context().Err(); err != nil {
				return keystore.Reservation{}, err // the client left
			}
			return keystore.Reservation{}, last
		case <-notices:
		case <-poll.C:
			poll.Reset(jitter(waitPoll))
		}
		res, err := reserve()
		p.markedLapsed(r, sk, err) // unknown.go
		switch {
		case err == nil, errors.Is(err, keystore.ErrFingerprintMismatch), errors.Is(err, keystore.ErrOutcomeUnknown), r.Context().Err() != nil:
			return res, err
		case !errors.Is(err, keystore.ErrInFlight):
			// The store failed: the key may well still be running. Look
			// again at the next poll; if the wait ends first, the claim
			// stage answers this error (503).
			p.log.Warn("idempotency store failed while waiting for the original", "error", err, logRequestID, ex.id)
		}
		last = err
	}
}

// jitter returns d ± 50%.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// notify announces that sk's record was completed or released, for the
// waiters of this and (with a shared Notices) every other process.
func (p *Proxy) notify(sk keystore.Key) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := p.deps.Notices.Publish(ctx, sk); err != nil {
		p.log.Warn("publishing a completion notice failed; waiters will poll", "error", err)
	}
}
