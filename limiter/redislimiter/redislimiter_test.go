package redislimiter_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/limiter"
	"github.com/idemgate/idemgate/limiter/redislimiter"
)

// nginxDefault is DESIGN.md's edge limit: rate=100r/s burst=200 nodelay.
var nginxDefault = limiter.EdgeOptions{Rate: 100, Burst: 200}

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// burst sends n requests from k at clk's time (the real time when clk is
// nil) and returns how many passed.
func burst(l *redislimiter.Limiter, clk *clock, k limiter.Key, n int) int {
	passed := 0
	for range n {
		now := time.Now()
		if clk != nil {
			now = clk.now()
		}
		if l.AllowContext(ctx, k, now).OK {
			passed++
		}
	}
	return passed
}

// TestEdgeExact is limiter's edge proof (issue 5) run by the Redis script
// on an injected clock: exact numbers at exact boundaries.
func TestEdgeExact(t *testing.T) {
	t.Parallel()
	a := key("198.51.100.1")
	eachTopology(t, func(t *testing.T, c redis.UniversalClient) {
		tests := []struct {
			name string
			run  func(t *testing.T, l *redislimiter.Limiter, clk *clock)
		}{
			{"burst of 400 from idle: 201 pass, again after 2.01 s, 200 after 2.009 s", func(t *testing.T, l *redislimiter.Limiter, clk *clock) {
				if got := burst(l, clk, a, 400); got != 201 {
					t.Fatalf("idle client's burst of 400: %d passed; want 201", got)
				}
				clk.advance(ms(2009))
				if got := burst(l, clk, a, 400); got != 200 {
					t.Errorf("burst of 400 after 2.009 s: %d passed; want 200", got)
				}
				clk.advance(ms(2010))
				if got := burst(l, clk, a, 400); got != 201 {
					t.Errorf("burst of 400 after 2.01 s: %d passed; want 201", got)
				}
			}},
			{"paced at 10 ms: all 200 pass", func(t *testing.T, l *redislimiter.Limiter, clk *clock) {
				burst(l, clk, a, 201)
				passed := 0
				for range 200 {
					clk.advance(ms(10))
					if l.AllowContext(ctx, a, clk.now()).OK {
						passed++
					}
				}
				if passed != 200 {
					t.Errorf("200 paced at 10 ms after saturation: %d passed; want 200", passed)
				}
			}},
			{"paced at 8 ms: 160 pass", func(t *testing.T, l *redislimiter.Limiter, clk *clock) {
				burst(l, clk, a, 201)
				passed := 0
				for range 200 {
					clk.advance(ms(8))
					if l.AllowContext(ctx, a, clk.now()).OK {
						passed++
					}
				}
				if passed != 160 {
					t.Errorf("200 paced at 8 ms after saturation: %d passed; want 160", passed)
				}
			}},
			{"9.999 ms after saturation fails, 10 ms passes", func(t *testing.T, l *redislimiter.Limiter, clk *clock) {
				burst(l, clk, a, 201)
				clk.advance(ms(9.999))
				if d := l.AllowContext(ctx, a, clk.now()); d.OK || d.RetryAfter != time.Microsecond {
					t.Errorf("at 9.999 ms: %+v; want refused, RetryAfter 1µs", d)
				}
				clk.advance(time.Microsecond)
				if d := l.AllowContext(ctx, a, clk.now()); !d.OK || d.Remaining != 0 {
					t.Errorf("at 10 ms: %+v; want passed, Remaining 0", d)
				}
			}},
			{"decision numbers", func(t *testing.T, l *redislimiter.Limiter, clk *clock) {
				d := l.AllowContext(ctx, a, clk.now())
				want := limiter.Decision{OK: true, Limit: 201, Remaining: 200, Reset: ms(10)}
				if d != want {
					t.Errorf("first request = %+v; want %+v", d, want)
				}
				burst(l, clk, a, 200)
				clk.advance(ms(3))
				d = l.AllowContext(ctx, a, clk.now())
				want = limiter.Decision{Limit: 201, Reset: ms(7), RetryAfter: ms(7)}
				if d != want {
					t.Errorf("3 ms after saturation = %+v; want %+v", d, want)
				}
			}},
			{"two clients and two /64s are independent", func(t *testing.T, l *redislimiter.Limiter, clk *clock) {
				burst(l, clk, a, 201)
				for _, other := range []string{"198.51.100.2", "2001:db8:0:1::1"} {
					if got := burst(l, clk, key(other), 400); got != 201 {
						t.Errorf("%s after %s saturated: %d passed; want 201", other, a, got)
					}
				}
				if got := burst(l, clk, key("2001:db8:0:1::ffff"), 1); got != 0 {
					t.Errorf("another address in the saturated /64: %d passed; want 0", got)
				}
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				clk := newClock()
				tt.run(t, newEdge(t, newBackend(t, c, clk, redislimiter.Options{}), nginxDefault), clk)
			})
		}
	})
}

