package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// counters is a Metrics that counts, for the tests.
type counters struct {
	waiting   atomic.Int64
	turns     atomic.Int64 // waits that ended with a turn
	canceled  atomic.Int64
	full      atomic.Int64
	timeouts  atomic.Int64
	fallbacks atomic.Int64
}

func (c *counters) Waiting(d int) { c.waiting.Add(int64(d)) }
func (c *counters) Waited(_ time.Duration, r Result) {
	switch r {
	case ResultTurn:
		c.turns.Add(1)
	case ResultCanceled:
		c.canceled.Add(1)
	}
}
func (c *counters) Rejected(r Result) {
	switch r {
	case ResultFull:
		c.full.Add(1)
	case ResultTimeout:
		c.timeouts.Add(1)
	}
}
func (c *counters) Fallback() { c.fallbacks.Add(1) }

func newQueue(t *testing.T, depth int, timeout time.Duration, m Metrics) *Queue {
	t.Helper()
	q, err := New(Options{QueueDepth: depth, QueueTimeout: timeout, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestFIFOAndOverflow: one holder, QueueDepth waiters served in arrival
// order by direct hand-off, and the next arrival refused at once.
func TestFIFOAndOverflow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := &counters{}
		q := newQueue(t, 4, time.Minute, m)
		k := NewKey("cart", "c1")
		first, err := q.Acquire(t.Context(), k)
		if err != nil {
			t.Fatalf("first Acquire = %v", err)
		}
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		for i := 1; i <= 4; i++ {
			wg.Go(func() {
				turn, err := q.Acquire(t.Context(), k)
				if err != nil {
					t.Errorf("waiter %d: Acquire = %v", i, err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				turn.End()
			})
			synctest.Wait() // waiter i is in line before i+1 arrives
		}
		if got := m.waiting.Load(); got != 4 {
			t.Fatalf("waiting = %d; want 4", got)
		}
		if _, err := q.Acquire(t.Context(), k); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("6th Acquire = %v; want ErrQueueFull", err)
		}
		// Another session is not affected.
		other, err := q.Acquire(t.Context(), NewKey("cart", "c2"))
		if err != nil {
			t.Fatalf("other session: Acquire = %v", err)
		}
		other.End()
		first.End()
		first.End() // a second End does nothing
		wg.Wait()
		if fmt.Sprint(order) != "[1 2 3 4]" {
			t.Errorf("turn order = %v; want [1 2 3 4]", order)
		}
		if got := m.full.Load(); got != 1 {
			t.Errorf("rejected full = %d; want 1", got)
		}
		if got, turns := m.waiting.Load(), m.turns.Load(); got != 0 || turns != 4 {
			t.Errorf("waiting = %d, turns after a wait = %d; want 0, 4", got, turns)
		}
		if n := q.Sessions(); n != 0 {
			t.Errorf("sessions left = %d; want 0 (empty lines are removed)", n)
		}
	})
}

// TestQueueTimeout: a waiter not handed the turn within QueueTimeout gets
// ErrTimeout, exactly then, and leaves the line.
func TestQueueTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := &counters{}
		q := newQueue(t, 1, 30*time.Second, m)
		k := NewKey("c")
		held, err := q.Acquire(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = q.Acquire(t.Context(), k)
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Acquire = %v; want ErrTimeout", err)
		}
		if d := time.Since(start); d != 30*time.Second {
			t.Errorf("timed out after %v; want exactly 30s", d)
		}
		if m.timeouts.Load() != 1 || m.waiting.Load() != 0 {
			t.Errorf("timeouts = %d, waiting = %d; want 1, 0", m.timeouts.Load(), m.waiting.Load())
		}
		// The line has room again: a new waiter joins and gets the turn.
		done := make(chan error, 1)
		go func() {
			turn, err := q.Acquire(t.Context(), k)
			if err == nil {
				turn.End()
			}
			done <- err
		}()
		synctest.Wait()
		held.End()
		if err := <-done; err != nil {
			t.Errorf("waiter after the timeout: Acquire = %v", err)
		}
		if n := q.Sessions(); n != 0 {
			t.Errorf("sessions left = %d; want 0", n)
		}
	})
}

// TestAcquireUntil: a wait ends with ErrTimeout at the request's own
// deadline or at QueueTimeout, whichever comes first (a keyed write's route
// timeout counts from its arrival, DESIGN.md step 6).
func TestAcquireUntil(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		deadline time.Duration // from the wait's start; 0: none
		want     time.Duration
	}{
		{"deadline first", 2 * time.Second, 2 * time.Second},
		{"queue timeout first", time.Minute, 30 * time.Second},
		{"no deadline", 0, 30 * time.Second},
		{"deadline passed", -time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := &counters{}
				q := newQueue(t, 1, 30*time.Second, m)
				k := NewKey("c")
				held, err := q.Acquire(t.Context(), k)
				if err != nil {
					t.Fatal(err)
				}
				defer held.End()
				start := time.Now()
				var deadline time.Time
				if tc.deadline != 0 {
					deadline = start.Add(tc.deadline)
				}
				if _, err := q.AcquireUntil(t.Context(), k, deadline); !errors.Is(err, ErrTimeout) {
					t.Fatalf("AcquireUntil = %v; want ErrTimeout", err)
				}
				if d := time.Since(start); d != tc.want {
					t.Errorf("timed out after %v; want exactly %v", d, tc.want)
				}
				if m.timeouts.Load() != 1 || m.waiting.Load() != 0 {
					t.Errorf("timeouts = %d, waiting = %d; want 1, 0", m.timeouts.Load(), m.waiting.Load())
				}
			})
		})
	}
}

