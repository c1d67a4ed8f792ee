package limiter_test

import (
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/limiter"
)

func benchLimiters(b *testing.B) []struct {
	name string
	l    *limiter.Limiter
} {
	return []struct {
		name string
		l    *limiter.Limiter
	}{
		{"edge", newEdge(b, limiter.EdgeOptions{Rate: 100, Burst: 200})},
		{"token_bucket", newRoute(b, limiter.RouteOptions{Requests: 600, Per: time.Minute})},
		{"window", newRoute(b, limiter.RouteOptions{Algorithm: limiter.Window, Requests: 600, Per: time.Minute})},
	}
}

// BenchmarkAllow measures decisions for tracked clients: each goroutine sends
// round-robin from its own 1,024 clients while its fake clock advances 1 ms
// per request, so that every client sends about one request a second (the
// window's logs hold about 60 entries).
func BenchmarkAllow(b *testing.B) {
	const clients = 1024
	for _, bb := range benchLimiters(b) {
		b.Run(bb.name, func(b *testing.B) {
			procs := runtime.GOMAXPROCS(0)
			keys := make([][]limiter.Key, procs)
			for p := range keys {
				for c := range clients {
					k := addrN(uint32(p*clients + c))
					keys[p] = append(keys[p], k)
					for s := range 64 { // warm up: the window's log reaches its size
						bb.l.Allow(k, t0.Add(time.Duration(s)*time.Second))
					}
				}
			}
			var next atomic.Int32
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				my := keys[int(next.Add(1)-1)%procs]
				at := t0.Add(64 * time.Second)
				for i := 0; pb.Next(); i++ {
					at = at.Add(time.Millisecond)
					bb.l.Allow(my[i%clients], at)
				}
			})
		})
	}
}

// BenchmarkAllowHotClient is the hot path for one busy client: every
// goroutine asks about the same key (one shard, one mutex).
func BenchmarkAllowHotClient(b *testing.B) {
	for _, bb := range benchLimiters(b) {
		b.Run(bb.name, func(b *testing.B) {
			k := limiter.Bucket(netip.MustParseAddr("198.51.100.1"))
			bb.l.Allow(k, t0)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				at := t0
				for pb.Next() {
					at = at.Add(time.Millisecond)
					bb.l.Allow(k, at)
				}
			})
		})
	}
}

// BenchmarkAllowNewClientAtCap measures the worst case of a flood: every
// request is a new client, the limiter is full and nothing in it is fresh.
func BenchmarkAllowNewClientAtCap(b *testing.B) {
	const maxClients = 65_536
	for _, alg := range []string{"edge", "window"} {
		b.Run(alg, func(b *testing.B) {
			var l *limiter.Limiter
			if alg == "edge" {
				l = newEdge(b, limiter.EdgeOptions{Rate: 100, Burst: 200, MaxClients: maxClients})
			} else {
				l = newRoute(b, limiter.RouteOptions{Algorithm: limiter.Window, Requests: 600, Per: time.Minute, MaxClients: maxClients})
			}
			for i := range maxClients {
				l.Allow(addrN(uint32(i)), t0)
			}
			var next atomic.Uint32
			next.Store(maxClients)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Allow(addrN(next.Add(1)), t0)
				}
			})
			b.StopTimer()
			if got := l.Len(); got > maxClients {
				b.Fatalf("Len() = %d; want ≤ %d", got, maxClients)
			}
		})
	}
}

// BenchmarkMemoryPerClient reports the heap bytes per tracked client in a
// limiter filled to MaxClients = 1,000,000.
func BenchmarkMemoryPerClient(b *testing.B) {
	const clients = 1_000_000
	tests := []struct {
		name     string
		new      func() (*limiter.Limiter, error)
		requests int // per client
		churn    bool
	}{
		{"edge", func() (*limiter.Limiter, error) {
			return limiter.NewEdge(limiter.EdgeOptions{Rate: 100, Burst: 200, MaxClients: clients})
		}, 1, false},
		{"token_bucket", func() (*limiter.Limiter, error) {
			return limiter.NewRoute(limiter.RouteOptions{Requests: 600, Per: time.Minute, MaxClients: clients})
		}, 1, false},
		{"window_1_request", func() (*limiter.Limiter, error) {
			return limiter.NewRoute(limiter.RouteOptions{Algorithm: limiter.Window, Requests: 600, Per: time.Minute, MaxClients: clients})
		}, 1, false},
		{"window_10_requests", func() (*limiter.Limiter, error) {
			return limiter.NewRoute(limiter.RouteOptions{Algorithm: limiter.Window, Requests: 600, Per: time.Minute, MaxClients: clients})
		}, 10, false},
		{"edge_after_churn", func() (*limiter.Limiter, error) {
			return limiter.NewEdge(limiter.EdgeOptions{Rate: 100, Burst: 200, MaxClients: clients})
		}, 1, true},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			var perClient float64
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				l, err := tt.new()
				if err != nil {
					b.Fatal(err)
				}
				n := clients
				if tt.churn {
					n *= 3 // then 2,000,000 more clients replace the first ones
				}
				for i := range n {
					k := addrN(uint32(i))
					for range tt.requests {
						l.Allow(k, t0)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				// A few shards fill up before the whole limiter does.
				n = l.Len()
				if n > clients || n < clients*95/100 {
					b.Fatalf("Len() = %d; want ≤ %d and ≥ 95%% of it", n, clients)
				}
				perClient = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
				runtime.KeepAlive(l)
			}
			b.ReportMetric(perClient, "B/client")
		})
	}
}
