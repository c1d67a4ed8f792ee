package redislimiter_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/limiter"
	"github.com/idemgate/idemgate/limiter/redislimiter"
	"github.com/idemgate/idemgate/proxy"
)

// replica is one proxy (as one process would run it) whose limiters share
// Redis with the other replicas: its own client, Backend and limiters.
func replica(t *testing.T, topo redistest.Topology, prefix string, clk *clock, upstream string, route limiter.RouteOptions) *httptest.Server {
	t.Helper()
	b := newBackend(t, newClient(t, topo), clk, redislimiter.Options{KeyPrefix: prefix})
	edge := newEdge(t, b, nginxDefault)
	routes := map[string]proxy.Limiter{"get_cart": newRoute(t, b, "route:get_cart", route)}
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	p := proxy.New(proxy.Deps{Transport: tr, Now: clk.now})
	err = p.Apply(proxy.Policy{
		Upstream:    proxy.Upstream{URL: u, Timeout: time.Minute},
		Idempotency: proxy.Idempotency{Header: "Idempotency-Key", Lease: time.Minute, MaxLease: time.Minute, MaxBodyBytes: 1 << 20, MaxResponseBytes: 64 << 10, ReuseStatus: http.StatusConflict},
		Routes:      []proxy.Route{{Name: "get_cart", Method: "GET", Path: "/carts/{id}"}},
		Edge:        edge,
		RouteLimits: routes,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.Close()
		p.Close()
		tr.CloseIdleConnections()
	})
	return srv
}

type answer struct {
	status                       int
	retryAfter, limit, remaining string
}

func get(t *testing.T, c *http.Client, url string) answer {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return answer{res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("X-RateLimit-Limit"), res.Header.Get("X-RateLimit-Remaining")}
}

// TestTwoReplicasShareOneBudget: two proxies with their limiters in one
// Redis enforce one budget per client. 400 requests from one client,
// alternating between them, at one instant: exactly 201 pass the edge (not
// 2 × 201); and a route's window of 5 per minute admits 5 in all, with
// Remaining counting down across both, then blocks on both.
func TestTwoReplicasShareOneBudget(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(up.Close) // after the parallel subtests
	for _, topo := range redistest.All() {
		t.Run(topo.String(), func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			prefix := newPrefix()
			window := limiter.RouteOptions{Algorithm: limiter.Window, Requests: 5, Per: time.Minute}
			replicas := []*httptest.Server{
				replica(t, topo, prefix, clk, up.URL, window),
				replica(t, topo, prefix, clk, up.URL, window),
			}
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}

			passed, refused := [2]int{}, 0
			for i := range 400 {
				a := get(t, c, replicas[i%2].URL+"/nowhere")
				switch a.status {
				case http.StatusOK:
					passed[i%2]++
				case http.StatusTooManyRequests:
					refused++
					if a.retryAfter != "1" {
						t.Fatalf("request %d: 429 with Retry-After %q; want 1", i, a.retryAfter)
					}
				default:
					t.Fatalf("request %d: status %d", i, a.status)
				}
			}
			if passed[0]+passed[1] != 201 || refused != 199 {
				t.Errorf("400 alternating requests: %d + %d passed, %d refused; want 201 passed in all, 199 refused", passed[0], passed[1], refused)
			}

			clk.advance(3 * time.Second) // the edge bucket is full again
			for i := range 7 {
				a := get(t, c, replicas[i%2].URL+"/carts/c1")
				want := answer{http.StatusOK, "", "5", fmt.Sprint(4 - i)}
				if i >= 5 {
					want = answer{http.StatusTooManyRequests, "60", "", ""}
				}
				if a != want {
					t.Errorf("route request %d on replica %d = %+v; want %+v", i, i%2, a, want)
				}
			}
		})
	}
}
