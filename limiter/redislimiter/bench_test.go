package redislimiter_test

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/limiter"
	"github.com/idemgate/idemgate/limiter/redislimiter"
)

// BenchmarkAllow measures one decision in Redis (one EVALSHA, Redis's
// clock) for clients that pass, from 8 × GOMAXPROCS goroutines (a proxy
// serves many requests at once), each sending round-robin from its own 1,024
// clients. The budgets are large enough that every request passes: the deny
// cache never answers. BenchmarkAllowLatency is one goroutine: the round
// trip.
func BenchmarkAllow(b *testing.B) {
	for _, topo := range redistest.All() {
		b.Run(topo.String(), func(b *testing.B) {
			c := newClient(b, topo)
			be := newBackend(b, c, nil, redislimiter.Options{})
			limiters := []struct {
				name string
				l    *redislimiter.Limiter
			}{
				{"edge", newEdge(b, be, limiter.EdgeOptions{Rate: 1 << 20, Burst: 200})},
				{"token_bucket", newRoute(b, be, "route:tb", limiter.RouteOptions{Requests: 1 << 20, Per: time.Second})},
				{"window", newRoute(b, be, "route:w", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 600, Per: time.Minute})},
			}
			for _, bl := range limiters {
				b.Run(bl.name, func(b *testing.B) {
					var next atomic.Uint32
					b.ReportAllocs()
					b.SetParallelism(8)
					b.RunParallel(func(pb *testing.PB) {
						g := next.Add(1)
						keys := make([]limiter.Key, 1024)
						for i := range keys {
							keys[i] = limiter.Bucket(netip.AddrFrom4([4]byte{10, byte(g), byte(i >> 8), byte(i)}))
						}
						for i := 0; pb.Next(); i++ {
							if d := bl.l.AllowContext(ctx, keys[i%len(keys)], time.Now()); !d.OK || d.Limit == 0 {
								b.Errorf("decision %+v; want a pass decided by Redis", d)
								return
							}
						}
					})
				})
			}
			if n := be.Fallbacks(); n != 0 {
				b.Errorf("%d fallbacks", n)
			}
		})
	}
}

// BenchmarkAllowDenied is the hot path of a flood: a client Redis already
// refused is answered by the deny cache, without a round trip.
func BenchmarkAllowDenied(b *testing.B) {
	c := newClient(b, redistest.Standalone)
	be := newBackend(b, c, nil, redislimiter.Options{})
	l := newRoute(b, be, "route:w", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 1, Per: time.Hour})
	k := key("198.51.100.1")
	l.AllowContext(ctx, k, time.Now())
	if d := l.AllowContext(ctx, k, time.Now()); d.OK {
		b.Fatalf("second request passed: %+v", d)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		now := time.Now()
		for pb.Next() {
			if l.AllowContext(ctx, k, now).OK {
				b.Error("a denied client passed")
				return
			}
		}
	})
}

func BenchmarkAllowLatency(b *testing.B) {
	c := newClient(b, redistest.Standalone)
	l := newEdge(b, newBackend(b, c, nil, redislimiter.Options{}), limiter.EdgeOptions{Rate: 1 << 20, Burst: 200})
	k := key("198.51.100.1")
	b.ReportAllocs()
	for b.Loop() {
		if d := l.AllowContext(ctx, k, time.Now()); !d.OK || d.Limit == 0 {
			b.Fatalf("decision %+v; want a pass decided by Redis", d)
		}
	}
}
