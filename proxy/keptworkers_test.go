package proxy

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// newTestWorkers returns a pool whose reaper runs only when a test calls
// reap, and whose workers are retired when the test ends.
func newTestWorkers(t *testing.T, maxIdle int, run func(*lateCall)) *keptWorkers {
	kws := new(keptWorkers)
	kws.init(run, maxIdle, time.Hour)
	t.Cleanup(func() {
		kws.reaper.Stop()
		waitIdle(t, kws, 0, kws.retire)
	})
	return kws
}

// waitIdle calls poke until kws has want idle workers.
func waitIdle(t *testing.T, kws *keptWorkers, want int, poke func()) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for kws.idleCount() != want {
		if time.Now().After(deadline) {
			t.Fatalf("idle workers = %d; want %d", kws.idleCount(), want)
		}
		poke()
		time.Sleep(time.Millisecond)
	}
}

// TestKeptWorkersReuse: calls handed out one after another run on one
// worker, each exactly once.
func TestKeptWorkersReuse(t *testing.T) {
	const calls = 100
	ran := make(map[*lateCall]int)
	var mu sync.Mutex
	kws := newTestWorkers(t, 4, func(lc *lateCall) {
		mu.Lock()
		ran[lc]++
		mu.Unlock()
	})
	for range calls {
		kws.start(new(lateCall))
		waitIdle(t, kws, 1, func() {})
	}
	if got := kws.started.Load(); got != 1 {
		t.Errorf("workers started = %d; want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != calls {
		t.Errorf("%d calls ran; want %d", len(ran), calls)
	}
	for _, n := range ran {
		if n != 1 {
			t.Errorf("a call ran %d times; want 1", n)
		}
	}
}

// TestKeptWorkersBound: calls running at once each get a worker of their
// own; when they are over, maxIdle of the workers wait and the others
// exit; a reap with no call handed out since the last retires them all,
// one after a call was handed out none.
func TestKeptWorkersBound(t *testing.T) {
	const calls, maxIdle = 50, 8
	release := make(chan struct{})
	var running, done sync.WaitGroup
	running.Add(calls)
	done.Add(calls)
	kws := newTestWorkers(t, maxIdle, func(*lateCall) {
		running.Done()
		<-release
		done.Done()
	})
	for range calls {
		kws.start(new(lateCall))
	}
	running.Wait()
	if got := kws.started.Load(); got != calls {
		t.Fatalf("workers started = %d; want %d (one per running call)", got, calls)
	}
	close(release)
	done.Wait()
	waitIdle(t, kws, maxIdle, func() {})

	// A call handed to a worker since the last reap: the workers stay.
	running.Add(1)
	done.Add(1)
	kws.start(new(lateCall))
	done.Wait()
	waitIdle(t, kws, maxIdle, func() {})
	if got := kws.started.Load(); got != calls {
		t.Errorf("workers started = %d; want %d (the call ran on an idle one)", got, calls)
	}
	kws.reap() // retires synchronously, or not at all
	if got := kws.idleCount(); got != maxIdle {
		t.Fatalf("idle workers after a reap that followed a call = %d; want %d", got, maxIdle)
	}
	// None since: the next reap retires them.
	kws.reap()
	if got := kws.idleCount(); got != 0 {
		t.Fatalf("idle workers after a reap with no call since the last = %d; want 0", got)
	}
}

// TestKeptWorkersReaper runs in a synctest bubble, on its fake clock: idle
// workers stay while calls are handed to them (one every half interval),
// and are retired within two intervals of the last; the bubble's end
// checks that they exited.
func TestKeptWorkersReaper(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const workers, idleFor = 3, 100 * time.Millisecond
		release := make(chan struct{})
		kws := new(keptWorkers)
		kws.init(func(lc *lateCall) {
			if lc.route == "held" {
				<-release
			}
		}, 8, idleFor)
		for range workers {
			kws.start(&lateCall{route: "held"})
		}
		synctest.Wait()
		close(release)
		synctest.Wait()
		if got := kws.idleCount(); got != workers {
			t.Fatalf("idle workers = %d; want %d", got, workers)
		}
		for range 10 {
			time.Sleep(idleFor / 2)
			kws.start(new(lateCall))
			synctest.Wait()
		}
		if got, n := kws.idleCount(), kws.started.Load(); got != workers || n != workers {
			t.Fatalf("while in use: idle workers = %d, started %d; want %d, %d", got, n, workers, workers)
		}
		time.Sleep(2*idleFor + time.Nanosecond)
		synctest.Wait()
		if got := kws.idleCount(); got != 0 {
			t.Fatalf("two intervals after the last call: idle workers = %d; want 0", got)
		}
	})
}
