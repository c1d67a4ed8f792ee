package proxy

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/limiter"
	"github.com/idemgate/idemgate/limiter/redislimiter"
)

// limitsProxy is a test proxy whose limit stages come from o, on a fake
// clock.
func limitsProxy(t *testing.T, up string, o limitOptions, mod func(*Options)) (*testProxy, *testutil.Clock) {
	t.Helper()
	clk := testutil.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tp := newTestProxy(t, up, func(opts *Options, _ *memstore.Options) {
		opts.Now = clk.Now
		opts.Stages.Edge, opts.Stages.RouteLimits = o.Edge, o.Routes
		opts.Stages.IETFHeaders = o.IETFHeaders
		if o.Logger != nil {
			opts.Logger = o.Logger
		}
		if mod != nil {
			mod(opts)
		}
	})
	return tp, clk
}

func localRoute(t *testing.T, o limiter.RouteOptions) *limiter.Limiter {
	t.Helper()
	l, err := limiter.NewRoute(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func localEdge(t *testing.T, o limiter.EdgeOptions) *limiter.Limiter {
	t.Helper()
	l, err := limiter.NewEdge(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// limitHeaders returns the limit headers of r, "" for each one absent.
func limitHeaders(r result) [3]string {
	return [3]string{r.header.Get("X-RateLimit-Limit"), r.header.Get("X-RateLimit-Remaining"), r.header.Get("X-RateLimit-Reset")}
}

// TestRouteLimitHeaders: passed answers, replays included, carry this
// request's X-RateLimit-*, replacing any the upstream sent (and so any a
// stored answer holds); a 429 carries Retry-After and no X-RateLimit-*.
func TestRouteLimitHeaders(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		// An upstream with limits of its own.
		w.Header().Set("X-RateLimit-Limit", "1000")
		w.Header().Set("X-RateLimit-Remaining", "999")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{}`))
	}
	win := localRoute(t, limiter.RouteOptions{Algorithm: limiter.Window, Requests: 3, Per: time.Minute})
	tp, clk := limitsProxy(t, up.URL, limitOptions{Routes: map[string]Limiter{"create_cart": win}}, nil)

	first := tp.do(t, "POST", "/ucp/v1/carts", "k1", `{}`)
	if got, want := limitHeaders(first), [3]string{"3", "2", "60"}; first.status != 201 || got != want {
		t.Errorf("first = %v, X-RateLimit-* %q; want 201, %q", first, got, want)
	}
	if v := first.header.Values("X-RateLimit-Limit"); len(v) != 1 {
		t.Errorf("X-RateLimit-Limit values %q; want ours alone", v)
	}
	clk.Advance(20 * time.Second)
	replay := tp.do(t, "POST", "/ucp/v1/carts", "k1", `{}`)
	if got, want := limitHeaders(replay), [3]string{"3", "1", "40"}; replay.status != 201 || replay.header.Get("Idempotent-Replayed") != "true" || got != want {
		t.Errorf("replay = %v (replayed %q), X-RateLimit-* %q; want a 201 replay with this request's %q",
			replay, replay.header.Get("Idempotent-Replayed"), got, want)
	}
	third := tp.do(t, "POST", "/ucp/v1/carts", "", `{}`) // unkeyed, unprotected
	if got, want := limitHeaders(third), [3]string{"3", "0", "40"}; got != want {
		t.Errorf("third X-RateLimit-* = %q; want %q", got, want)
	}
	refused := tp.do(t, "POST", "/ucp/v1/carts", "k2", `{}`)
	if refused.status != 429 || problemCode(t, refused) != "rate_limited" || refused.header.Get("Retry-After") != "60" {
		t.Errorf("over the limit = %v, Retry-After %q; want 429 rate_limited, Retry-After 60", refused, refused.header.Get("Retry-After"))
	}
	if got := limitHeaders(refused); got != ([3]string{}) {
		t.Errorf("429 X-RateLimit-* = %q; want none", got)
	}
	clk.Advance(ms(59500))
	if r := tp.do(t, "POST", "/ucp/v1/carts", "k2", `{}`); r.status != 429 || r.header.Get("Retry-After") != "1" {
		t.Errorf("0.5 s before the block ends = %v, Retry-After %q; want 429, 1 (rounded up)", r, r.header.Get("Retry-After"))
	}
	// Routes without a limiter keep what the upstream sent.
	if r, want := tp.do(t, "GET", "/ucp/v1/carts/c1", "", ""), [3]string{"1000", "999", ""}; limitHeaders(r) != want {
		t.Errorf("unlimited route: X-RateLimit-* = %q; want the upstream's %q", limitHeaders(r), want)
	}
}

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// TestIETFHeaders: the draft's RateLimit-Policy and RateLimit (-08 to -10
// form) next to X-RateLimit-* when switched on, on 429s too; none when off.
func TestIETFHeaders(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tests := []struct {
		name string
		on   bool
	}{{"on", true}, {"off", false}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := localRoute(t, limiter.RouteOptions{Requests: 2, Per: time.Minute})
			tp, _ := limitsProxy(t, up.URL, limitOptions{Routes: map[string]Limiter{"get_cart": tb}, IETFHeaders: tt.on}, nil)
			var got [3][2]string
			for i := range got {
				r := tp.do(t, "GET", "/ucp/v1/carts/c1", "", "")
				got[i] = [2]string{r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit")}
				if i == 2 && (r.status != 429 || r.header.Get("Retry-After") != "30") {
					t.Errorf("3rd = %v, Retry-After %q; want 429, 30", r, r.header.Get("Retry-After"))
				}
			}
			want := [3][2]string{
				{`"get_cart";q=2;w=60`, `"get_cart";r=1;t=30`},
				{`"get_cart";q=2;w=60`, `"get_cart";r=0;t=30`},
				{`"get_cart";q=2;w=60`, `"get_cart";r=0;t=30`},
			}
			if !tt.on {
				want = [3][2]string{}
			}
			if got != want {
				t.Errorf("RateLimit-Policy, RateLimit =\n%q\nwant\n%q", got, want)
			}
		})
	}
}

func TestSFString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"create_cart": `"create_cart"`,
		`a"b\c`:       `"a\"b\\c"`,
		"tab\tü":      `"tab___"`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s; want %s", in, got, want)
		}
	}
}

// TestEdgeLimitStage: 201 pass from an idle client at once, matched or not;
// the 202nd gets 429 with Retry-After: 1 and no limit headers.
func TestEdgeLimitStage(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp, clk := limitsProxy(t, up.URL, limitOptions{
		Edge:   localEdge(t, limiter.EdgeOptions{Rate: 100, Burst: 200}),
		Routes: map[string]Limiter{"get_cart": localRoute(t, limiter.RouteOptions{Requests: 1, Per: time.Hour})},
	}, nil)
	passed := 0
	for i := range 400 {
		path := "/nowhere"
		if i == 0 {
			path = "/ucp/v1/carts/c1"
		}
		r := tp.do(t, "GET", path, "", "")
		switch {
		case r.status == 429:
			if r.header.Get("Retry-After") != "1" || limitHeaders(r) != ([3]string{}) {
				t.Fatalf("edge 429: Retry-After %q, X-RateLimit-* %q; want 1 and none", r.header.Get("Retry-After"), limitHeaders(r))
			}
		case path == "/nowhere" && limitHeaders(r) != ([3]string{}):
			t.Fatalf("edge-passed answer has X-RateLimit-* %q; want none", limitHeaders(r))
		default:
			passed++
		}
	}
	if passed != 201 {
		t.Errorf("%d of 400 passed the edge; want 201", passed)
	}
	clk.Advance(3 * time.Second)
	if r := tp.do(t, "GET", "/ucp/v1/carts/c1", "", ""); r.status != 429 {
		t.Errorf("second get_cart within the hour = %v; want 429 from the route limit", r)
	}
}

// TestSharedBudgetWarning: with no trusted proxies, the first request from a
// loopback or private peer logs one warning; nothing is logged when proxies
// are trusted or the peer is public.
func TestSharedBudgetWarning(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tests := []struct {
		name    string
		trusted []netip.Prefix
		client  string // the client address the proxy decides ("" the loopback peer)
		want    int
	}{
		{"loopback peer, no trusted proxies", nil, "", 1},
		{"private client, no trusted proxies", nil, "10.1.2.3", 1},
		{"public client", nil, "203.0.113.7", 0},
		{"trusted proxies", mustPrefixes("10.0.0.0/8"), "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logs := &testutil.SyncBuffer{}
			tb := localRoute(t, limiter.RouteOptions{Requests: 100, Per: time.Minute})
			tp, _ := limitsProxy(t, up.URL, limitOptions{
				Edge:           localEdge(t, limiter.EdgeOptions{Rate: 100, Burst: 200}),
				Routes:         map[string]Limiter{"get_cart": tb},
				TrustedProxies: tt.trusted,
				Logger:         slog.New(slog.NewJSONHandler(logs, nil)),
			}, func(o *Options) {
				o.TrustedProxies = tt.trusted
				if tt.client != "" {
					o.ClientAddr = func(netip.Addr, []string, []netip.Prefix) netip.Addr { return netip.MustParseAddr(tt.client) }
				}
			})
			for range 5 {
				tp.do(t, "GET", "/ucp/v1/carts/c1", "", "")
				tp.do(t, "GET", "/nowhere", "", "")
			}
			got := strings.Count(logs.String(), "client_ip.trusted_proxies is empty")
			if got != tt.want {
				t.Errorf("%d warnings; want %d. Logs:\n%s", got, tt.want, logs.String())
			}
			if got == 1 && !strings.Contains(logs.String(), `"level":"WARN"`) {
				t.Errorf("the warning is not at WARN level:\n%s", logs.String())
			}
		})
	}
}

// TestRedisLimiterDown: a proxy whose limiters keep their state in an
// unreachable Redis serves every request at once, unlimited and without
// limit headers, and counts each fallback.
func TestRedisLimiterDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // connections are refused
	client, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{dead}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	b, err := redislimiter.New(client, redislimiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	edge, err := b.NewEdge("edge", limiter.EdgeOptions{Rate: 1, Burst: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer edge.Close()
	route, err := b.NewRoute("route:create_cart", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 1, Per: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer route.Close()
	up := newUpstream(t)
	tp, _ := limitsProxy(t, up.URL, limitOptions{Edge: edge, Routes: map[string]Limiter{"create_cart": route}}, nil)
	start := time.Now()
	for i := range 20 {
		r := tp.do(t, "POST", "/ucp/v1/carts", "", `{}`)
		if r.status != 201 || limitHeaders(r) != ([3]string{}) {
			t.Fatalf("request %d with Redis down = %v, X-RateLimit-* %q; want 201 from the upstream, no limit headers", i, r, limitHeaders(r))
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("20 requests with Redis down took %v; want well under 2s", took)
	}
	if got := b.Fallbacks(); got != 40 {
		t.Errorf("Fallbacks() = %d; want 40 (two limiters, 20 requests)", got)
	}
}

// TestLimitWriterStreams: a passed answer that streams (flushes before its
// end) still gets its limit headers, and the flush reaches the client.
func TestLimitWriterStreams(t *testing.T) {
	t.Parallel()
	tb := localRoute(t, limiter.RouteOptions{Requests: 5, Per: time.Minute})
	ls, err := newLimitStages(limitOptions{Routes: map[string]Limiter{"s": tb}, Now: time.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	flushed := make(chan struct{})
	h := ls.routeStage()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first"))
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush = %v", err)
		}
		<-flushed
		w.Write([]byte(" second"))
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := &exchange{ResponseWriter: w, client: netip.MustParseAddr("192.0.2.1"), route: &route{Route: Route{Name: "s"}}}
		h.ServeHTTP(ex, withExchange(r, ex))
	}))
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, 5)
	if _, err := res.Body.Read(buf); err != nil || string(buf) != "first" {
		t.Errorf("read before the end = %q, %v; want the flushed %q", buf, err, "first")
	}
	close(flushed)
	if res.Header.Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("X-RateLimit-Remaining = %q; want 4", res.Header.Get("X-RateLimit-Remaining"))
	}
}

func TestNewLimitStagesNil(t *testing.T) {
	t.Parallel()
	if _, err := newLimitStages(limitOptions{Routes: map[string]Limiter{"r": nil}}); err == nil {
		t.Error("NewLimits with a nil route limiter = nil error")
	}
	ls, err := newLimitStages(limitOptions{})
	if err != nil || ls.edgeStage() != nil || ls.routeStage() != nil {
		t.Errorf("newLimitStages({}) = stages %v %v, %v; want no stages", ls.edgeStage() != nil, ls.routeStage() != nil, err)
	}
}

// BenchmarkLimitStages measures the limit stages alone (a request that
// passes, no upstream) per decision: local limiters, and the Redis limiters
// when IDEMGATE_TEST_REDIS_ADDR is set. Each goroutine is its own client.
func BenchmarkLimitStages(b *testing.B) {
	for _, backend := range []string{"local", "redis"} {
		b.Run(backend, func(b *testing.B) {
			var edge, route Limiter
			if backend == "local" {
				e, _ := limiter.NewEdge(limiter.EdgeOptions{Rate: 1 << 30, Burst: 200})
				r, _ := limiter.NewRoute(limiter.RouteOptions{Requests: 1 << 30, Per: time.Second})
				b.Cleanup(func() { e.Close(); r.Close() })
				edge, route = e, r
			} else {
				addr := redistest.Addr(b)
				client, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{addr}})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { client.Close() })
				rb, err := redislimiter.New(client, redislimiter.Options{KeyPrefix: "idemgate-bench:"})
				if err != nil {
					b.Fatal(err)
				}
				e, _ := rb.NewEdge("edge", limiter.EdgeOptions{Rate: 1 << 20, Burst: 200})
				r, _ := rb.NewRoute("route:bench", limiter.RouteOptions{Requests: 1 << 20, Per: time.Second})
				b.Cleanup(func() { e.Close(); r.Close() })
				edge, route = e, r
			}
			ls, err := newLimitStages(limitOptions{Edge: edge, Routes: map[string]Limiter{"bench": route}, Now: time.Now, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
			h := ls.edgeStage()(ls.routeStage()(ok))
			var next atomic.Uint32
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				n := next.Add(1)
				client := netip.AddrFrom4([4]byte{198, 51, byte(n >> 8), byte(n)})
				w := &discardWriter{h: http.Header{}}
				ex := &exchange{}
				req := withExchange(httptest.NewRequest("GET", "/bench", nil), ex)
				for pb.Next() {
					*ex = exchange{ResponseWriter: w, client: client, route: benchRoute, ctx: ex.ctx}
					clear(w.h)
					h.ServeHTTP(ex, req)
				}
			})
		})
	}
}

var benchRoute = &route{Route: Route{Name: "bench"}}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}
