package limiter_test

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemgate/idemgate/limiter"
)

// addrN returns the n-th of many distinct client blocks: IPv4 addresses for
// even n, IPv6 /64s for odd n.
func addrN(n uint32) limiter.Key {
	if n%2 == 0 {
		return limiter.Bucket(netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}))
	}
	return limiter.Bucket(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), 15: 1}))
}

// TestFloodStaysBounded sends one request from each of 1,000,000 distinct
// clients and checks that the limiter never tracks more than MaxClients, and
// that a saturated client stays limited through the flood.
func TestFloodStaysBounded(t *testing.T) {
	t.Parallel()
	const maxClients = 65_536
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	tests := []struct {
		name          string
		step          time.Duration // between flood requests
		wantEvictions bool
	}{
		// Time stands still: nothing becomes fresh, the limiter must evict,
		// and the one-request clients are closer to fresh than the victim.
		{"instant flood", 0, true},
		// One request per µs: each client is fresh 10 ms after its request,
		// so dropping fresh states is enough.
		{"flood at 1M/s", time.Microsecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newEdge(t, limiter.EdgeOptions{Rate: 100, Burst: 200, MaxClients: maxClients})
			victim := limiter.Bucket(mustAddr(t, "192.0.2.200"))
			burst(l, victim, t0, 201)
			at := t0
			for i := range n {
				at = at.Add(tt.step)
				if !l.Allow(addrN(uint32(i)+1<<28), at).OK {
					t.Fatalf("flood request %d refused; want passed (each client sends one)", i)
				}
				if i%65_536 == 0 {
					if got := l.Len(); got > maxClients {
						t.Fatalf("after %d flood requests the limiter tracks %d clients; want ≤ %d", i+1, got, maxClients)
					}
				}
			}
			if got := l.Len(); got > maxClients {
				t.Errorf("after the flood the limiter tracks %d clients; want ≤ %d", got, maxClients)
			}
			if got := l.Evictions() > 0; got != tt.wantEvictions {
				t.Errorf("evictions = %d; want > 0: %v", l.Evictions(), tt.wantEvictions)
			}
			// The victim's bucket is still there: at `at`, it has exactly the
			// tokens that came back since t0.
			want := int(at.Sub(t0) / (10 * time.Millisecond))
			if got := burst(l, victim, at, 400); got != want {
				t.Errorf("saturated victim after the flood: %d passed; want %d (not reset to 201)", got, want)
			}
		})
	}
}

func TestCapDropsFreshBeforeEvicting(t *testing.T) {
	t.Parallel()
	l := newEdge(t, limiter.EdgeOptions{Rate: 100, Burst: 200, MaxClients: 2}) // one shard of 2
	a, c, b, d := addrN(1), addrN(2), addrN(3), addrN(4)

	burst(l, a, t0, 201) // a: saturated, fresh at t0+2.01s
	l.Allow(c, t0)       // c: fresh at t0+10ms
	at := t0.Add(20 * time.Millisecond)
	l.Allow(b, at) // the limiter is full; c is fresh and is dropped
	if got := l.Evictions(); got != 0 {
		t.Errorf("evictions after dropping a fresh state = %d; want 0", got)
	}
	if got := l.Len(); got != 2 {
		t.Errorf("Len() = %d; want 2", got)
	}
	// Nothing is fresh now: a (2.01 s away) and b (10 ms away). d evicts b.
	l.Allow(d, at)
	if got := l.Evictions(); got != 1 {
		t.Errorf("evictions = %d; want 1", got)
	}
	if got := burst(l, a, at, 400); got != 2 {
		t.Errorf("saturated client after two newcomers: %d of 400 passed; want 2 (still limited)", got)
	}
	if got := l.Len(); got != 2 {
		t.Errorf("Len() = %d; want 2", got)
	}
}

