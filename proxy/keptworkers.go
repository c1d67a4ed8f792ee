package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// keptWorkers runs kept calls (late.go) on goroutines that serve one call
// after another (issue 31). A new goroutine starts with a small stack and
// grows it to ReverseProxy's depth, copying it at each step, for every
// call; a worker grows it once. At most maxIdle workers wait for work, the
// one that waited least taken first, and the idle ones exit when an
// interval (idleFor) passed in which no call was handed to a worker: a
// process whose keyed writes stop keeps no goroutines of them for long
// (goleak in tests that never Close a Proxy).
type keptWorkers struct {
	run     func(*lateCall) // [Proxy.runKept]
	maxIdle int
	idleFor time.Duration
	reaper  *time.Timer  // runs reap
	started atomic.Int64 // workers started, for the tests
	mu      sync.Mutex   // protects the fields below
	idle    []*keptWorker
	used    bool // a call was handed to an idle worker since the last reap
	armed   bool // the reaper's timer is set
}

// keptWorker is an idle worker's mailbox: the next call, or nil when it
// is retired.
type keptWorker struct{ calls chan *lateCall } // buffered: the sender never waits

func (kws *keptWorkers) init(run func(*lateCall), maxIdle int, idleFor time.Duration) {
	kws.run, kws.maxIdle, kws.idleFor = run, maxIdle, idleFor
	kws.reaper = time.AfterFunc(time.Hour, kws.reap)
	kws.reaper.Stop()
}

// start runs lc's call on an idle worker, or on a new one.
func (kws *keptWorkers) start(lc *lateCall) {
	kws.mu.Lock()
	if n := len(kws.idle); n > 0 {
		w := kws.idle[n-1]
		kws.idle[n-1] = nil
		kws.idle = kws.idle[:n-1]
		kws.used = true
		kws.mu.Unlock()
		w.calls <- lc
		return
	}
	kws.mu.Unlock()
	kws.started.Add(1)
	go kws.work(&keptWorker{calls: make(chan *lateCall, 1)}, lc)
}

// work runs lc's call, then those handed to w, until w is retired or
// maxIdle workers wait already.
func (kws *keptWorkers) work(w *keptWorker, lc *lateCall) {
	for lc != nil {
		kws.run(lc)
		kws.mu.Lock()
		if len(kws.idle) >= kws.maxIdle {
			kws.mu.Unlock()
			return
		}
		kws.idle = append(kws.idle, w)
		if !kws.armed {
			kws.armed = true
			kws.reaper.Reset(kws.idleFor)
		}
		kws.mu.Unlock()
		lc = <-w.calls
	}
}

// reap retires the idle workers when no call was handed to one since its
// last run, and runs again later while workers idle.
func (kws *keptWorkers) reap() {
	kws.mu.Lock()
	var retired []*keptWorker
	if !kws.used {
		retired, kws.idle = kws.idle, nil
	}
	kws.used = false
	kws.armed = len(kws.idle) > 0
	if kws.armed {
		kws.reaper.Reset(kws.idleFor)
	}
	kws.mu.Unlock()
	for _, w := range retired {
		w.calls <- nil
	}
}

// retire ends the workers idle now.
func (kws *keptWorkers) retire() {
	kws.mu.Lock()
	retired := kws.idle
	kws.idle = nil
	kws.mu.Unlock()
	for _, w := range retired {
		w.calls <- nil
	}
}

// idleCount returns how many workers wait for a call.
func (kws *keptWorkers) idleCount() int {
	kws.mu.Lock()
	defer kws.mu.Unlock()
	return len(kws.idle)
}
