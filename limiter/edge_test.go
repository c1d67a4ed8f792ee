package limiter_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idemgate/idemgate/limiter"
)

func newEdge(t testing.TB, o limiter.EdgeOptions) *limiter.Limiter {
	t.Helper()
	l, err := limiter.NewEdge(o)
	if err != nil {
		t.Fatalf("NewEdge(%+v): %v", o, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// nginxDefault is DESIGN.md's edge limit: rate=100r/s burst=200 nodelay.
var nginxDefault = limiter.EdgeOptions{Rate: 100, Burst: 200}

// burst sends n requests from k at once and returns how many passed.
func burst(l *limiter.Limiter, k limiter.Key, at time.Time, n int) int {
	passed := 0
	for range n {
		if l.Allow(k, at).OK {
			passed++
		}
	}
	return passed
}

func TestEdgeBurst(t *testing.T) {
	t.Parallel()
	a := limiter.Bucket(mustAddr(t, "198.51.100.1"))
	tests := []struct {
		name string
		idle time.Duration // after the first burst of 400, at t0
		n    int
		want int
	}{
		{"after 2.01 s idle, full again", ms(2010), 400, 201},
		{"after 2.009 s idle, one short", ms(2009), 400, 200},
		{"after 1 s idle, half", time.Second, 400, 100},
		{"after 10 ms idle, one", ms(10), 400, 1},
		{"after 9.999 ms idle, none", ms(9.999), 400, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newEdge(t, nginxDefault)
			if got := burst(l, a, t0, 400); got != 201 {
				t.Fatalf("idle client's burst of 400: %d passed; want 201", got)
			}
			if got := burst(l, a, t0.Add(tt.idle), tt.n); got != tt.want {
				t.Errorf("burst of %d after %v: %d passed; want %d", tt.n, tt.idle, got, tt.want)
			}
		})
	}
}

func TestEdgePaced(t *testing.T) {
	t.Parallel()
	a := limiter.Bucket(mustAddr(t, "198.51.100.1"))
	tests := []struct {
		every      time.Duration
		wantPassed int
	}{
		{ms(10), 200},
		{ms(12), 200},
		{ms(9), 180},
		{ms(8), 160},
		{ms(5), 100},
	}
	for _, tt := range tests {
		t.Run(tt.every.String(), func(t *testing.T) {
			t.Parallel()
			l := newEdge(t, nginxDefault)
			burst(l, a, t0, 201) // saturated at t0
			passed := 0
			for i := 1; i <= 200; i++ {
				if l.Allow(a, t0.Add(time.Duration(i)*tt.every)).OK {
					passed++
				}
			}
			if passed != tt.wantPassed || 200-passed != 200-tt.wantPassed {
				t.Errorf("200 requests every %v after saturation: %d passed, %d failed; want %d and %d",
					tt.every, passed, 200-passed, tt.wantPassed, 200-tt.wantPassed)
			}
		})
	}
}

func TestEdgeBoundary(t *testing.T) {
	t.Parallel()
	a := limiter.Bucket(mustAddr(t, "198.51.100.1"))
	tests := []struct {
		after time.Duration
		ok    bool
		retry time.Duration
	}{
		{0, false, ms(10)},
		{ms(9.999), false, time.Microsecond},
		{ms(10) - 1, false, 1},
		{ms(10), true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.after.String(), func(t *testing.T) {
			t.Parallel()
			l := newEdge(t, nginxDefault)
			burst(l, a, t0, 201)
			d := l.Allow(a, t0.Add(tt.after))
			if d.OK != tt.ok || d.RetryAfter != tt.retry {
				t.Errorf("request %v after saturation: OK %v, RetryAfter %v; want %v, %v", tt.after, d.OK, d.RetryAfter, tt.ok, tt.retry)
			}
		})
	}
}

func TestEdgeDecisionNumbers(t *testing.T) {
	t.Parallel()
	l := newEdge(t, nginxDefault)
	a := limiter.Bucket(mustAddr(t, "198.51.100.1"))
	for i := range 201 {
		d := l.Allow(a, t0)
		want := limiter.Decision{OK: true, Limit: 201, Remaining: 200 - i, Reset: ms(10)}
		if d != want {
			t.Fatalf("request %d: got %+v; want %+v", i+1, d, want)
		}
	}
	// Half a token has come back 5 ms later: Remaining grows in 5 ms more.
	if got, want := l.Allow(a, t0.Add(ms(5))), (limiter.Decision{Limit: 201, Reset: ms(5), RetryAfter: ms(5)}); got != want {
		t.Errorf("5 ms after saturation: got %+v; want %+v", got, want)
	}
	if got, want := l.Allow(a, t0.Add(ms(15))), (limiter.Decision{OK: true, Limit: 201, Reset: ms(5)}); got != want {
		t.Errorf("15 ms after saturation: got %+v; want %+v", got, want)
	}
}

func TestEdgeRejectedConsumeNothing(t *testing.T) {
	t.Parallel()
	l := newEdge(t, nginxDefault)
	a := limiter.Bucket(mustAddr(t, "198.51.100.1"))
	burst(l, a, t0, 201)
	// 25,000 refused requests spread over the next 9.99 ms.
	for i := range 25_000 {
		if l.Allow(a, t0.Add(time.Duration(i)*400)).OK {
			t.Fatalf("request %d ns after saturation passed; want refused", i*400)
		}
	}
	if got := burst(l, a, t0.Add(ms(10)), 5); got != 1 {
		t.Errorf("10 ms after saturation, after 25,000 refusals: %d passed; want 1", got)
	}
	if got := burst(l, a, t0.Add(ms(2020)), 400); got != 201 {
		t.Errorf("2.01 s after the last pass: %d passed; want 201", got)
	}
}

func TestEdgeClientsIndependent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		a, b       string
		wantShared bool
	}{
		{"two ipv4 clients", "198.51.100.1", "198.51.100.2", false},
		{"two /64s", "2001:db8:0:1::1", "2001:db8:0:2::1", false},
		{"one /64", "2001:db8:0:1::1", "2001:db8:0:1:aaaa::9", true},
		{"mapped and plain ipv4", "::ffff:198.51.100.1", "198.51.100.1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newEdge(t, nginxDefault)
			burst(l, limiter.Bucket(mustAddr(t, tt.a)), t0, 201)
			want := 201
			if tt.wantShared {
				want = 0
			}
			if got := burst(l, limiter.Bucket(mustAddr(t, tt.b)), t0, 400); got != want {
				t.Errorf("%s saturated, then %s sends 400: %d passed; want %d", tt.a, tt.b, got, want)
			}
		})
	}
}

