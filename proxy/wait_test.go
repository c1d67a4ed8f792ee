package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/modes"
	itestutil "github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// waitProxy is a test proxy whose routes wait for the original.
func waitProxy(t *testing.T, up string, depth int, timeout time.Duration) *testProxy {
	return newTestProxy(t, up, func(o *Options, _ *memstore.Options) {
		o.Idempotency.InProgress = modes.InProgressWait
		o.Idempotency.MaxWaiters = depth
		o.Idempotency.WaitTimeout = timeout
	})
}

// slowUpstream answers after d, with the execution number in the body.
func slowUpstream(t *testing.T, d time.Duration, status func(n int) int) *upstream {
	up := newUpstream(t)
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		time.Sleep(d)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status(n))
		fmt.Fprintf(w, `{"execution":%d,"key":%q}`, n, r.Header.Get("Idempotency-Key"))
	}
	return up
}

func created(int) int { return http.StatusCreated }

// The proof of issue 16: 50 keys × 20 duplicates sent while the originals
// run for 300 ms; every duplicate gets its original's byte-identical answer
// with Idempotent-Replayed, none gets 409, and the upstream runs 50 times.
func TestWaitDuplicatesGetTheOriginalsAnswer(t *testing.T) {
	up := slowUpstream(t, 300*time.Millisecond, created)
	tp := waitProxy(t, up.URL, 20, 10*time.Second)
	const keys, dups = 50, 20
	originals := make([]result, keys)
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() { originals[k] = tp.do(t, "POST", "/ucp/v1/carts", fmt.Sprint("key-", k), `{"a":1}`) })
	}
	itestutil.Eventually(t, 5*time.Second, "50 originals to reach the upstream", func() bool { return up.total.Load() == keys })
	got := make([][]result, keys)
	for k := range keys {
		got[k] = make([]result, dups)
		for d := range dups {
			wg.Go(func() { got[k][d] = tp.do(t, "POST", "/ucp/v1/carts", fmt.Sprint("key-", k), `{"a":1}`) })
		}
	}
	wg.Wait()
	conflicts := 0
	for k := range keys {
		if originals[k].status != http.StatusCreated || originals[k].header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("original %d = %v", k, originals[k])
		}
		for d, r := range got[k] {
			if r.status == http.StatusConflict {
				conflicts++
				continue
			}
			if r.status != http.StatusCreated || !bytes.Equal(r.body, originals[k].body) || r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("key %d duplicate %d = %v %v, want the original's %v replayed", k, d, r, r.header, originals[k])
			}
		}
	}
	if conflicts != 0 || up.total.Load() != keys {
		t.Errorf("%d duplicates got 409 and the upstream ran %d times; want 0 and %d", conflicts, up.total.Load(), keys)
	}
	if !strings.Contains(tp.logs.String(), `"waited_ms":`) {
		t.Error("no access-log line has waited_ms")
	}
}