// TestEdgeRefusalsConsumeNothing sends refused requests through limiters
// with empty deny caches (as many replicas would), so that every one of them
// reaches the script.
func TestEdgeRefusalsConsumeNothing(t *testing.T) {
	t.Parallel()
	a := key("198.51.100.1")
	eachTopology(t, func(t *testing.T, c redis.UniversalClient) {
		clk := newClock()
		b := newBackend(t, c, clk, redislimiter.Options{})
		l := newEdge(t, b, nginxDefault)
		burst(l, clk, a, 201)
		clk.advance(ms(5))
		for range 300 {
			fresh, err := b.NewEdge("edge", limiter.EdgeOptions{Rate: 100, Burst: 200, MaxClients: 1})
			if err != nil {
				t.Fatal(err)
			}
			if d := fresh.AllowContext(ctx, a, clk.now()); d.OK {
				t.Fatalf("5 ms after saturation = %+v; want refused", d)
			}
			fresh.Close()
		}
		clk.advance(ms(5))
		if d := l.AllowContext(ctx, a, clk.now()); !d.OK {
			t.Errorf("10 ms after saturation, after 300 refusals = %+v; want passed", d)
		}
		clk.advance(ms(2010))
		if got := burst(l, clk, a, 400); got != 201 {
			t.Errorf("after 2.01 s idle: %d passed; want 201", got)
		}
	})
}

func TestTokenBucketExact(t *testing.T) {
	t.Parallel()
	a := key("192.0.2.1")
	eachTopology(t, func(t *testing.T, c redis.UniversalClient) {
		clk := newClock()
		l := newRoute(t, newBackend(t, c, clk, redislimiter.Options{}), "route:tb", limiter.RouteOptions{Requests: 600, Per: time.Minute})
		for i := range 600 {
			d := l.AllowContext(ctx, a, clk.now())
			// Reset: until Remaining next grows, the next token.
			if !d.OK || d.Limit != 600 || d.Remaining != 599-i || d.Reset != ms(100) {
				t.Fatalf("request %d = %+v; want passed, Limit 600, Remaining %d, Reset 100ms", i+1, d, 599-i)
			}
		}
		if d := l.AllowContext(ctx, a, clk.now()); d.OK || d.RetryAfter != ms(100) {
			t.Errorf("601st = %+v; want refused, RetryAfter 100ms", d)
		}
		clk.advance(ms(100))
		if d := l.AllowContext(ctx, a, clk.now()); !d.OK || d.Remaining != 0 {
			t.Errorf("100 ms later = %+v; want passed, Remaining 0", d)
		}
		clk.advance(time.Minute)
		if d := l.AllowContext(ctx, a, clk.now()); !d.OK || d.Remaining != 599 {
			t.Errorf("a minute later = %+v; want passed, Remaining 599", d)
		}
	})
}