func TestEdgeDisabled(t *testing.T) {
	t.Parallel()
	for _, l := range []*limiter.Limiter{newEdge(t, limiter.EdgeOptions{Rate: 0, Burst: 5}), {}} {
		a := limiter.Bucket(mustAddr(t, "198.51.100.1"))
		if got := burst(l, a, t0, 10_000); got != 10_000 {
			t.Errorf("disabled limiter: %d of 10000 passed; want all", got)
		}
		if got, want := l.Allow(a, t0), (limiter.Decision{OK: true}); got != want {
			t.Errorf("disabled limiter: got %+v; want %+v", got, want)
		}
		if got := l.Len(); got != 0 {
			t.Errorf("disabled limiter tracks %d clients; want 0", got)
		}
	}
}

func TestNewEdgeInvalid(t *testing.T) {
	t.Parallel()
	for _, o := range []limiter.EdgeOptions{
		{Rate: -1},
		{Rate: 1, Burst: -1},
		{Rate: 1, MaxClients: -1},
		{Rate: 1, SweepInterval: -1},
		{Rate: 1, Burst: 1 << 62},
	} {
		if _, err := limiter.NewEdge(o); !errors.Is(err, limiter.ErrInvalidOptions) {
			t.Errorf("NewEdge(%+v) = %v; want ErrInvalidOptions", o, err)
		}
		if err := o.Validate(); !errors.Is(err, limiter.ErrInvalidOptions) {
			t.Errorf("%+v.Validate() = %v; want ErrInvalidOptions", o, err)
		}
	}
	for _, o := range []limiter.EdgeOptions{{}, {Rate: 10, Burst: 5, Per: time.Minute}, {Burst: 1 << 62}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v; want nil", o, err)
		}
	}
}

// nginxModel is ngx_http_limit_req_module.c's arithmetic, line for line:
// excess in milli-requests, time in milliseconds.
type nginxModel struct {
	rate, burst int64 // rate*1000 per second, burst*1000
	excess      map[int]int64
	last        map[int]int64
}

func (m *nginxModel) allow(key int, now int64) bool {
	excess, found := m.excess[key]
	if !found {
		m.excess[key], m.last[key] = 0, now // a new node: excess 0, the request passes
		return true
	}
	ms := now - m.last[key]
	if ms < -60000 {
		ms = 1
	} else if ms < 0 {
		ms = 0
	}
	e := excess - m.rate*ms/1000 + 1000
	if e < 0 {
		e = 0
	}
	if e > m.burst {
		return false
	}
	m.excess[key] = e
	if ms != 0 {
		m.last[key] = now
	}
	return true
}

// TestEdgeMatchesNginx replays random whole-millisecond schedules through
// the limiter and through nginx's arithmetic and expects the same decisions.
func TestEdgeMatchesNginx(t *testing.T) {
	t.Parallel()
	tests := []struct{ rate, burst int }{{100, 200}, {1, 0}, {3, 5}, {7, 13}, {1000, 50}, {250, 0}}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("rate=%d burst=%d", tt.rate, tt.burst), func(t *testing.T) {
			t.Parallel()
			l := newEdge(t, limiter.EdgeOptions{Rate: tt.rate, Burst: tt.burst})
			m := &nginxModel{rate: int64(tt.rate) * 1000, burst: int64(tt.burst) * 1000, excess: map[int]int64{}, last: map[int]int64{}}
			rng := rand.New(rand.NewPCG(uint64(tt.rate), uint64(tt.burst)))
			keys := make([]limiter.Key, 4)
			for i := range keys {
				keys[i] = limiter.Bucket(mustAddr(t, []string{"192.0.2.1", "192.0.2.2", "2001:db8::1", "2001:db8:0:1::1"}[i]))
			}
			now := int64(0)
			for i := range 100_000 {
				// Mostly bursts, sometimes pauses up to 3 s.
				switch r := rng.IntN(100); {
				case r < 60:
				case r < 95:
					now += rng.Int64N(20)
				default:
					now += rng.Int64N(3000)
				}
				k := rng.IntN(len(keys))
				got := l.Allow(keys[k], t0.Add(time.Duration(now)*time.Millisecond)).OK
				if want := m.allow(k, now); got != want {
					t.Fatalf("rate %d burst %d, decision %d (key %d at %d ms): OK %v; nginx %v", tt.rate, tt.burst, i, k, now, got, want)
				}
			}
		})
	}
}
