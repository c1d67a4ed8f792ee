package limiter_test

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/limiter"
)

func newDenyCache(t testing.TB, capacity int, sweep time.Duration) *limiter.DenyCache {
	t.Helper()
	c, err := limiter.NewDenyCache(capacity, sweep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDenyCache(t *testing.T) {
	t.Parallel()
	c := newDenyCache(t, 0, 0)
	a, b := limiter.Bucket(mustAddr(t, "192.0.2.1")), limiter.Bucket(mustAddr(t, "192.0.2.2"))
	if _, denied := c.Denied(a, t0); denied {
		t.Fatal("an empty cache denies")
	}
	c.Deny(a, t0, ms(10))
	c.Deny(a, t0, ms(5)) // shorter: no change
	c.Deny(b, t0, 0)     // nothing
	tests := []struct {
		at     time.Duration
		k      limiter.Key
		wait   time.Duration
		denied bool
	}{
		{0, a, ms(10), true},
		{ms(9.999), a, time.Microsecond, true},
		{ms(10), a, 0, false},
		{0, b, 0, false},
	}
	for _, tt := range tests {
		wait, denied := c.Denied(tt.k, t0.Add(tt.at))
		if wait != tt.wait || denied != tt.denied {
			t.Errorf("Denied(%v, +%v) = %v, %v; want %v, %v", tt.k, tt.at, wait, denied, tt.wait, tt.denied)
		}
	}
	if n := c.Len(); n != 0 {
		t.Errorf("Len() after the entry ended and was looked up = %d; want 0", n)
	}
	c.Deny(a, t0, time.Second)
	c.Deny(a, t0, 2*time.Second) // longer: extends
	if wait, _ := c.Denied(a, t0.Add(time.Second)); wait != time.Second {
		t.Errorf("after extending: wait %v; want 1s", wait)
	}
}

// TestDenyCacheBounded: a flood of denied clients keeps at most the
// capacity; ended entries go first, and evictions are counted.
func TestDenyCacheBounded(t *testing.T) {
	t.Parallel()
	const capacity = 1000
	c := newDenyCache(t, capacity, 0)
	for i := range 10 * capacity {
		c.Deny(addrN(uint32(i)), t0, time.Hour)
	}
	if n := c.Len(); n > capacity {
		t.Errorf("Len() = %d; want ≤ %d", n, capacity)
	}
	if c.Evictions() == 0 {
		t.Error("Evictions() = 0 after a flood past the capacity")
	}
	// Once the entries have ended, new ones replace them without evictions.
	before := c.Evictions()
	for i := range capacity / 2 {
		c.Deny(addrN(uint32(1_000_000+i)), t0.Add(2*time.Hour), time.Minute)
	}
	if got := c.Evictions(); got != before {
		t.Errorf("Evictions() went from %d to %d while ended entries could be dropped", before, got)
	}
}

func TestDenyCacheSweeper(t *testing.T) {
	t.Parallel()
	c := newDenyCache(t, 10, time.Millisecond)
	c.Deny(limiter.Bucket(mustAddr(t, "192.0.2.1")), time.Now(), time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for c.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper did not drop an ended entry within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	c.Close()
	c.Close() // idempotent
}

func TestNewDenyCacheInvalid(t *testing.T) {
	t.Parallel()
	if _, err := limiter.NewDenyCache(-1, 0); err == nil {
		t.Error("NewDenyCache(-1, 0) = nil error")
	}
	if _, err := limiter.NewDenyCache(1, -1); err == nil {
		t.Error("NewDenyCache(1, -1) = nil error")
	}
}

func TestDenyCacheAllocs(t *testing.T) {
	c := newDenyCache(t, 100, 0)
	k := limiter.Bucket(mustAddr(t, "192.0.2.1"))
	c.Deny(k, t0, time.Hour)
	if n := testing.AllocsPerRun(100, func() { c.Denied(k, t0) }); n != 0 {
		t.Errorf("Denied allocates %v times; want 0", n)
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		l    *limiter.Limiter
		want limiter.Policy
	}{
		{"edge 100/s burst 200", newEdge(t, limiter.EdgeOptions{Rate: 100, Burst: 200}), limiter.Policy{Quota: 201, Window: ms(2010)}},
		{"edge disabled", newEdge(t, limiter.EdgeOptions{}), limiter.Policy{}},
		{"token bucket", newRoute(t, limiter.RouteOptions{Requests: 600, Per: time.Minute}), limiter.Policy{Quota: 600, Window: time.Minute}},
		{"window", newRoute(t, limiter.RouteOptions{Algorithm: limiter.Window, Requests: 5, Per: time.Second}), limiter.Policy{Quota: 5, Window: time.Second}},
	}
	for _, tt := range tests {
		if got := tt.l.Policy(); got != tt.want {
			t.Errorf("%s: Policy() = %+v; want %+v", tt.name, got, tt.want)
		}
	}
}

// TestEdgePer: a rate per a longer period is the same rate: 0.5 r/s as 1
// per 2 s and as 500 per 1000 s decide alike.
func TestEdgePer(t *testing.T) {
	t.Parallel()
	a := newEdge(t, limiter.EdgeOptions{Rate: 1, Per: 2 * time.Second, Burst: 3})
	b := newEdge(t, limiter.EdgeOptions{Rate: 500, Per: 1000 * time.Second, Burst: 3})
	k := limiter.Bucket(mustAddr(t, "192.0.2.1"))
	for i := range 200 {
		at := t0.Add(time.Duration(i) * ms(700))
		da, db := a.Allow(k, at), b.Allow(k, at)
		if da != db {
			t.Fatalf("at +%v: %+v and %+v differ", at.Sub(t0), da, db)
		}
	}
	if got := burst(newEdge(t, limiter.EdgeOptions{Rate: 1, Per: 2 * time.Second, Burst: 3}), k, t0, 10); got != 4 {
		t.Errorf("burst of 10: %d passed; want 4", got)
	}
	if _, err := limiter.NewEdge(limiter.EdgeOptions{Rate: 1, Per: -time.Second}); err == nil {
		t.Error("negative Per: nil error")
	}
}

func TestAllowContext(t *testing.T) {
	t.Parallel()
	l := newRoute(t, limiter.RouteOptions{Requests: 2, Per: time.Minute})
	k := limiter.Bucket(mustAddr(t, "192.0.2.1"))
	if d := l.AllowContext(t.Context(), k, t0); !d.OK || d.Remaining != 1 {
		t.Errorf("AllowContext = %+v; want passed, Remaining 1", d)
	}
	if d := l.Allow(k, t0); !d.OK || d.Remaining != 0 {
		t.Errorf("then Allow = %+v; want passed, Remaining 0 (one state)", d)
	}
}

func TestKeyAs16(t *testing.T) {
	t.Parallel()
	k := limiter.Bucket(mustAddr(t, "2001:db8:1:2:3:4:5:6"))
	b := k.As16()
	want := [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2}
	if b != want {
		t.Errorf("As16() = %x; want %x", b, want)
	}
}
