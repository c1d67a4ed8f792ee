package limiter_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/limiter"
)

// TestTopKExact: with no more clients than one shard's slots, every count
// is exact and the ranking is by requests, then refusals, then key.
func TestTopKExact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		sends   map[uint32][2]int // client: passed, refused
		n       int
		want    []uint32 // clients in ranking order
		wantLen int
	}{
		{name: "empty", n: 5, want: nil},
		{name: "one", sends: map[uint32][2]int{1: {3, 2}}, n: 5, want: []uint32{1}},
		{name: "by requests", sends: map[uint32][2]int{1: {1, 0}, 2: {5, 0}, 3: {2, 1}}, n: 5, want: []uint32{2, 3, 1}},
		{name: "ties by refusals", sends: map[uint32][2]int{1: {4, 0}, 2: {2, 2}, 3: {3, 1}}, n: 5, want: []uint32{2, 3, 1}},
		{name: "truncated", sends: map[uint32][2]int{1: {1, 0}, 2: {5, 0}, 3: {2, 1}}, n: 2, want: []uint32{2, 3}},
		{name: "zero n", sends: map[uint32][2]int{1: {1, 0}}, n: 0, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			top := limiter.NewTopK()
			for c, pr := range tt.sends {
				for range pr[0] {
					top.RecordN(addrN(c), 1, 0)
				}
				for range pr[1] {
					top.Record(addrN(c), true) // refusals are never sampled
				}
			}
			got := top.Top(tt.n)
			if len(got) != len(tt.want) {
				t.Fatalf("Top(%d) = %d clients; want %d: %+v", tt.n, len(got), len(tt.want), got)
			}
			for i, c := range tt.want {
				pr := tt.sends[c]
				want := limiter.TopClient{Key: addrN(c), Requests: uint64(pr[0] + pr[1]), Refused: uint64(pr[1])}
				if got[i] != want {
					t.Errorf("Top[%d] = %+v; want %+v", i, got[i], want)
				}
			}
		})
	}
}

// TestTopKFlood: three busy clients among a million addresses sending one
// request each stay at the top with their counts bounded correctly, and
// the TopK never holds more than its fixed slots.
func TestTopKFlood(t *testing.T) {
	t.Parallel()
	top := limiter.NewTopK()
	busy := map[limiter.Key]uint64{addrN(1 << 30): 30_000, addrN(1<<30 + 1): 20_000, addrN(1<<30 + 2): 10_000}
	const flood = 1_000_000
	for i := range flood {
		top.RecordN(addrN(uint32(i)), 1, 0)
		if i%20 == 0 { // the busy ones, interleaved
			for k, n := range busy {
				if uint64(i/20) < n {
					top.Record(k, true)
				}
			}
		}
	}
	all := top.Top(1 << 20)
	if len(all) > 8*20 {
		t.Fatalf("TopK holds %d clients; want at most its 160 slots", len(all))
	}
	got := top.Top(3)
	for i, c := range got {
		n, ok := busy[c.Key]
		if !ok {
			t.Fatalf("Top[%d] = %v; want one of the busy clients (%+v)", i, c.Key, got)
		}
		if c.Requests < n || c.Requests-c.Err > n {
			t.Errorf("%v: requests %d, err %d; want the true %d within [requests-err, requests]", c.Key, c.Requests, c.Err, n)
		}
		if c.Refused > n {
			t.Errorf("%v: refused %d; want at most %d", c.Key, c.Refused, n)
		}
	}
	if len(got) != 3 || got[0].Requests < got[1].Requests || got[1].Requests < got[2].Requests {
		t.Errorf("Top(3) = %+v; want three, busiest first", got)
	}
	for _, c := range all[3:] {
		if c.Requests-c.Err > 1 {
			t.Errorf("flood client %v: at least %d requests; want at most 1", c.Key, c.Requests-c.Err)
		}
	}
}

// TestTopKConcurrent: 64 goroutines recording 20 clients (no more than a
// shard's slots, so counts are exact) lose no count.
func TestTopKConcurrent(t *testing.T) {
	t.Parallel()
	top := limiter.NewTopK()
	const goroutines, per, clients = 64, 2_000, 20
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range per {
				top.RecordN(addrN(uint32((g+i)%clients)), 1, uint64(max(0, 1-i%4)))
			}
		})
	}
	wg.Wait()
	got := top.Top(clients)
	if len(got) != clients {
		t.Fatalf("Top = %d clients; want %d", len(got), clients)
	}
	var sum, refused uint64
	for _, c := range got {
		sum += c.Requests
		refused += c.Refused
		if c.Err != 0 || c.Requests != goroutines*per/clients {
			t.Errorf("%v: requests %d err %d; want exactly %d", c.Key, c.Requests, c.Err, goroutines*per/clients)
		}
	}
	if sum != goroutines*per || refused != goroutines*per/4 {
		t.Errorf("sum %d, refused %d; want %d and %d", sum, refused, goroutines*per, goroutines*per/4)
	}
}

