package app

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

type fakeReconciler struct {
	every  atomic.Int64 // time.Duration
	rounds chan int     // each round's limit
}

func (f *fakeReconciler) ReconcileEvery() time.Duration { return time.Duration(f.every.Load()) }
func (f *fakeReconciler) ReconcileUnknown(_ context.Context, limit int) (int, error) {
	f.rounds <- limit
	return 0, nil
}

func TestReconcileInterval(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ every, want time.Duration }{
		{0, reconcileIdle}, {30 * time.Second, 15 * time.Second}, {time.Second, 500 * time.Millisecond}, {time.Hour, 30 * time.Minute},
	} {
		if got := reconcileInterval(c.every); got != c.want {
			t.Errorf("reconcileInterval(%v) = %v; want %v", c.every, got, c.want)
		}
	}
}

// TestRunReconcile: the loop waits half the shortest every between rounds
// (the timer is driven by the test), runs no round while no route has a
// probe, and stops with its context.
func TestRunReconcile(t *testing.T) {
	t.Parallel()
	f := &fakeReconciler{rounds: make(chan int, 10)}
	waits := make(chan time.Duration, 10)
	fire := make(chan time.Time)
	after := func(d time.Duration) <-chan time.Time { waits <- d; return fire }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		runReconcile(ctx, f, after, slog.New(slog.DiscardHandler))
		close(done)
	}()
	if d := <-waits; d != reconcileIdle {
		t.Fatalf("wait without probes = %v; want %v", d, reconcileIdle)
	}
	fire <- time.Time{}
	if d := <-waits; d != reconcileIdle {
		t.Fatalf("second wait = %v; want %v", d, reconcileIdle)
	}
	if n := len(f.rounds); n != 0 {
		t.Fatalf("%d rounds without probes; want 0", n)
	}
	f.every.Store(int64(20 * time.Second))
	fire <- time.Time{}
	if limit := <-f.rounds; limit != reconcileLimit {
		t.Errorf("round limit = %d; want %d", limit, reconcileLimit)
	}
	if d := <-waits; d != 10*time.Second {
		t.Errorf("wait with every 20s = %v; want 10s", d)
	}
	fire <- time.Time{}
	<-f.rounds
	<-waits
	cancel()
	<-done
}
