package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	itestutil "github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
)

// TestObserveMode: in observe mode every duplicate reaches the upstream,
// what enforce mode would have done is counted and logged, and the store
// keeps the first answers, so that switching to enforce replays them.
func TestObserveMode(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	arrived := make(chan struct{}, 4)
	release := make(chan struct{})
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Header.Get("X-Hold") != "" {
			arrived <- struct{}{}
			<-release
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Execution", fmt.Sprint(n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"execution":%d,"body":%q}`, n, body)
	}
	routes := []Route{
		{Name: "create_cart", Method: "POST", Path: "/ucp/v1/carts", Idempotent: true, Observe: true},
		{Name: "strict", Method: "POST", Path: "/strict", Idempotent: true, RequireKey: true, Observe: true},
	}
	mp := newMeteredProxy(t, up.URL, routes, func(o *Options, _ *Metrics) {
		o.Idempotency.MaxBodyBytes = 64
	})
	m := mp.m
	countIs := func(outcome string, want float64) { waitCount(t, m, "create_cart", outcome, want) }
	const path = "/ucp/v1/carts"

	first := mp.do(t, "POST", path, "k1", `{"a":1}`)
	if first.status != 201 || first.header.Get("X-Execution") != "1" {
		t.Fatalf("first = %v; want 201, execution 1", first)
	}
	// Duplicates run again, unreplayed.
	for i := 2; i <= 3; i++ {
		r := mp.do(t, "POST", path, "k1", `{"a":1}`)
		if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" || r.header.Get("X-Execution") != fmt.Sprint(i) {
			t.Errorf("duplicate %d = %v, replayed %q; want a new execution", i, r, r.header.Get("Idempotent-Replayed"))
		}
	}
	if n := up.executions("POST", path, "k1"); n != 3 {
		t.Errorf("k1 ran %d times; want 3 (observe mode forwards duplicates)", n)
	}
	countIs(OutcomeWouldReplay, 2)
	// A key reused with another body runs too.
	if r := mp.do(t, "POST", path, "k1", `{"a":2}`); r.status != 201 {
		t.Errorf("reuse = %v; want 201", r)
	}
	countIs(OutcomeWouldKeyReused, 1)
	// A duplicate of a request still running runs alongside it.
	held := make(chan result, 1)
	go func() { held <- mp.do(t, "POST", path, "k2", `{}`, "X-Hold", "1") }()
	<-arrived
	if r := mp.do(t, "POST", path, "k2", `{}`); r.status != 201 {
		t.Errorf("duplicate in progress = %v; want 201", r)
	}
	countIs(OutcomeWouldInProgress, 1)
	close(release)
	if r := <-held; r.status != 201 {
		t.Errorf("held = %v", r)
	}
	// What enforce mode refuses reaches the upstream whole.
	big := strings.Repeat("x", 200)
	for _, c := range []struct {
		name, key, body string
	}{
		{"invalid key", "bad key", `{}`},
		{"body over max_body_bytes", "k3", big},
	} {
		r := mp.do(t, "POST", path, c.key, c.body)
		if r.status != 201 || !strings.Contains(string(r.body), fmt.Sprintf("%q", c.body)) {
			t.Errorf("%s = %v; want 201 with the whole body forwarded", c.name, r)
		}
	}
	// A chunked body over the limit streams whole too.
	req, _ := http.NewRequest("POST", mp.URL+path, io.MultiReader(strings.NewReader(big), strings.NewReader(big)))
	req.Header.Set("Idempotency-Key", "k4")
	res, err := mp.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 201 || !strings.Contains(string(b), fmt.Sprintf("%q", big+big)) {
		t.Errorf("chunked body over the limit = %d %.80s; want 201 with the whole body", res.StatusCode, b)
	}
	countIs(OutcomeWouldReject, 3)
	if r := mp.do(t, "POST", "/strict", "", `{}`); r.status != 201 {
		t.Errorf("require_key without a key = %v; want 201", r)
	}
	waitCount(t, m, "strict", OutcomeWouldReject, 1)
	if r := mp.do(t, "POST", path, "", `{}`); r.status != 201 {
		t.Errorf("no key = %v; want 201", r)
	}
	countIs(OutcomeUnprotected, 1)
	if !strings.Contains(mp.logs.String(), `"outcome":"would_replay"`) {
		t.Errorf("the access log has no would_replay outcome")
	}

	// The store holds the first answers: enforce mode replays them.
	rec, err := mp.store.Get(context.Background(), scopeKey(mp.p, "", nil, "k1"))
	if err != nil || rec.State != keystore.StateCompleted || !strings.Contains(string(rec.Response.Body), `"execution":1`) {
		t.Fatalf("k1's record = %+v, %v; want completed with execution 1", rec, err)
	}
	rt := mp.p.Policy()
	enforced := append([]Route(nil), rt.Routes...)
	for i := range enforced {
		enforced[i].Observe = false
	}
	rt.Routes = enforced
	if err := mp.p.Apply(rt); err != nil {
		t.Fatal(err)
	}
	r := mp.do(t, "POST", path, "k1", `{"a":1}`)
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("X-Execution") != "1" {
		t.Errorf("after switching to enforce = %v, X-Execution %q; want the first answer replayed", r, r.header.Get("X-Execution"))
	}
	if n := up.executions("POST", path, "k1"); n != 4 {
		t.Errorf("k1 ran %d times; want 4", n)
	}
}

// TestObserveStoreDown: in observe mode a store that cannot be reached
// fails open: the keyed write runs, counted as would_unavailable.
func TestObserveStoreDown(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	mp := newMeteredProxy(t, up.URL, []Route{{Name: "w", Method: "POST", Path: "/w", Idempotent: true, Observe: true}}, nil)
	mp.store.Close()
	r := mp.do(t, "POST", "/w", "k", `{}`)
	if r.status != 201 {
		t.Errorf("store down = %v; want 201", r)
	}
	waitCount(t, mp.m, "w", OutcomeWouldUnavailable, 1)
}

// waitCount waits (at most 5 s) for the count of route's requests with
// outcome and status 201 to reach want: a request is counted when its
// handler returns, which may be just after its client read the answer.
func waitCount(t *testing.T, m *Metrics, route, outcome string, want float64) {
	t.Helper()
	itestutil.Eventually(t, 5*time.Second, fmt.Sprintf("%v %s requests of route %s", want, outcome, route), func() error {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(route, outcome, "201")); got != want {
			return fmt.Errorf("counted %v", got)
		}
		return nil
	})
}
