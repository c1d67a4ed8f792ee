package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/pathtmpl"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/limiter"
)

var completeRoutes = []Route{
	{Name: "complete_checkout", Method: "POST", Path: "/ucp/v1/checkout-sessions/{id}/complete", Idempotent: true, RequireKey: true},
}

// rawRequest sends the request head line (and Host and the lines of hdr)
// over a new TCP connection to addr and returns the answer.
func rawRequest(t *testing.T, addr, line string, hdr ...string) result {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "%s\r\nHost: shop.example\r\nContent-Length: 2\r\nContent-Type: application/json\r\n", line)
	for _, h := range hdr {
		fmt.Fprintf(c, "%s\r\n", h)
	}
	io.WriteString(c, "\r\n{}")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return result{res.StatusCode, res.Header, b}
}

// TestPathSpellingsHitTheRoute is issue 13's finding 2: every spelling
// that an upstream would route to a require_key route is checked as that
// route (400 idempotency_key_missing without a key), or refused as
// ambiguous (400 request_invalid); none of them reaches the upstream.
// Sent over raw TCP connections, so the spellings arrive exactly as
// written.
func TestPathSpellingsHitTheRoute(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Stages.Routes = completeRoutes })
	addr := strings.TrimPrefix(tp.URL, "http://")
	for _, line := range []string{
		"POST /ucp/v1/checkout-sessions/1/complete HTTP/1.1",
		"POST /ucp/v1/checkout-sessions/1/complete/ HTTP/1.1",
		"POST /ucp/v1/checkout-sessions/1/complete;x=1 HTTP/1.1",
		"POST /ucp/v1/checkout-sessions/1/%63omplete HTTP/1.1",
		"POST /ucp/v1/checkout-sessions/1%2fcomplete HTTP/1.1",
		"POST /ucp/v1/checkout-sessions/1%2Fcomplete HTTP/1.1",
		"POST /UCP/v1/checkout-sessions/1/complete HTTP/1.1",
		"POST /UCP/V1/Checkout-Sessions/1/COMPLETE HTTP/1.1",
		"post /ucp/v1/checkout-sessions/1/complete HTTP/1.1",
		"Post /ucp/v1/checkout-sessions/1/complete HTTP/1.1",
		"POST //ucp/v1/./checkout-sessions/1/x/../complete HTTP/1.1",
		"POST /ucp/v1/checkout-sessions/1/complete%3Bx=1 HTTP/1.1",
		"POST /ucp/v1/checkout-sessions/1%5Ccomplete HTTP/1.1",
		"POST /ucp/v1/checkout-sessions/1/complete?x=1 HTTP/1.1",
	} {
		res := rawRequest(t, addr, line)
		if code := problemCode(t, res); res.status != 400 || code != "idempotency_key_missing" && code != "request_invalid" {
			t.Errorf("%s = %v; want 400 idempotency_key_missing or request_invalid", line, res)
		}
	}
	if n := up.total.Load(); n != 0 {
		t.Errorf("the upstream ran %d requests; want 0", n)
	}
	// With a key, each non-ambiguous spelling runs once, forwarded exactly
	// as received.
	for i, line := range []string{
		"POST /ucp/v1/checkout-sessions/1/%63omplete HTTP/1.1",
		"post /UCP/v1/checkout-sessions/1/complete/ HTTP/1.1",
	} {
		res := rawRequest(t, addr, line, fmt.Sprintf("Idempotency-Key: spelled-%d", i), "Authorization: a")
		if res.status != 201 {
			t.Errorf("%s with a key = %v; want the upstream's 201", line, res)
		}
		last := up.lastRequest()
		method, uri, _ := strings.Cut(strings.TrimSuffix(line, " HTTP/1.1"), " ")
		if last == nil || last.Method != method || last.RequestURI != uri {
			t.Errorf("upstream got %v; want %s %s as received", last, method, uri)
		}
	}
}

// TestPathInvalid: a path that cannot be normalized gets 400
// request_invalid on a listener with a protected route, and passes through
// on one without.
func TestPathInvalid(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	protected := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Stages.Routes = completeRoutes })
	open := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = []Route{{Name: "get", Method: "GET", Path: "/x/{id}"}}
	})
	for _, line := range []string{
		"GET /a/../../etc HTTP/1.1",
		"POST /%2e%2e/ucp/v1/checkout-sessions/1/complete HTTP/1.1",
		"POST /ucp/v1/checkout-sessions/1/complete/../../../../../.. HTTP/1.1",
	} {
		res := rawRequest(t, strings.TrimPrefix(protected.URL, "http://"), line)
		if res.status != 400 || problemCode(t, res) != "request_invalid" {
			t.Errorf("%s on a protected listener = %v; want 400 request_invalid", line, res)
		}
	}
	if n := up.total.Load(); n != 0 {
		t.Errorf("the upstream ran %d requests; want 0", n)
	}
	res := rawRequest(t, strings.TrimPrefix(open.URL, "http://"), "GET /a/../../etc HTTP/1.1")
	if res.status != 201 {
		t.Errorf("un-normalizable path without protected routes = %v; want the upstream's 201", res)
	}
}