func TestWindowExact(t *testing.T) {
	t.Parallel()
	a := key("192.0.2.1")
	eachTopology(t, func(t *testing.T, c redis.UniversalClient) {
		t.Run("limit, block counting down, restart from zero", func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			l := newRoute(t, newBackend(t, c, clk, redislimiter.Options{}), "route:w", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 5, Per: 3 * time.Second})
			for i := range 5 {
				clk.advance(ms(100))
				d := l.AllowContext(ctx, a, clk.now())
				want := limiter.Decision{OK: true, Limit: 5, Remaining: 4 - i, Reset: 3*time.Second - ms(100)*time.Duration(i)}
				if d != want {
					t.Fatalf("request %d = %+v; want %+v", i+1, d, want)
				}
			}
			if d := l.AllowContext(ctx, a, clk.now()); d.OK || d.RetryAfter != 3*time.Second {
				t.Fatalf("6th = %+v; want refused, RetryAfter 3s (the block)", d)
			}
			clk.advance(ms(1142))
			if d := l.AllowContext(ctx, a, clk.now()); d.OK || d.RetryAfter != ms(1858) {
				t.Errorf("1.142 s into the block = %+v; want refused, RetryAfter 1.858s", d)
			}
			clk.advance(ms(1858))
			if d := l.AllowContext(ctx, a, clk.now()); !d.OK || d.Remaining != 4 || d.Reset != 3*time.Second {
				t.Errorf("when the block ends = %+v; want passed, Remaining 4, Reset 3s", d)
			}
		})
		t.Run("sliding, not fixed", func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			l := newRoute(t, newBackend(t, c, clk, redislimiter.Options{}), "route:w", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 4, Per: time.Minute})
			burst(l, clk, a, 2)
			clk.advance(30 * time.Second)
			burst(l, clk, a, 1)
			if d := l.AllowContext(ctx, a, clk.now()); !d.OK || d.Remaining != 0 || d.Reset != 30*time.Second {
				t.Errorf("4th at 30 s = %+v; want passed, Remaining 0, Reset 30s (the t=0 requests leave then)", d)
			}
			clk.advance(ms(29900))
			if d := l.AllowContext(ctx, a, clk.now()); d.OK || d.RetryAfter != time.Minute {
				t.Errorf("at 59.9 s = %+v; want refused with a block of 1m", d)
			}
		})
		t.Run("each request counts exactly per", func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				gap  time.Duration
				want int
			}{{ms(59999.999), 2}, {time.Minute, 3}} {
				clk := newClock()
				l := newRoute(t, newBackend(t, c, clk, redislimiter.Options{}), "route:w", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 4, Per: time.Minute})
				burst(l, clk, a, 1)
				clk.advance(tc.gap)
				if d := l.AllowContext(ctx, a, clk.now()); d.Remaining != tc.want {
					t.Errorf("second request %v after the first: Remaining %d; want %d", tc.gap, d.Remaining, tc.want)
				}
			}
		})
	})
}

// TestMatchesLocal runs random schedules on whole microseconds through the
// scripts and through package limiter's limiters: the decisions must be the
// same (Reset and RetryAfter within 1µs where the limiter's nanosecond
// rounding differs from the script's microsecond rounding).
func TestMatchesLocal(t *testing.T) {
	t.Parallel()
	type mk struct {
		name  string
		local func() (*limiter.Limiter, error)
		redis func(b *redislimiter.Backend) (*redislimiter.Limiter, error)
		exact bool
	}
	edge := limiter.EdgeOptions{Rate: 100, Burst: 20}
	tb := limiter.RouteOptions{Requests: 30, Per: 3 * time.Second}
	odd := limiter.RouteOptions{Requests: 7, Per: time.Second}
	win := limiter.RouteOptions{Algorithm: limiter.Window, Requests: 30, Per: 3 * time.Second, Block: 2 * time.Second}
	cases := []mk{
		{"edge", func() (*limiter.Limiter, error) { return limiter.NewEdge(edge) },
			func(b *redislimiter.Backend) (*redislimiter.Limiter, error) { return b.NewEdge("edge", edge) }, true},
		{"token_bucket", func() (*limiter.Limiter, error) { return limiter.NewRoute(tb) },
			func(b *redislimiter.Backend) (*redislimiter.Limiter, error) { return b.NewRoute("tb", tb) }, true},
		{"token_bucket_7_per_s", func() (*limiter.Limiter, error) { return limiter.NewRoute(odd) },
			func(b *redislimiter.Backend) (*redislimiter.Limiter, error) { return b.NewRoute("odd", odd) }, false},
		{"window", func() (*limiter.Limiter, error) { return limiter.NewRoute(win) },
			func(b *redislimiter.Backend) (*redislimiter.Limiter, error) { return b.NewRoute("win", win) }, true},
	}
	eachTopology(t, func(t *testing.T, c redis.UniversalClient) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				clk := newClock()
				local, err := tc.local()
				if err != nil {
					t.Fatal(err)
				}
				defer local.Close()
				// MaxClients 1 keeps the deny cache from answering for long.
				shared, err := tc.redis(newBackend(t, c, clk, redislimiter.Options{}))
				if err != nil {
					t.Fatal(err)
				}
				defer shared.Close()
				rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
				keys := []limiter.Key{key("203.0.113.1"), key("203.0.113.2")}
				for i := range 1500 {
					// Mostly bursts, sometimes long pauses.
					switch r := rng.IntN(100); {
					case r < 60:
					case r < 97:
						clk.advance(time.Duration(rng.IntN(40_000)) * time.Microsecond)
					default:
						clk.advance(time.Duration(rng.IntN(4_000_000)) * time.Microsecond)
					}
					k := keys[rng.IntN(len(keys))]
					want := local.Allow(k, clk.now())
					got := shared.AllowContext(ctx, k, clk.now())
					if !sameDecision(got, want, tc.exact) {
						t.Fatalf("decision %d at +%v: Redis %+v; local %+v", i, clk.now().Sub(t0), got, want)
					}
				}
			})
		}
	})
}