// TestTopKSampling: Record counts every refusal, and passed requests by
// sampling one in 32 as 32: a client's 64,000 passes are estimated within
// 15% (the sample's standard deviation is about 2%), a client that never
// sent is never there.
func TestTopKSampling(t *testing.T) {
	t.Parallel()
	top := limiter.NewTopK()
	const passes, refusals = 64_000, 1_000
	for range passes {
		top.Record(addrN(1), false)
	}
	for range refusals {
		top.Record(addrN(2), true)
	}
	got := top.Top(5)
	if len(got) != 2 || got[0].Key != addrN(1) || got[1].Key != addrN(2) {
		t.Fatalf("Top = %+v; want client 1 then 2", got)
	}
	if est := float64(got[0].Requests); est < passes*0.85 || est > passes*1.15 || got[0].Requests%32 != 0 || got[0].Refused != 0 {
		t.Errorf("client 1: requests %d, refused %d; want about %d in multiples of 32, none refused", got[0].Requests, got[0].Refused, passes)
	}
	if got[1].Requests != refusals || got[1].Refused != refusals || got[1].Err != 0 {
		t.Errorf("client 2: %+v; want exactly %d requests, all refused", got[1], refusals)
	}
}

func TestTopKRecordAllocs(t *testing.T) {
	top := limiter.NewTopK()
	i := uint32(0)
	if n := testing.AllocsPerRun(1000, func() { i++; top.Record(addrN(i%100), i%2 == 0) }); n != 0 {
		t.Errorf("Record allocates %v times; want 0", n)
	}
}

// BenchmarkTopKRecord measures Record alone, for passed requests (pass:
// sampled) and refused ones (refuse: every one counted): "hot" is every
// goroutine sending as one client (one shard's lock, the worst
// contention), "spread" 20 clients per goroutine (hits), "flood" a new
// address per request (every count a miss that takes over the smallest
// slot).
func BenchmarkTopKRecord(b *testing.B) {
	for _, refused := range []bool{false, true} {
		for _, bb := range []struct {
			name string
			n    int // distinct clients per goroutine
		}{
			{"hot", 0}, {"spread", 20}, {"flood", 1 << 16},
		} {
			name := "pass/" + bb.name
			if refused {
				name = "refuse/" + bb.name
			}
			b.Run(name, func(b *testing.B) {
				top := limiter.NewTopK()
				procs := runtime.GOMAXPROCS(0)
				keys := make([][]limiter.Key, procs)
				for p := range keys {
					keys[p] = []limiter.Key{addrN(7)} // hot: one client for all
					for c := range bb.n {
						keys[p] = append(keys[p][:c], addrN(uint32(p<<20|c)))
					}
				}
				var next atomic.Int32
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					my := keys[int(next.Add(1)-1)%procs]
					for i := 0; pb.Next(); i++ {
						top.Record(my[i%len(my)], refused)
					}
				})
			})
		}
	}
}

// BenchmarkAllowCounted is BenchmarkAllow's token bucket with and without
// a TopK recorded after each decision, as the wiring does: the difference
// is Record's cost on the hot path.
func BenchmarkAllowCounted(b *testing.B) {
	const clients = 1024
	for _, counted := range []bool{false, true} {
		name := "plain"
		if counted {
			name = "counted"
		}
		b.Run(name, func(b *testing.B) {
			l := newRoute(b, limiter.RouteOptions{Requests: 600, Per: time.Minute})
			top := limiter.NewTopK()
			procs := runtime.GOMAXPROCS(0)
			keys := make([][]limiter.Key, procs)
			for p := range keys {
				for c := range clients {
					keys[p] = append(keys[p], addrN(uint32(p*clients+c)))
				}
			}
			var next atomic.Int32
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				my := keys[int(next.Add(1)-1)%procs]
				at := t0
				for i := 0; pb.Next(); i++ {
					at = at.Add(time.Millisecond)
					k := my[i%clients]
					d := l.Allow(k, at)
					if counted {
						top.Record(k, !d.OK)
					}
				}
			})
		})
	}
}