func TestWindowCapEvictsClosestToFresh(t *testing.T) {
	t.Parallel()
	l := newRoute(t, limiter.RouteOptions{Algorithm: limiter.Window, Requests: 2, Per: time.Minute, Block: 10 * time.Minute, MaxClients: 3})
	blocked, recent, old := addrN(1), addrN(2), addrN(3)
	for range 3 {
		l.Allow(blocked, t0) // blocked until t0+10m
	}
	l.Allow(old, t0)                        // fresh at t0+1m
	l.Allow(recent, t0.Add(30*time.Second)) // fresh at t0+1m30s
	l.Allow(addrN(4), t0.Add(40*time.Second))
	if got := l.Evictions(); got != 1 {
		t.Errorf("evictions = %d; want 1", got)
	}
	if d := l.Allow(blocked, t0.Add(40*time.Second)); d.OK || d.RetryAfter != 9*time.Minute+20*time.Second {
		t.Errorf("blocked client after an eviction: %+v; want still blocked for 9m20s", d)
	}
	if d := l.Allow(recent, t0.Add(40*time.Second)); d.Remaining != 0 {
		t.Errorf("recent client after an eviction: Remaining %d; want 0 (kept)", d.Remaining)
	}
	if d := l.Allow(old, t0.Add(40*time.Second)); d.Remaining != 1 {
		t.Errorf("old client after an eviction: Remaining %d; want 1 (evicted, started afresh)", d.Remaining)
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		l    *limiter.Limiter
		busy time.Duration // how long a 1-request client stays not fresh
	}{
		{"edge", newEdge(t, limiter.EdgeOptions{Rate: 100, Burst: 200}), 10 * time.Millisecond},
		{"token bucket", newRoute(t, limiter.RouteOptions{Requests: 10, Per: time.Second}), 100 * time.Millisecond},
		{"window", newRoute(t, limiter.RouteOptions{Algorithm: limiter.Window, Requests: 10, Per: time.Second}), time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for i := range 1000 {
				tt.l.Allow(addrN(uint32(i)), t0.Add(time.Duration(i)*time.Microsecond))
			}
			if got := tt.l.Sweep(t0.Add(tt.busy)); got != 1 {
				t.Errorf("Sweep at +%v dropped %d; want 1 (only the first client is fresh)", tt.busy, got)
			}
			if got := tt.l.Sweep(t0.Add(tt.busy + time.Millisecond)); got != 999 {
				t.Errorf("Sweep 1 ms later dropped %d; want 999", got)
			}
			if got := tt.l.Len(); got != 0 {
				t.Errorf("Len() after the sweeps = %d; want 0", got)
			}
		})
	}
}

func TestSweeperGoroutine(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l, err := limiter.NewRoute(limiter.RouteOptions{Algorithm: limiter.Window, Requests: 10, Per: time.Second, SweepInterval: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		l.Allow(clientA, time.Now())
		time.Sleep(30 * time.Second) // the fake clock of the bubble
		synctest.Wait()
		if got := l.Len(); got != 1 {
			t.Errorf("Len() before the first sweep = %d; want 1", got)
		}
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if got := l.Len(); got != 0 {
			t.Errorf("Len() after the first sweep = %d; want 0", got)
		}
		for range 2 {
			if err := l.Close(); err != nil {
				t.Errorf("Close() = %v; want nil", err)
			}
		}
		if !l.Allow(clientA, time.Now()).OK {
			t.Error("Allow after Close refused; want passed")
		}
	})
}

// TestAllocs is not parallel: testing.AllocsPerRun refuses to run beside
// parallel tests.
func TestAllocs(t *testing.T) {
	tests := []struct {
		name string
		l    *limiter.Limiter
	}{
		{"edge", newEdge(t, limiter.EdgeOptions{Rate: 100, Burst: 200})},
		{"token bucket", newRoute(t, limiter.RouteOptions{Requests: 600, Per: time.Minute})},
		{"window", newRoute(t, limiter.RouteOptions{Algorithm: limiter.Window, Requests: 600, Per: time.Minute})},
	}
	for _, tt := range tests {
		at := t0
		for range 100 { // grow the window's log to its working size
			tt.l.Allow(clientA, at)
		}
		got := testing.AllocsPerRun(1000, func() {
			at = at.Add(time.Second)
			tt.l.Allow(clientA, at)
		})
		if got != 0 {
			t.Errorf("%s: %v allocations per decision for a tracked client; want 0", tt.name, got)
		}
	}
}

// TestConcurrentExact checks that concurrent callers share one budget exactly.
func TestConcurrentExact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		l    *limiter.Limiter
		want int64
	}{
		{"edge", newEdge(t, limiter.EdgeOptions{Rate: 100, Burst: 200}), 201},
		{"token bucket", newRoute(t, limiter.RouteOptions{Requests: 600, Per: time.Minute}), 600},
		{"window", newRoute(t, limiter.RouteOptions{Algorithm: limiter.Window, Requests: 600, Per: time.Minute}), 600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var passed atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for i := range 200 {
						if tt.l.Allow(clientA, t0).OK {
							passed.Add(1)
						}
						tt.l.Allow(addrN(uint32(i)), t0) // other clients meanwhile
					}
				})
			}
			wg.Wait()
			if got := passed.Load(); got != tt.want {
				t.Errorf("8 goroutines × 200 requests at one instant: %d passed; want %d", got, tt.want)
			}
		})
	}
}
