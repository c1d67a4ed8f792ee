package limiter_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/limiter"
)

func newRoute(t testing.TB, o limiter.RouteOptions) *limiter.Limiter {
	t.Helper()
	l, err := limiter.NewRoute(o)
	if err != nil {
		t.Fatalf("NewRoute(%+v): %v", o, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

var clientA, clientB = limiter.Bucket(mustAddrNoT("198.51.100.1")), limiter.Bucket(mustAddrNoT("198.51.100.2"))

// step is one request in a scripted test: at t0+at, expect want.
type step struct {
	at   time.Duration
	want limiter.Decision
}

func pass(limit, remaining int, reset time.Duration) limiter.Decision {
	return limiter.Decision{OK: true, Limit: limit, Remaining: remaining, Reset: reset}
}

func refuse(limit int, retry time.Duration) limiter.Decision {
	return limiter.Decision{Limit: limit, Reset: retry, RetryAfter: retry}
}

func runSteps(t *testing.T, l *limiter.Limiter, k limiter.Key, steps []step) {
	t.Helper()
	for i, s := range steps {
		if got := l.Allow(k, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d at %v: got %+v; want %+v", i, s.at, got, s.want)
		}
	}
}

func TestWindowLimitThenBlock(t *testing.T) {
	t.Parallel()
	const L = 600
	l := newRoute(t, limiter.RouteOptions{Algorithm: limiter.Window, Requests: L, Per: time.Minute})
	var steps []step
	for i := range L {
		steps = append(steps, step{0, pass(L, L-1-i, time.Minute)})
	}
	steps = append(steps,
		step{0, refuse(L, time.Minute)},              // the 601st starts the block
		step{time.Second, refuse(L, 59*time.Second)}, // the block counts down
		step{ms(30500), refuse(L, ms(29500))},        //
		step{time.Minute - 1, refuse(L, 1)},          // 1 ns before its end
		step{time.Minute, pass(L, L-1, time.Minute)}, // count restarted
		step{time.Minute + time.Second, pass(L, L-2, 59*time.Second)},
	)
	runSteps(t, l, clientA, steps)
}

func TestWindowShortBlockRestartsCount(t *testing.T) {
	t.Parallel()
	// 5 per 60 s with a 10 s block: after the block the count is zero, although
	// the five requests at t0 would still count for 49 s.
	l := newRoute(t, limiter.RouteOptions{Algorithm: limiter.Window, Requests: 5, Per: time.Minute, Block: 10 * time.Second})
	runSteps(t, l, clientA, []step{
		{0, pass(5, 4, time.Minute)},
		{0, pass(5, 3, time.Minute)},
		{0, pass(5, 2, time.Minute)},
		{0, pass(5, 1, time.Minute)},
		{0, pass(5, 0, time.Minute)},
		{time.Second, refuse(5, 10*time.Second)},
		{5 * time.Second, refuse(5, 6*time.Second)},
		{11 * time.Second, pass(5, 4, time.Minute)},
	})
}

func TestWindowSliding(t *testing.T) {
	t.Parallel()
	const L = 600
	half := func(at time.Duration, first int, reset func(i int) time.Duration) []step {
		var s []step
		for i := range L / 2 {
			s = append(s, step{at, pass(L, L-1-first-i, reset(i))})
		}
		return s
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"half at 0, half at 30 s, one at 59.9 s is refused", append(append(
			half(0, 0, func(int) time.Duration { return time.Minute }),
			half(30*time.Second, 300, func(int) time.Duration { return 30 * time.Second })...),
			step{ms(59900), refuse(L, time.Minute)})},
		{"half at 0, half at 30 s, one at 60 s passes", append(append(
			half(0, 0, func(int) time.Duration { return time.Minute }),
			half(30*time.Second, 300, func(int) time.Duration { return 30 * time.Second })...),
			step{time.Minute, pass(L, 299, 30*time.Second)})},
		{"not fixed windows: 600 at 59 s, then one at 61 s is refused", append(
			half(59*time.Second, 0, func(int) time.Duration { return time.Minute }),
			append(half(59*time.Second, 300, func(int) time.Duration { return time.Minute }),
				step{61 * time.Second, refuse(L, time.Minute)})...)},
		{"each request counts exactly per (59.9 s)", []step{
			{0, pass(L, 599, time.Minute)},
			{ms(59900), pass(L, 598, ms(100))},
		}},
		{"each request counts exactly per (60 s)", []step{
			{0, pass(L, 599, time.Minute)},
			{time.Minute, pass(L, 599, time.Minute)},
		}},
		{"reset is the oldest counted request's exit", []step{
			{0, pass(L, 599, time.Minute)},
			{10 * time.Second, pass(L, 598, 50*time.Second)},
			{ms(60001), pass(L, 598, ms(9999))},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newRoute(t, limiter.RouteOptions{Algorithm: limiter.Window, Requests: L, Per: time.Minute})
			runSteps(t, l, clientA, tt.steps)
		})
	}
}

func TestTokenBucket(t *testing.T) {
	t.Parallel()
	ten := func(at time.Duration) []step {
		var s []step
		for i := range 10 {
			s = append(s, step{at, pass(10, 9-i, ms(100))})
		}
		return s
	}
	tests := []struct {
		name     string
		requests int
		per      time.Duration
		steps    []step
	}{
		{"capacity, then one per per/requests", 10, time.Second, append(ten(0),
			step{0, refuse(10, ms(100))},
			step{ms(50), refuse(10, ms(50))},
			step{ms(100), pass(10, 0, ms(100))},
			step{ms(150), refuse(10, ms(50))},
			step{ms(250), pass(10, 0, ms(50))},   // 1.5 tokens back, one used
			step{ms(1250), pass(10, 9, ms(100))}, // the bucket was full again at 1.2 s
		)},
		{"full again after per", 10, time.Second, append(ten(0), ten(time.Second)...)},
		{"not a window: up to 2L-1 in a rolling per", 600, time.Minute, func() []step {
			var s []step
			for i := range 600 {
				s = append(s, step{0, pass(600, 599-i, ms(100))})
			}
			for i := range 300 {
				s = append(s, step{30 * time.Second, pass(600, 299-i, ms(100))})
			}
			return append(s, step{30 * time.Second, refuse(600, ms(100))})
		}()},
		{"uneven interval, exact to the nanosecond", 7, time.Second, []step{
			{0, pass(7, 6, 142857143)},
			{0, pass(7, 5, 142857143)},
			{0, pass(7, 4, 142857143)},
			{0, pass(7, 3, 142857143)},
			{0, pass(7, 2, 142857143)},
			{0, pass(7, 1, 142857143)},
			{0, pass(7, 0, 142857143)},
			{142857142, refuse(7, 1)},
			{142857143, pass(7, 0, 142857143)},
			{time.Second, pass(7, 5, 142857143)}, // 6 tokens came back in 6/7 s
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, alg := range []limiter.Algorithm{"", limiter.TokenBucket} {
				l := newRoute(t, limiter.RouteOptions{Algorithm: alg, Requests: tt.requests, Per: tt.per})
				runSteps(t, l, clientA, tt.steps)
			}
		})
	}
}

// TestWindowOtherClientsBlockForgetsNothing is the regression test for the
// @nestjs/throttler 6.0–6.5 bug: one client's block ending cancelled every
// client's pending decrements. B is blocked and unblocked 100 times while A
// sends at half the limit on two routes; A is never refused, and its Remaining
// is exact.
func TestWindowOtherClientsBlockForgetsNothing(t *testing.T) {
	t.Parallel()
	const (
		L   = 10
		per = 10 * time.Second
	)
	o := limiter.RouteOptions{Algorithm: limiter.Window, Requests: L, Per: per, MaxClients: 16} // one shard: A and B side by side
	route1, route2 := newRoute(t, o), newRoute(t, o)

	// B's script: L passes, one refusal that starts the block, then the first
	// request after the block (the moment the throttler lost everyone's
	// counts), repeated 100 times, 1 ms apart within a burst.
	type event struct {
		at     time.Duration
		client limiter.Key
	}
	var events []event
	at := time.Duration(0)
	for range 100 {
		for range L + 1 {
			events = append(events, event{at, clientB})
			at += time.Millisecond
		}
		at += per // the block
	}
	end := at
	// A: one request every 2 s (L/2 per window), offset by 500 ms.
	for a := 500 * time.Millisecond; a < end; a += 2 * time.Second {
		events = append(events, event{a, clientA})
	}
	// Merge by time (stable: B first at equal times).
	for i := 1; i < len(events); i++ {
		for j := i; j > 0 && events[j].at < events[j-1].at; j-- {
			events[j], events[j-1] = events[j-1], events[j]
		}
	}

	aCount, bBlocks := 0, 0
	for _, e := range events {
		for ri, r := range []*limiter.Limiter{route1, route2} {
			if e.client == clientB && ri == 1 {
				continue // B uses route 1 only
			}
			d := r.Allow(e.client, t0.Add(e.at))
			if e.client == clientB {
				if !d.OK && d.RetryAfter == per {
					bBlocks++
				}
				continue
			}
			// A's requests in the window (t-per, t]: those at t, t-2s, ..., at most 5.
			want := L - min(aCount+1, 5)
			if !d.OK || d.Remaining != want {
				t.Fatalf("route %d, A at %v: OK %v Remaining %d; want OK and Remaining %d", ri+1, e.at, d.OK, d.Remaining, want)
			}
		}
		if e.client == clientA {
			aCount++
		}
	}
	if bBlocks != 100 {
		t.Errorf("B was blocked %d times; want 100", bBlocks)
	}
	if aCount < 500 {
		t.Errorf("A sent %d requests; want ≥ 500", aCount)
	}
}

func TestRouteClientsIndependent(t *testing.T) {
	t.Parallel()
	for _, alg := range []limiter.Algorithm{limiter.TokenBucket, limiter.Window} {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			l := newRoute(t, limiter.RouteOptions{Algorithm: alg, Requests: 3, Per: time.Minute, MaxClients: 8})
			for range 10 {
				l.Allow(clientB, t0)
			}
			for i := range 3 {
				if d := l.Allow(clientA, t0); !d.OK || d.Remaining != 2-i {
					t.Errorf("A's request %d while B is limited: OK %v Remaining %d; want OK and %d", i+1, d.OK, d.Remaining, 2-i)
				}
			}
		})
	}
}