// TestPathCaseSensitive: with path_case: sensitive, a spelling in another
// case is another endpoint (passed through), parameters always keep case.
func TestPathCaseSensitive(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = completeRoutes
		o.Stages.PathCase = pathtmpl.CaseSensitive
	})
	addr := strings.TrimPrefix(tp.URL, "http://")
	if res := rawRequest(t, addr, "POST /ucp/v1/checkout-sessions/1/complete HTTP/1.1"); res.status != 400 || problemCode(t, res) != "idempotency_key_missing" {
		t.Errorf("exact spelling = %v; want 400 idempotency_key_missing", res)
	}
	if res := rawRequest(t, addr, "POST /UCP/v1/checkout-sessions/1/complete HTTP/1.1"); res.status != 201 {
		t.Errorf("other case under path_case sensitive = %v; want a pass-through 201", res)
	}
}

// TestRejectionOrder pins DESIGN.md step 4's order of the checks that need
// no body, then the body: edge limit → path → route match → route limit →
// key syntax → tenant → identity → body → claim. Each row fails every check
// from its own on; the first failing check answers, and nothing runs.
func TestRejectionOrder(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	edge, err := limiter.NewEdge(limiter.EdgeOptions{Rate: 1, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}
	route, err := limiter.NewRoute(limiter.RouteOptions{Algorithm: limiter.Window, Requests: 1000, Per: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { edge.Close(); route.Close() })
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Now = func() time.Time { return now }
		o.Stages.Routes = completeRoutes
		o.Stages.Edge = edge
		o.Stages.RouteLimits = map[string]Limiter{"complete_checkout": route}
		o.Stages.RequireIdentity = true
		o.Idempotency.MaxBodyBytes = 8
		o.Idempotency.TenantFor = tenantHosts(map[string]string{"shop.example": "shop"})
	})
	addr := strings.TrimPrefix(tp.URL, "http://")
	send := func(line string, hdr ...string) result {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, line+"\r\nContent-Type: application/json\r\nContent-Length: 20\r\n")
		for _, h := range hdr {
			io.WriteString(c, h+"\r\n")
		}
		io.WriteString(c, "\r\n{\"too\":\"large body\"}")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return result{res.StatusCode, res.Header, b}
	}
	const (
		badPath  = "POST /ucp/v1/checkout-sessions/1%2Fx/complete HTTP/1.1"
		good     = "POST /ucp/v1/checkout-sessions/1/complete HTTP/1.1"
		unknown  = "Host: unknown.example"
		known    = "Host: shop.example"
		badKey   = "Idempotency-Key: bad key"
		goodKey  = "Idempotency-Key: k"
		identity = "Authorization: Bearer a"
	)
	for _, tt := range []struct {
		name   string
		line   string
		hdr    []string
		status int
		code   string
	}{
		{"path before the key", badPath, []string{unknown, badKey}, 400, "request_invalid"},
		{"key syntax before the tenant", good, []string{unknown, badKey}, 400, "idempotency_key_invalid"},
		{"key missing before the tenant", good, []string{unknown}, 400, "idempotency_key_missing"},
		{"tenant before the identity and the body", good, []string{unknown, goodKey}, 421, "tenant_unknown"},
		{"identity before the body", good, []string{known, goodKey}, 400, "idempotency_identity_missing"},
		{"body last", good, []string{known, goodKey, identity}, 413, "request_too_large"},
	} {
		r := send(tt.line, tt.hdr...)
		if r.status != tt.status || problemCode(t, r) != tt.code {
			t.Errorf("%s: %v; want %d %s", tt.name, r, tt.status, tt.code)
		}
	}
	// The route limit answers before the key check; the edge limit before
	// the path.
	route2, err := limiter.NewRoute(limiter.RouteOptions{Algorithm: limiter.Window, Requests: 1, Per: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { route2.Close() })
	st := tp.p.Policy()
	st.RouteLimits = map[string]Limiter{"complete_checkout": route2}
	if err := tp.p.Apply(st); err != nil {
		t.Fatal(err)
	}
	send(good, known) // uses the route limit up
	if r := send(good, unknown, badKey); r.status != 429 || problemCode(t, r) != "rate_limited" {
		t.Errorf("route limit before the key: %v; want 429 rate_limited", r)
	}
	edge2, err := limiter.NewEdge(limiter.EdgeOptions{Rate: 1, Burst: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { edge2.Close() })
	st.Edge = edge2
	if err := tp.p.Apply(st); err != nil {
		t.Fatal(err)
	}
	send("GET /nowhere HTTP/1.1", known) // uses the edge limit up
	if r := send(badPath, unknown, badKey); r.status != 429 || problemCode(t, r) != "rate_limited" {
		t.Errorf("edge limit before the path: %v; want 429 rate_limited", r)
	}
	if n := up.total.Load(); n != 1 {
		t.Errorf("upstream ran %d requests; want 1 (the GET that used the edge limit up)", n)
	}
}
