package app

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/proxy"
)

// limitsReplica runs an app for yaml on loopback listeners and returns it
// with its public base URL and its logs.
func limitsReplica(t *testing.T, yaml string) (*App, string, *syncBuffer) {
	t.Helper()
	var logs syncBuffer
	a, err := New(e2eConfig(t, yaml), Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return a, serveTestApp(t, a), &logs
}

func limitsYAML(upstream, redisAddr, prefix string) string {
	return `
upstream: {url: "` + upstream + `"}
edge_limit: {rate: 1, burst: 200}
limiter: {backend: redis, ietf_headers: true}
store:
  redis: {addrs: ["` + redisAddr + `"], key_prefix: "` + prefix + `", timeout: 1s}
routes:
  - {name: get_cart, method: GET, path: "/carts/{id}", rate_limit: {requests: 3, per: 60s, algorithm: window}}
`
}

// TestRedisLimitsE2E: two idemgate replicas with limiter.backend redis
// share one budget per client. The route's window admits 3 in all, with the
// IETF headers switched on. The edge allows 1 r/s with a burst of 200: after
// those 5 requests, 400 more alternating between the replicas give the
// remaining 196 passes, plus at most one more per second they took (Redis's
// clock runs on; the exact numbers, 201 of 400, are proven on an injected
// clock in limiter/redislimiter).
func TestRedisLimitsE2E(t *testing.T) {
	t.Parallel()
	redisAddr := redistest.Addr(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	prefix := e2ePrefix(t)
	a1, base1, logs := limitsReplica(t, limitsYAML(up.URL, redisAddr, prefix))
	a2, base2, _ := limitsReplica(t, limitsYAML(up.URL, redisAddr, prefix))
	bases := []string{base1, base2}
	c := e2eClient(t)
	get := func(url string) *http.Response {
		res, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}

	// The route's window: 3 in all, then 429 on both replicas. These 5
	// requests take 5 of the edge's 201.
	start := time.Now()
	for i := range 5 {
		res := get(bases[i%2] + "/carts/c1")
		const policy = `"get_cart";q=3;w=60`
		want := fmt.Sprintf("200 3 %d %q", 2-i, policy)
		if i >= 3 {
			want = fmt.Sprintf("429   %q", policy)
		}
		got := fmt.Sprintf("%d %s %s %q", res.StatusCode, res.Header.Get("X-RateLimit-Limit"), res.Header.Get("X-RateLimit-Remaining"), res.Header.Get("RateLimit-Policy"))
		if got != want {
			t.Errorf("route request %d = %s; want %s", i, got, want)
		}
	}

	passed := 0
	for i := range 400 {
		if res := get(bases[i%2] + "/nowhere"); res.StatusCode == http.StatusOK {
			passed++
		} else if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" {
			t.Fatalf("request %d: %d, Retry-After %q; want 200, or 429 with Retry-After 1", i, res.StatusCode, res.Header.Get("Retry-After"))
		}
	}
	took := time.Since(start)
	// Every request that passed the edge took one of its 201, the route's
	// 429s included; the bucket refills one per second from the first.
	if maxPassed := 196 + int(took/time.Second) + 1; passed < 196 || passed > maxPassed {
		t.Errorf("400 requests over two replicas in %v: %d passed; want 201 - 5 = 196 (at most %d with the refill)", took, passed, maxPassed)
	}
	t.Logf("edge: %d of 400 passed in %v", passed, took.Round(time.Millisecond))
	rejected := 0.0
	for _, a := range []*App{a1, a2} {
		for _, m := range a.counters("idemgate_limiter_rejections_total") {
			if labelOf(m, "limiter") == proxy.LimiterEdge && labelOf(m, "route") == "" {
				rejected += valueOf(m)
			}
		}
	}
	if int(rejected) != 400-passed {
		t.Errorf("edge rejections counted %v; want %d", rejected, 400-passed)
	}

	// Each replica counts its own refusals by client: every request came
	// from 127.0.0.1, so its busiest edge client holds them all.
	for i, a := range []*App{a1, a2} {
		set := a.limits.Load()
		var want uint64
		for _, m := range a.counters("idemgate_limiter_rejections_total") {
			if labelOf(m, "limiter") == proxy.LimiterEdge && labelOf(m, "route") == "" {
				want += uint64(valueOf(m))
			}
		}
		busy := set.busiest()
		if len(busy) != 2 || busy[0].Limiter != proxy.LimiterEdge || len(busy[0].Clients) != 1 ||
			busy[0].Clients[0].Client != "127.0.0.1/32" || busy[0].Clients[0].Refused != want {
			t.Errorf("replica %d: busiest = %+v; want the edge's 127.0.0.1/32 with its %d refusals first, then get_cart's", i+1, busy, want)
		}
	}

	if a1.limits.Load().fallbacks()+a2.limits.Load().fallbacks() != 0 {
		t.Errorf("fallbacks with Redis up: %d, %d; want 0", a1.limits.Load().fallbacks(), a2.limits.Load().fallbacks())
	}
	// Requests come from 127.0.0.1 and no proxy is trusted: one warning.
	if n := strings.Count(logs.String(), "client_ip.trusted_proxies is empty"); n != 1 {
		t.Errorf("%d shared-budget warnings; want 1", n)
	}
}

// TestRedisLimitsDown: with limiter.backend redis and Redis unreachable,
// the proxy starts and every request passes at once, counted.
func TestRedisLimitsDown(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	a, base, logs := limitsReplica(t, limitsYAML(up.URL, testutil.DeadAddr(t), e2ePrefix(t)))
	c := e2eClient(t)
	start := time.Now()
	for i := range 300 {
		res, err := c.Get(base + "/carts/c1")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("request %d with Redis down: %d, X-RateLimit-Limit %q; want 200 unlimited, no headers", i, res.StatusCode, res.Header.Get("X-RateLimit-Limit"))
		}
	}
	// A stall per request would take 300 × timeout (300 s); failing fast
	// takes well under a second. The bound leaves room for a loaded CI.
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("300 requests with Redis down took %v; want no wait for a store that refuses", took)
	}
	if got := a.limits.Load().fallbacks(); got != 600 {
		t.Errorf("fallbacks = %d; want 600 (edge and route, 300 requests)", got)
	}
	if n := strings.Count(logs.String(), "Redis unavailable"); n != 1 {
		t.Errorf("%d Redis-unavailable log lines; want 1", n)
	}
}
