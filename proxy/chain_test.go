package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/limiter"
)

// TestChainOrder pins DESIGN.md's order: the edge limit sees every request,
// matched or not, before anything else; the route limit runs before the key
// check, so a refusal never claims a key.
func TestChainOrder(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	edge, err := limiter.NewEdge(limiter.EdgeOptions{Rate: 1, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	route, err := limiter.NewRoute(limiter.RouteOptions{Algorithm: limiter.Window, Requests: 1, Per: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { edge.Close(); route.Close() })
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Now = clock
		o.Stages.Edge = edge
		o.Stages.RouteLimits = map[string]Limiter{"create_cart": route}
	})

	first := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
	if first.status != 201 || first.header.Get("X-RateLimit-Limit") != "1" || first.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("first = %v, X-RateLimit-Limit %q, -Remaining %q; want 201, 1, 0", first, first.header.Get("X-RateLimit-Limit"), first.header.Get("X-RateLimit-Remaining"))
	}
	// The route limit refuses the retry before the key check: no replay.
	r := tp.do(t, "POST", "/ucp/v1/carts", "other-key", `{}`)
	if r.status != 429 || problemCode(t, r) != "rate_limited" || r.header.Get("Retry-After") != "60" {
		t.Errorf("over the route limit = %v, Retry-After %q; want 429 rate_limited, Retry-After 60", r, r.header.Get("Retry-After"))
	}
	if n := up.executions("POST", "/ucp/v1/carts", "other-key"); n != 0 {
		t.Errorf("a refused request ran %d times", n)
	}
	// The edge limit (burst+1 = 2, both used) refuses even an unmatched path.
	r = tp.do(t, "GET", "/nowhere", "", "")
	if r.status != 429 || problemCode(t, r) != "rate_limited" {
		t.Errorf("unmatched path over the edge limit = %v; want 429", r)
	}
	// Once both limits have room, the refused key was never claimed: it runs.
	now = now.Add(2 * time.Minute)
	r = tp.do(t, "POST", "/ucp/v1/carts", "other-key", `{}`)
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("after the block = %v; want a first execution", r)
	}
}

// panicLimiter panics in the edge stage, as a broken stage would.
type panicLimiter struct{}

func (panicLimiter) AllowContext(context.Context, limiter.Key, time.Time) limiter.Decision {
	panic("broken limiter")
}

func (panicLimiter) Policy() limiter.Policy { return limiter.Policy{} }

// TestPanicAnswersProblem: a stage that panics before anything was written
// gets the same problem+json as every other refusal (500 internal, with the
// request ID), is logged, and the proxy keeps serving.
func TestPanicAnswersProblem(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Stages.Edge = panicLimiter{} })
	for range 2 {
		r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
		if r.status != 500 || problemCode(t, r) != "internal" {
			t.Errorf("a panicking stage = %v; want 500 internal", r)
		}
	}
	if n := strings.Count(tp.logs.String(), "panic serving request"); n != 2 {
		t.Errorf("%d panics logged; want 2", n)
	}
}
