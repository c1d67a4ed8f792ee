package app

import (
	"context"
	"log/slog"
	"time"
)

// Reconcile probes (DESIGN.md, Unknown outcomes, 3): the proxy sends a
// record's first probe when the record becomes unknown; this loop sends
// the next ones. Every half of the shortest `every` of the routes'
// probes it lists the store's unknown records (at most reconcileLimit,
// the oldest) and has the proxy probe those whose probe lease is free: a
// record is probed every `every` to 1.5 × `every`, by one replica at a
// time.

// reconcileLimit bounds the unknown records one round lists.
const reconcileLimit = 1000

// reconcileIdle is how often the loop looks again when no route has a
// probe (a reload may add one).
const reconcileIdle = 10 * time.Second

// reconciler is what the loop needs of the proxy.
type reconciler interface {
	ReconcileEvery() time.Duration
	ReconcileUnknown(ctx context.Context, limit int) (int, error)
}

// reconcileInterval is the time between two rounds for the shortest
// every (0: no route has a probe).
func reconcileInterval(every time.Duration) time.Duration {
	if every <= 0 {
		return reconcileIdle
	}
	return max(every/2, 500*time.Millisecond)
}

// runReconcile runs rounds of probes until ctx ends. after is the clock's
// timer (time.After in production; tests drive it).
func runReconcile(ctx context.Context, p reconciler, after func(time.Duration) <-chan time.Time, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-after(reconcileInterval(p.ReconcileEvery())):
		}
		if p.ReconcileEvery() == 0 {
			continue
		}
		if _, err := p.ReconcileUnknown(ctx, reconcileLimit); err != nil && ctx.Err() == nil {
			log.Warn("listing unknown records for their reconcile probes failed", "error", err)
		}
	}
}
