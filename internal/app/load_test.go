package app

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A load is workers goroutines calling send one request after another
// (every > 0: at most one per tick of every each) until stopped, counting
// the requests and the failures (send reports ok false, and what it got).
// The reload-under-load tests run their traffic with it.
type load struct {
	start        time.Time
	stopc        chan struct{}
	wg           sync.WaitGroup
	sent, failed atomic.Int64
	first        atomic.Pointer[string]
}

func startLoad(workers int, every time.Duration, send func(w, i int) (ok bool, got string)) *load {
	l := &load{start: time.Now(), stopc: make(chan struct{})}
	for w := range workers {
		l.wg.Go(func() {
			one := func(i int) {
				ok, got := send(w, i)
				l.sent.Add(1)
				if !ok {
					l.failed.Add(1)
					l.first.CompareAndSwap(nil, &got)
				}
			}
			if every > 0 {
				everyTick(l.stopc, every, one)
				return
			}
			for i := 0; ; i++ {
				select {
				case <-l.stopc:
					return
				default:
				}
				one(i)
			}
		})
	}
	return l
}

// stop ends the load, logs its rate, and fails t if any request failed.
func (l *load) stop(t *testing.T, what string) {
	t.Helper()
	close(l.stopc)
	l.wg.Wait()
	took := time.Since(l.start)
	t.Logf("%d %s in %v (%.0f/s)", l.sent.Load(), what, took.Round(time.Millisecond), float64(l.sent.Load())/took.Seconds())
	if n := l.failed.Load(); n > 0 {
		t.Errorf("%d of %d %s failed; the first: %s", n, l.sent.Load(), what, *l.first.Load())
	}
}

// everyTick calls f(0), f(1), ... at each tick of every until stop closes.
func everyTick(stop <-chan struct{}, every time.Duration, f func(i int)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		f(i)
	}
}