// TestCancelLeavesLine: a waiter whose context ends leaves the line at
// once; the turn skips it.
func TestCancelLeavesLine(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := &counters{}
		q := newQueue(t, 1, time.Minute, m)
		k := NewKey("c")
		held, err := q.Acquire(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		gone := make(chan error, 1)
		go func() {
			_, err := q.Acquire(ctx, k)
			gone <- err
		}()
		synctest.Wait()
		if _, err := q.Acquire(t.Context(), k); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("with the line full: Acquire = %v; want ErrQueueFull", err)
		}
		cancel()
		if err := <-gone; !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled waiter: Acquire = %v; want context.Canceled", err)
		}
		next := make(chan error, 1)
		go func() {
			turn, err := q.Acquire(t.Context(), k)
			if err == nil {
				turn.End()
			}
			next <- err
		}()
		synctest.Wait()
		held.End()
		if err := <-next; err != nil {
			t.Errorf("next waiter: Acquire = %v", err)
		}
		if m.canceled.Load() != 1 || m.waiting.Load() != 0 || q.Sessions() != 0 {
			t.Errorf("canceled = %d, waiting = %d, sessions = %d; want 1, 0, 0", m.canceled.Load(), m.waiting.Load(), q.Sessions())
		}
		// An already-ended context takes no turn.
		if _, err := q.Acquire(ctx, k); !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire with an ended context = %v; want context.Canceled", err)
		}
	})
}

// TestHandOffAtDeadline: the holder releases at the very instant the
// waiter's deadline passes. Whichever wins, the turn is never lost: the
// next request gets it and nothing is left behind.
func TestHandOffAtDeadline(t *testing.T) {
	t.Parallel()
	for i := range 50 {
		synctest.Test(t, func(t *testing.T) {
			q := newQueue(t, 2, time.Second, nil)
			k := NewKey("c")
			held, err := q.Acquire(t.Context(), k)
			if err != nil {
				t.Fatal(err)
			}
			res := make(chan error, 1)
			go func() {
				turn, err := q.Acquire(t.Context(), k)
				if err == nil {
					turn.End()
				}
				res <- err
			}()
			synctest.Wait()
			time.Sleep(time.Second) // fake time: the deadline instant
			held.End()
			if err := <-res; err != nil && !errors.Is(err, ErrTimeout) {
				t.Fatalf("run %d: waiter = %v; want a turn or ErrTimeout", i, err)
			}
			turn, err := q.Acquire(t.Context(), k)
			if err != nil {
				t.Fatalf("run %d: later Acquire = %v; the turn was lost", i, err)
			}
			turn.End()
			if n := q.Sessions(); n != 0 {
				t.Fatalf("run %d: sessions left = %d; want 0", i, n)
			}
		})
	}
}

// TestDepthZero: with QueueDepth 0 nobody waits.
func TestDepthZero(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 0, time.Second, nil)
	k := NewKey("c")
	held, err := q.Acquire(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Acquire(t.Context(), k); !errors.Is(err, ErrQueueFull) {
		t.Errorf("Acquire = %v; want ErrQueueFull", err)
	}
	held.End()
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		opts Options
		ok   bool
	}{
		{"defaults", Options{}, true},
		{"negative depth", Options{QueueDepth: -1}, false},
		{"negative timeout", Options{QueueTimeout: -time.Second}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.opts)
			if (err == nil) != tt.ok {
				t.Errorf("New(%+v) = %v; want ok %v", tt.opts, err, tt.ok)
			}
		})
	}
}

// brokenLocker is a Locker whose store is unreachable.
type brokenLocker struct{}

func (brokenLocker) Lock(context.Context, Key, func()) (Lock, error) {
	return nil, errors.New("dial tcp: connection refused")
}

// TestFallback: when the shared lock cannot be reached, the turn runs on
// the local queue alone, counted; the local order still holds.
func TestFallback(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := &counters{}
		q, err := New(Options{QueueDepth: 1, Locker: brokenLocker{}, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		k := NewKey("c")
		held, err := q.Acquire(t.Context(), k)
		if err != nil {
			t.Fatalf("Acquire = %v; want a fallback turn", err)
		}
		if f := held.Fence(); f != 0 {
			t.Errorf("fallback turn's fence = %d; want 0", f)
		}
		got := make(chan struct{})
		go func() {
			turn, err := q.Acquire(t.Context(), k)
			if err == nil {
				turn.End()
			}
			close(got)
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a second turn ran while the first was held")
		default:
		}
		held.End()
		<-got
		if n := m.fallbacks.Load(); n != 2 {
			t.Errorf("fallbacks = %d; want 2", n)
		}
	})
}