func sameDecision(a, b limiter.Decision, exact bool) bool {
	if exact {
		return a == b
	}
	near := func(x, y time.Duration) bool { return x-y < time.Microsecond && y-x < time.Microsecond }
	return a.OK == b.OK && a.Limit == b.Limit && a.Remaining == b.Remaining && near(a.Reset, b.Reset) && near(a.RetryAfter, b.RetryAfter)
}

// TestDenyCache: a client Redis refused is refused locally until its retry
// time, even when its state in Redis is gone, and asks Redis again after.
func TestDenyCache(t *testing.T) {
	t.Parallel()
	a := key("198.51.100.9")
	eachTopology(t, func(t *testing.T, c redis.UniversalClient) {
		clk := newClock()
		b := newBackend(t, c, clk, redislimiter.Options{})
		l := newRoute(t, b, "route:w", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 1, Per: time.Second})
		burst(l, clk, a, 1)
		if d := l.AllowContext(ctx, a, clk.now()); d.OK {
			t.Fatalf("2nd = %+v; want refused", d)
		}
		// Forget the client in Redis: only the deny cache refuses now.
		if err := c.Del(ctx, keyName(b, "route:w", a)+":b").Err(); err != nil {
			t.Fatal(err)
		}
		clk.advance(ms(999.999))
		if d := l.AllowContext(ctx, a, clk.now()); d.OK || d.RetryAfter != time.Microsecond {
			t.Errorf("just before the retry time = %+v; want refused by the deny cache, RetryAfter 1µs", d)
		}
		clk.advance(time.Microsecond)
		if d := l.AllowContext(ctx, a, clk.now()); !d.OK {
			t.Errorf("at the retry time = %+v; want passed", d)
		}
	})
}

// keyName is the Redis key of k's state in limiter name of b (the package
// documentation's format), computed independently.
func keyName(b *redislimiter.Backend, name string, k limiter.Key) string {
	raw := k.As16()
	sum := sha256.Sum256(raw[:])
	return redislimiter.KeyPrefix(b) + "rl:" + name + "{" + hex.EncodeToString(sum[:16]) + "}"
}