func TestWaitPastWaitTimeoutIs409(t *testing.T) {
	up := slowUpstream(t, 600*time.Millisecond, created)
	tp := waitProxy(t, up.URL, 4, 100*time.Millisecond)
	done := make(chan result)
	go func() { done <- tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`) }()
	itestutil.Eventually(t, 5*time.Second, "the original", func() bool { return up.total.Load() == 1 })
	start := time.Now()
	r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
	if problemCode(t, r) != "idempotency_in_progress" || r.header.Get("Retry-After") != "2" {
		t.Errorf("waiter past wait_timeout = %v, want 409 idempotency_in_progress", r)
	}
	if el := time.Since(start); el < 100*time.Millisecond || el > 500*time.Millisecond {
		t.Errorf("the 409 came after %v; want it at the 100ms wait_timeout", el)
	}
	if o := <-done; o.status != http.StatusCreated {
		t.Errorf("original = %v", o)
	}
}

// An original released by its status (503) lets exactly one waiter claim
// the key and run; the other waiters get that waiter's answer.
func TestWaitReleasedOriginalLetsOneWaiterRun(t *testing.T) {
	up := slowUpstream(t, 200*time.Millisecond, func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusCreated
	})
	tp := waitProxy(t, up.URL, 8, 5*time.Second)
	var wg sync.WaitGroup
	var orig result
	wg.Go(func() { orig = tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`) })
	itestutil.Eventually(t, 5*time.Second, "the original", func() bool { return up.total.Load() == 1 })
	const n = 8
	got := make([]result, n)
	for i := range n {
		wg.Go(func() { got[i] = tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`) })
	}
	wg.Wait()
	if orig.status != http.StatusServiceUnavailable {
		t.Fatalf("original = %v", orig)
	}
	ran, replayed := 0, 0
	for _, r := range got {
		switch {
		case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "":
			ran++
		case r.status == http.StatusCreated:
			replayed++
		default:
			t.Errorf("waiter = %v", r)
		}
	}
	if ran != 1 || replayed != n-1 || up.total.Load() != 2 {
		t.Errorf("%d waiters ran, %d replayed, upstream ran %d times; want 1, %d, 2", ran, replayed, up.total.Load(), n-1)
	}
}

// Beyond queue_depth waiters per key, a duplicate gets 409 at once; a
// waiter whose client hangs up leaves its place.
func TestMaxWaitersAndHangUp(t *testing.T) {
	up := slowUpstream(t, 800*time.Millisecond, created)
	tp := waitProxy(t, up.URL, 2, 5*time.Second)
	orig := make(chan result, 1)
	go func() { orig <- tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`) }()
	defer func() { <-orig }()
	itestutil.Eventually(t, 5*time.Second, "the original", func() bool { return up.total.Load() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Bool
	for range 2 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", tp.URL+"/ucp/v1/carts", strings.NewReader(`{}`))
			req.Header.Set("Idempotency-Key", "k")
			req.Header.Set("Content-Type", "application/json")
			if res, err := tp.Client().Do(req); err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			left.Store(true)
		}()
	}
	waiting := func() int {
		tp.p.waiters.mu.Lock()
		defer tp.p.waiters.mu.Unlock()
		return sum(tp.p.waiters.n)
	}
	itestutil.Eventually(t, 5*time.Second, "2 waiters", func() bool { return waiting() == 2 })
	start := time.Now()
	if r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`); problemCode(t, r) != "idempotency_in_progress" || time.Since(start) > 200*time.Millisecond {
		t.Errorf("third duplicate = %v after %v; want 409 at once", r, time.Since(start))
	}
	cancel()
	itestutil.Eventually(t, 5*time.Second, "the waiters to leave", func() bool { return waiting() == 0 })
	if tp.p.deps.Notices.(interface{ Watched() int }).Watched() != 0 {
		t.Error("a watch outlived its waiter")
	}
}

func sum[K comparable](m map[K]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// An original whose answer was too large to store: its waiters get 409
// idempotency_response_too_large.
func TestWaitTooLargeOriginal(t *testing.T) {
	up := slowUpstream(t, 200*time.Millisecond, created)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Idempotency.InProgress = modes.InProgressWait
		o.Idempotency.MaxResponseBytes = 8
	})
	orig := make(chan result, 1)
	go func() { orig <- tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`) }()
	defer func() { <-orig }()
	itestutil.Eventually(t, 5*time.Second, "the original", func() bool { return up.total.Load() == 1 })
	if r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`); problemCode(t, r) != "idempotency_response_too_large" {
		t.Errorf("waiter = %v, want 409 idempotency_response_too_large", r)
	}
}

// TestMaxWaiters: with the default max_waiters (64, its own key, no longer
// sessions.queue_depth), 10 and then 64 duplicates of a running write all
// wait and get the original's answer; the 65th gets 409 at once.
func TestMaxWaiters(t *testing.T) {
	for _, n := range []int{10, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			release := make(chan struct{})
			up := newUpstream(t)
			up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
				<-release
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"execution":%d}`, n)
			}
			tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
				o.Idempotency.InProgress = modes.InProgressWait
				o.Idempotency.WaitTimeout = time.Minute
			})
			var once sync.Once
			unblock := func() { once.Do(func() { close(release) }) }
			t.Cleanup(unblock) // before the servers close, even after a failure
			waiting := func() int {
				tp.p.waiters.mu.Lock()
				defer tp.p.waiters.mu.Unlock()
				return sum(tp.p.waiters.n)
			}
			var wg sync.WaitGroup
			var orig result
			wg.Go(func() { orig = tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`) })
			itestutil.Eventually(t, 5*time.Second, "the original", func() bool { return up.total.Load() == 1 })
			got := make([]result, n)
			for i := range n {
				wg.Go(func() { got[i] = tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`) })
			}
			itestutil.Eventually(t, 5*time.Second, fmt.Sprint(n, " waiters"), func() bool { return waiting() == n })
			if n == 64 {
				// The original is held until the 65th has its answer: it
				// can only be the 409 of a full line.
				if r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`); r.status != http.StatusConflict || problemCode(t, r) != "idempotency_in_progress" {
					t.Errorf("duplicate %d = %v; want 409 idempotency_in_progress at once", n+1, r)
				}
			}
			unblock()
			wg.Wait()
			if orig.status != http.StatusCreated {
				t.Fatalf("original = %v", orig)
			}
			for i, r := range got {
				if r.status != http.StatusCreated || !bytes.Equal(r.body, orig.body) || r.header.Get("Idempotent-Replayed") != "true" {
					t.Errorf("waiter %d = %v; want the original's %v replayed", i, r, orig)
				}
			}
			if m := up.total.Load(); m != 1 {
				t.Errorf("the upstream ran %d times; want 1", m)
			}
		})
	}
}