// TestManySessionsConcurrently runs 32 goroutines on each of 16 sessions
// (on real time, under -race): never two in one session at once, and every
// line is gone at the end.
func TestManySessionsConcurrently(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 64, 10*time.Second, nil)
	const sessions, per = 16, 32
	var active [sessions]atomic.Int32
	var wg sync.WaitGroup
	for s := range sessions {
		k := NewKey("c", fmt.Sprint(s))
		for range per {
			wg.Go(func() {
				turn, err := q.Acquire(t.Context(), k)
				if err != nil {
					t.Errorf("session %d: Acquire = %v", s, err)
					return
				}
				if n := active[s].Add(1); n != 1 {
					t.Errorf("session %d: %d turns at once", s, n)
				}
				active[s].Add(-1)
				turn.End()
			})
		}
	}
	wg.Wait()
	if n := q.Sessions(); n != 0 {
		t.Errorf("sessions left = %d; want 0", n)
	}
}

func TestNewKey(t *testing.T) {
	t.Parallel()
	if NewKey("ab", "c") == NewKey("a", "bc") {
		t.Error(`NewKey("ab", "c") == NewKey("a", "bc"); parts must be length-prefixed`)
	}
	if got := NewKey("x").String(); len(got) != 64 {
		t.Errorf("String() = %q; want 64 hex digits", got)
	}
}

// BenchmarkTurn is the cost of an uncontended turn in one process:
// Acquire and End of a session nobody else uses.
func BenchmarkTurn(b *testing.B) {
	q, err := New(Options{QueueDepth: 4})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		k := NewKey("bench")
		for b.Loop() {
			turn, err := q.Acquire(ctx, k)
			if err != nil {
				b.Fatal(err)
			}
			turn.End()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			k := NewKey("bench", fmt.Sprint(n.Add(1)))
			for pb.Next() {
				turn, err := q.Acquire(ctx, k)
				if err != nil {
					b.Error(err)
					return
				}
				turn.End()
			}
		})
	})
}

// TestOldest: Oldest lists the sessions whose turn is held, longest held
// first, at most n, with the requests waiting behind each; a turn handed to
// a waiter is held since the hand-off, and a released session is gone.
func TestOldest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		var now atomic.Int64 // seconds after t0
		q, err := New(Options{QueueDepth: 4, Now: func() time.Time { return t0.Add(time.Duration(now.Load()) * time.Second) }})
		if err != nil {
			t.Fatal(err)
		}
		keys := make([]Key, 5)
		turns := make([]*Turn, 5)
		for i, at := range []int64{30, 10, 40, 0, 20} { // key i taken at second at
			now.Store(at)
			keys[i] = NewKey("s", fmt.Sprint(i))
			if turns[i], err = q.Acquire(context.Background(), keys[i]); err != nil {
				t.Fatal(err)
			}
		}
		// Two requests wait behind key 3 (held since 0).
		done := make(chan *Turn, 2)
		for range 2 {
			go func() {
				turn, err := q.Acquire(context.Background(), keys[3])
				if err != nil {
					t.Error(err)
				}
				done <- turn
			}()
		}
		synctest.Wait()
		type row struct {
			key     Key
			since   int64
			waiting int
		}
		check := func(n int, want []row) {
			t.Helper()
			got := q.Oldest(n)
			if len(got) != len(want) {
				t.Fatalf("Oldest(%d) = %d sessions; want %d: %+v", n, len(got), len(want), got)
			}
			for i, w := range want {
				if got[i].Key != w.key || !got[i].Since.Equal(t0.Add(time.Duration(w.since)*time.Second)) || got[i].Waiting != w.waiting || got[i].Locking {
					t.Errorf("Oldest(%d)[%d] = %v since %v, %d waiting; want %v since +%ds, %d waiting", n, i, got[i].Key, got[i].Since, got[i].Waiting, w.key, w.since, w.waiting)
				}
			}
		}
		check(3, []row{{keys[3], 0, 2}, {keys[1], 10, 0}, {keys[4], 20, 0}})
		check(10, []row{{keys[3], 0, 2}, {keys[1], 10, 0}, {keys[4], 20, 0}, {keys[0], 30, 0}, {keys[2], 40, 0}})
		check(0, nil)
		// Key 3's turn goes to its first waiter at 50; key 1 is released.
		now.Store(50)
		turns[3].End()
		turns[1].End()
		next := <-done
		check(3, []row{{keys[4], 20, 0}, {keys[0], 30, 0}, {keys[2], 40, 0}})
		check(5, []row{{keys[4], 20, 0}, {keys[0], 30, 0}, {keys[2], 40, 0}, {keys[3], 50, 1}})
		next.End()
		(<-done).End()
		for _, i := range []int{0, 2, 4} {
			turns[i].End()
		}
		check(5, nil)
		if n := q.Sessions(); n != 0 {
			t.Errorf("Sessions = %d after every release; want 0", n)
		}
	})
}