// TestKeys: hash-tagged names without the address, and expiry as soon as
// the state is fresh again.
func TestKeys(t *testing.T) {
	t.Parallel()
	a := key("198.51.100.77")
	eachTopology(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, nil, redislimiter.Options{}) // Redis's clock: real expiry
		edge := newEdge(t, b, limiter.EdgeOptions{Rate: 10, Burst: 0})
		win := newRoute(t, b, "route:w", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 1, Per: 200 * time.Millisecond, Block: 300 * time.Millisecond})
		now := time.Now()
		edge.AllowContext(ctx, a, now)
		win.AllowContext(ctx, a, now)
		win.AllowContext(ctx, a, now) // refused: starts the block
		names := []string{keyName(b, "edge", a), keyName(b, "route:w", a) + ":b"}
		for _, name := range names {
			pttl, err := c.PTTL(ctx, name).Result()
			if err != nil || pttl <= 0 || pttl > 300*time.Millisecond {
				t.Errorf("PTTL %s = %v, %v; want in (0, 300ms]", name, pttl, err)
			}
		}
		if slot := func(k string) int64 { return c.ClusterKeySlot(ctx, k).Val() }; slot(names[1]) != slot(keyName(b, "route:w", a)) {
			t.Errorf("a window's two keys are in different slots")
		}
		// Bounded polling: every key vanishes once its state is fresh.
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := c.Exists(ctx, append(names, keyName(b, "route:w", a))...).Result()
			if err == nil && n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of the keys still exist 5 s after their state became fresh (err %v)", n, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestForeignValues: a key holding something the scripts did not write (or
// wrote with other parameters) counts as a fresh client, never as an error.
func TestForeignValues(t *testing.T) {
	t.Parallel()
	a := key("198.51.100.5")
	eachTopology(t, func(t *testing.T, c redis.UniversalClient) {
		clk := newClock()
		b := newBackend(t, c, clk, redislimiter.Options{})
		edge := newEdge(t, b, limiter.EdgeOptions{Rate: 1, Burst: 1})
		win := newRoute(t, b, "route:w", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 2, Per: time.Minute})
		c.RPush(ctx, keyName(b, "edge", a), "x")
		c.Set(ctx, keyName(b, "route:w", a), "x", time.Minute)
		c.RPush(ctx, keyName(b, "route:w", a)+":b", "x")
		if d := edge.AllowContext(ctx, a, clk.now()); !d.OK || d.Remaining != 1 {
			t.Errorf("edge over a list = %+v; want passed, Remaining 1", d)
		}
		if d := win.AllowContext(ctx, a, clk.now()); !d.OK || d.Remaining != 1 {
			t.Errorf("window over foreign values = %+v; want passed, Remaining 1", d)
		}
		// The same name with another rate: the old level is not reused.
		other := newEdge(t, b, limiter.EdgeOptions{Rate: 3, Burst: 1})
		if d := other.AllowContext(ctx, a, clk.now()); !d.OK || d.Remaining != 1 {
			t.Errorf("edge with a new rate = %+v; want passed as fresh, Remaining 1", d)
		}
		if n := b.Fallbacks(); n != 0 {
			t.Errorf("Fallbacks() = %d; want 0", n)
		}
	})
}

