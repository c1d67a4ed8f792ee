package budget

import (
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/limiter"
)

func key(s string) limiter.Key { return limiter.Bucket(netip.MustParseAddr(s)) }

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		max, perClient         int64
		wantMax, wantPerClient int64
	}{
		{"default quarter", 1000, 0, 1000, 250},
		{"negative per client is the default", 1000, -1, 1000, 250},
		{"explicit", 1000, 100, 1000, 100},
		{"per client capped at max", 1000, 5000, 1000, 1000},
		{"negative max", -5, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := New(tc.max, tc.perClient)
			if b.Max() != tc.wantMax || b.PerClient() != tc.wantPerClient {
				t.Errorf("New(%d, %d) = max %d, per client %d; want %d, %d", tc.max, tc.perClient, b.Max(), b.PerClient(), tc.wantMax, tc.wantPerClient)
			}
		})
	}
}

func TestChargeRefund(t *testing.T) {
	t.Parallel()
	a, c := key("192.0.2.1"), key("192.0.2.2")
	b := New(100, 60)
	steps := []struct {
		name    string
		k       limiter.Key
		n       int64 // > 0 charge, < 0 refund
		wantErr error
		used    int64
		usedA   int64
	}{
		{"a takes 60", a, 60, nil, 60, 60},
		{"a over its share", a, 1, ErrOverloaded, 60, 60},
		{"c takes 40", c, 40, nil, 100, 60},
		{"c over the total", c, 1, ErrOverloaded, 100, 60},
		{"zero is free when full", c, 0, nil, 100, 60},
		{"a gives back 10", a, -10, nil, 90, 50},
		{"c takes 10 more", c, 10, nil, 100, 50},
		{"a gives back all", a, -50, nil, 50, 0},
		{"c gives back all", c, -50, nil, 0, 0},
	}
	for _, s := range steps {
		var err error
		if s.n >= 0 {
			err = b.Charge(s.k, s.n)
		} else {
			b.Refund(s.k, -s.n)
		}
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: err = %v; want %v", s.name, err, s.wantErr)
		}
		if b.Used() != s.used || b.UsedBy(a) != s.usedA {
			t.Fatalf("%s: used %d, a %d; want %d, %d", s.name, b.Used(), b.UsedBy(a), s.used, s.usedA)
		}
	}
	if n := b.clientCount(); n != 0 {
		t.Errorf("clients left in the map = %d; want 0 (entries go at zero)", n)
	}
}

func TestRefundMoreThanChargedPanics(t *testing.T) {
	t.Parallel()
	b := New(100, 100)
	if err := b.Charge(key("192.0.2.1"), 10); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("refunding 11 of 10 did not panic")
		}
	}()
	b.Refund(key("192.0.2.1"), 11)
}

func TestZeroBudgetRefuses(t *testing.T) {
	t.Parallel()
	var b Budget
	if err := b.Charge(key("192.0.2.1"), 1); !errors.Is(err, ErrOverloaded) {
		t.Errorf("zero Budget: Charge(1) = %v; want ErrOverloaded", err)
	}
}

// TestChargeConcurrentExact: clients × goroutines race to charge one byte
// each; exactly max succeed in total, none over a client's share, and
// refunding them all returns the budget to zero.
func TestChargeConcurrentExact(t *testing.T) {
	t.Parallel()
	const clients, perGoroutines, max, perClient = 8, 500, 50, 10
	b := New(max, perClient)
	var ok atomic.Int64
	perOK := make([]atomic.Int64, clients)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c := range clients {
		k := limiter.Bucket(netip.AddrFrom4([4]byte{192, 0, 2, byte(c)}))
		for range perGoroutines {
			wg.Go(func() {
				<-start
				if b.Charge(k, 1) == nil {
					ok.Add(1)
					perOK[c].Add(1)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if got := ok.Load(); got != max {
		t.Errorf("successful charges = %d; want exactly %d", got, max)
	}
	for c := range clients {
		if got := perOK[c].Load(); got > perClient {
			t.Errorf("client %d holds %d; want at most %d", c, got, perClient)
		}
	}
	if b.Used() != max {
		t.Errorf("Used = %d; want %d", b.Used(), max)
	}
	// Refund concurrently too.
	for c := range clients {
		k := limiter.Bucket(netip.AddrFrom4([4]byte{192, 0, 2, byte(c)}))
		for range perOK[c].Load() {
			wg.Go(func() { b.Refund(k, 1) })
		}
	}
	wg.Wait()
	if b.Used() != 0 || b.clientCount() != 0 {
		t.Errorf("after refunding all: used %d, clients %d; want 0, 0", b.Used(), b.clientCount())
	}
}

// TestChargeRefundChurn: many goroutines charge and refund in a loop; the
// totals never go over and end at zero.
func TestChargeRefundChurn(t *testing.T) {
	t.Parallel()
	const goroutines, rounds, max = 64, 200, 1000
	b := New(max, max)
	var wg sync.WaitGroup
	var over atomic.Bool
	for g := range goroutines {
		k := limiter.Bucket(netip.AddrFrom4([4]byte{198, 51, 100, byte(g % 4)}))
		wg.Go(func() {
			for i := range rounds {
				n := int64(1 + (g+i)%37)
				if b.Charge(k, n) == nil {
					if b.Used() > max {
						over.Store(true)
					}
					b.Refund(k, n)
				}
			}
		})
	}
	wg.Wait()
	if over.Load() {
		t.Error("Used went over max")
	}
	if b.Used() != 0 || b.clientCount() != 0 {
		t.Errorf("end: used %d, clients %d; want 0, 0", b.Used(), b.clientCount())
	}
}

// TestRefundStartsCollection: once half the budget was refunded since
// the last collection it started, the Budget starts one.
func TestRefundStartsCollection(t *testing.T) {
	b := New(16<<20, 16<<20)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.NumGC
	k := limiter.Key{}
	for range 8 { // 8 MiB: half the budget
		if err := b.Charge(k, 1<<20); err != nil {
			t.Fatal(err)
		}
		b.Refund(k, 1<<20)
	}
	for range 500 {
		runtime.ReadMemStats(&ms)
		if ms.NumGC > before {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("no collection within 5s after half the budget was refunded")
}