func TestNewRouteInvalid(t *testing.T) {
	t.Parallel()
	tests := []limiter.RouteOptions{
		{Algorithm: "fixed", Requests: 1, Per: time.Second},
		{Requests: 0, Per: time.Second},
		{Requests: 1, Per: 0},
		{Requests: 1, Per: -time.Second},
		{Algorithm: limiter.Window, Requests: 1, Per: time.Second, Block: -1},
		{Requests: 1, Per: time.Second, MaxClients: -1},
		{Requests: 1, Per: time.Second, SweepInterval: -1},
		{Requests: 1<<40 + 1, Per: 1 << 59}, // one request is 2^59 units: the capacity overflows
	}
	for _, o := range tests {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			t.Parallel()
			if _, err := limiter.NewRoute(o); !errors.Is(err, limiter.ErrInvalidOptions) {
				t.Errorf("NewRoute(%+v) = %v; want ErrInvalidOptions", o, err)
			}
			if err := o.Validate(); !errors.Is(err, limiter.ErrInvalidOptions) {
				t.Errorf("%+v.Validate() = %v; want ErrInvalidOptions", o, err)
			}
		})
	}
	for _, o := range []limiter.RouteOptions{
		{Requests: 1, Per: time.Second},
		{Algorithm: limiter.Window, Requests: 5, Per: time.Minute, Block: time.Hour},
		{Algorithm: limiter.Window, Requests: 1<<40 + 1, Per: 1 << 59}, // no bucket to overflow
	} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v; want nil", o, err)
		}
	}
}