func TestDisabledEdge(t *testing.T) {
	t.Parallel()
	b, err := redislimiter.New(unusedClient(t), redislimiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.NewEdge("edge", limiter.EdgeOptions{Rate: 0})
	if err != nil {
		t.Fatal(err)
	}
	if d := l.AllowContext(ctx, key("192.0.2.1"), time.Now()); d != (limiter.Decision{OK: true}) || l.Policy() != (limiter.Policy{}) {
		t.Errorf("disabled edge: %+v, policy %+v; want a bare pass and no policy", d, l.Policy())
	}
	if b.Fallbacks() != 0 {
		t.Errorf("a disabled limiter asked Redis")
	}
	l.Close()
	l.Close()
}

func TestOptionsInvalid(t *testing.T) {
	t.Parallel()
	client := unusedClient(t)
	if _, err := redislimiter.New(nil, redislimiter.Options{}); err == nil {
		t.Error("New(nil) = nil error")
	}
	if _, err := redislimiter.New(client, redislimiter.Options{KeyPrefix: "a{b}:"}); err == nil {
		t.Error("New with a '{' in the prefix = nil error")
	}
	if _, err := redislimiter.New(client, redislimiter.Options{RetryInterval: -1}); err == nil {
		t.Error("New with a negative retry interval = nil error")
	}
	b, err := redislimiter.New(client, redislimiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		make func() (*redislimiter.Limiter, error)
	}{
		{"name with brace", func() (*redislimiter.Limiter, error) { return b.NewEdge("a{b", nginxDefault) }},
		{"empty name", func() (*redislimiter.Limiter, error) { return b.NewEdge("", nginxDefault) }},
		{"negative rate", func() (*redislimiter.Limiter, error) { return b.NewEdge("e", limiter.EdgeOptions{Rate: -1}) }},
		{"per below a microsecond", func() (*redislimiter.Limiter, error) {
			return b.NewRoute("r", limiter.RouteOptions{Requests: 1, Per: 1500 * time.Nanosecond})
		}},
		{"block below a microsecond", func() (*redislimiter.Limiter, error) {
			return b.NewRoute("r", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 1, Per: time.Second, Block: time.Nanosecond})
		}},
		{"capacity too large for exact doubles", func() (*redislimiter.Limiter, error) {
			return b.NewEdge("e", limiter.EdgeOptions{Rate: 1, Per: time.Hour, Burst: 1 << 30})
		}},
		{"unknown algorithm", func() (*redislimiter.Limiter, error) {
			return b.NewRoute("r", limiter.RouteOptions{Algorithm: "leaky", Requests: 1, Per: time.Second})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := tt.make()
			if !errors.Is(err, limiter.ErrInvalidOptions) {
				t.Errorf("err = %v; want ErrInvalidOptions", err)
			}
			if l != nil {
				l.Close()
			}
		})
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	client := unusedClient(t)
	b, err := redislimiter.New(client, redislimiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	edge := newEdge(t, b, nginxDefault)
	win := newRoute(t, b, "w", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 600, Per: time.Minute})
	for _, tc := range []struct {
		got, want limiter.Policy
	}{
		{edge.Policy(), limiter.Policy{Quota: 201, Window: ms(2010)}},
		{win.Policy(), limiter.Policy{Quota: 600, Window: time.Minute}},
	} {
		if tc.got != tc.want {
			t.Errorf("Policy() = %+v; want %+v", tc.got, tc.want)
		}
	}
	if edge.Name() != "edge" || win.Name() != "w" {
		t.Errorf("names %q %q", edge.Name(), win.Name())
	}
}

// unusedClient returns a client for tests that never reach Redis.
func unusedClient(t *testing.T) redis.UniversalClient {
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRealClock runs on Redis's own clock, as in production: numbers within
// what the time the test took allows, and a block that ends when Redis's
// clock says so (bounded polling, no exact-millisecond asserts).
func TestRealClock(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, c redis.UniversalClient) {
		b := newBackend(t, c, nil, redislimiter.Options{})
		t.Run("edge burst", func(t *testing.T) {
			t.Parallel()
			l := newEdge(t, b, nginxDefault)
			k := key("198.51.100.20")
			start := time.Now()
			passed := 0
			for range 400 {
				if l.AllowContext(ctx, k, time.Now()).OK {
					passed++
				}
			}
			took := time.Since(start)
			// One more request's worth drains every 10 ms.
			if maxPassed := 201 + int(took/ms(10)) + 1; passed < 201 || passed > maxPassed {
				t.Errorf("400 at once (%v): %d passed; want 201, at most %d", took, passed, maxPassed)
			}
		})
		t.Run("window block ends on Redis's clock", func(t *testing.T) {
			t.Parallel()
			const block = 300 * time.Millisecond
			l := newRoute(t, b, "route:w", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 2, Per: time.Minute, Block: block})
			k := key("198.51.100.21")
			burst(l, nil, k, 2)
			refusedAt := time.Now()
			d := l.AllowContext(ctx, k, refusedAt)
			if d.OK || d.RetryAfter != block {
				t.Fatalf("3rd = %+v; want refused, RetryAfter %v", d, block)
			}
			deadline := refusedAt.Add(5 * time.Second)
			for {
				now := time.Now()
				d = l.AllowContext(ctx, k, now)
				if d.OK {
					if waited := now.Sub(refusedAt); waited < block-5*time.Millisecond {
						t.Errorf("passed %v after the block began; want ≥ %v", waited, block)
					}
					if d.Remaining != 1 {
						t.Errorf("after the block: Remaining %d; want 1 (the count restarted)", d.Remaining)
					}
					break
				}
				if now.After(deadline) {
					t.Fatalf("still refused 5 s after a %v block: %+v", block, d)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	})
}
