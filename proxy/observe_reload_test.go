package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	itestutil "github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// TestReload: a request runs to its end on the routing it arrived on; the
// next one sees the new routes; a routing that does not compile changes
// nothing.
func TestReload(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Header.Get("X-Hold") != "" {
			arrived <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "execution %d", n)
	}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = []Route{{Name: "pay", Method: "POST", Path: "/pay", Idempotent: true}}
	})
	held := make(chan result, 1)
	go func() { held <- tp.do(t, "POST", "/pay", "k1", `{}`, "X-Hold", "1") }()
	<-arrived

	// The new routing drops /pay: it passes through, keys ignored.
	next := tp.p.Policy()
	next.Routes = []Route{{Name: "orders", Method: "POST", Path: "/orders", Idempotent: true}}
	if err := tp.p.Apply(next); err != nil {
		t.Fatal(err)
	}
	if got := tp.p.Policy().Routes[0].Name; got != "orders" {
		t.Errorf("Policy() = %q; want orders", got)
	}
	for i := range 2 {
		if r := tp.do(t, "POST", "/pay", "k1", `{}`); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("/pay after reload #%d = %v; want a pass-through execution", i, r)
		}
	}
	close(release)
	if r := <-held; r.status != 201 {
		t.Errorf("held request = %v; want 201", r)
	}
	// The held request finished on the old routing: its answer is recorded.
	itestutil.Eventually(t, 10*time.Second, "k1 recorded as completed on route pay", func() bool {
		rec, err := tp.store.Get(t.Context(), scopeKey(tp.p, "", nil, "k1"))
		return err == nil && rec.State == keystore.StateCompleted && rec.Route == "pay"
	})

	// Ambiguous routes are refused; the running routing stays.
	bad := tp.p.Policy()
	bad.Routes = []Route{
		{Name: "a", Method: "GET", Path: "/x/{id}"},
		{Name: "b", Method: "GET", Path: "/x/{other}"},
	}
	if err := tp.p.Apply(bad); err == nil {
		t.Fatal("Apply(ambiguous) = nil; want an error")
	}
	if got := tp.p.Policy().Routes[0].Name; got != "orders" {
		t.Errorf("after a refused reload, Policy() = %q; want orders", got)
	}
	if r := tp.do(t, "POST", "/orders", "k9", `{}`); r.status != 201 {
		t.Errorf("/orders = %v", r)
	}
	if r := tp.do(t, "POST", "/orders", "k9", `{}`); r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("/orders retry = %v; want a replay", r)
	}
}

// TestReloadUnderLoad swaps routings while requests flow (run with -race):
// every request succeeds on one routing or the other.
func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, nil)
	a := tp.p.Policy()
	b := a
	b.Routes = append([]Route{{Name: "extra", Method: "POST", Path: "/extra", Idempotent: true}}, a.Routes...)
	const workers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan string, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r := tp.do(t, "POST", "/ucp/v1/carts", fmt.Sprintf("w%d-%d", w, i), `{}`)
				if r.status != 201 {
					errs <- r.String()
				}
			}
		})
	}
	for i := range 200 {
		rt := a
		if i%2 == 0 {
			rt = b
		}
		if err := tp.p.Apply(rt); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("request failed during reloads: %s", e)
	}
}

// RouteDropHeaders answers from the running routes: a route's own
// drop_headers (even none), false for a route without them or a route
// gone, and a reload's routes at once.
func TestRouteDropHeadersFollowsReload(t *testing.T) {
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = []Route{
			{Name: "pay", Method: "POST", Path: "/pay", Idempotent: true, DropHeaders: []string{"X-Secret"}},
			{Name: "none", Method: "POST", Path: "/none", Idempotent: true, DropHeaders: []string{}},
			{Name: "global", Method: "POST", Path: "/global", Idempotent: true},
		}
	})
	check := func(name string, want []string, wantOK bool) {
		t.Helper()
		got, ok := tp.p.RouteDropHeaders(name)
		if ok != wantOK || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("RouteDropHeaders(%q) = %v, %v; want %v, %v", name, got, ok, want, wantOK)
		}
	}
	check("pay", []string{"X-Secret"}, true)
	check("none", []string{}, true)
	check("global", nil, false)
	check("gone", nil, false)
	pol := tp.p.Policy()
	pol.Routes = []Route{{Name: "global", Method: "POST", Path: "/global", Idempotent: true, DropHeaders: []string{"Set-Cookie"}}}
	if err := tp.p.Apply(pol); err != nil {
		t.Fatal(err)
	}
	check("pay", nil, false)
	check("global", []string{"Set-Cookie"}, true)
}

// A reload may change the upstream: requests that arrive after it go to the
// new one, with its timeout for routes without their own, while a request
// already running finishes on the old one. A relative URL is refused and
// changes nothing.
func TestReloadChangesUpstream(t *testing.T) {
	arrived := make(chan struct{})
	release := make(chan struct{})
	oldUp := newUpstream(t)
	oldUp.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Header.Get("X-Hold") != "" {
			arrived <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "old")
	}
	newUp := newUpstream(t)
	newUp.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "new")
	}
	routes := []Route{{Name: "pay", Method: "POST", Path: "/pay", Idempotent: true}}
	tp := newTestProxy(t, oldUp.URL, func(o *Options, _ *memstore.Options) { o.Stages.Routes = routes })
	held := make(chan result, 1)
	go func() { held <- tp.do(t, "POST", "/pay", "k-held", `{}`, "X-Hold", "1") }()
	<-arrived

	u, _ := url.Parse(newUp.URL)
	pol := tp.p.Policy()
	pol.Upstream = Upstream{URL: &url.URL{Path: "/relative"}, Timeout: time.Second}
	if err := tp.p.Apply(pol); err == nil {
		t.Errorf("Apply with a relative upstream URL = nil; want an error")
	}
	pol.Upstream = Upstream{URL: u, Timeout: 7 * time.Second}
	if err := tp.p.Apply(pol); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/pay", "/elsewhere"} {
		if r := tp.do(t, "POST", path, "", `{}`); string(r.body) != "new" {
			t.Errorf("POST %s after the reload = %v; want the new upstream's answer", path, r)
		}
	}
	if got := tp.p.cur.Load().routes[0].timeout; got != 7*time.Second {
		t.Errorf("the route's timeout = %v; want the new upstream's 7s", got)
	}
	close(release)
	if r := <-held; r.status != http.StatusCreated || string(r.body) != "old" {
		t.Errorf("the request running during the reload = %v; want the old upstream's answer", r)
	}
}
