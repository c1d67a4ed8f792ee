package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/internal/modes"
	itestutil "github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// holdRoutes are lateRoutes on unknown_outcome: hold, plus a route whose
// upstream breaks the connection after reading the request.
func holdRoutes(wait time.Duration) []Route {
	rs := lateRoutes(wait)
	rs = append(rs, Route{Name: "broken", Method: "POST", Path: "/broken", Idempotent: true, Timeout: 5 * time.Second})
	for i := range rs {
		if rs[i].Idempotent {
			rs[i].UnknownOutcome = modes.UnknownHold
		}
	}
	return rs
}

// newHoldProxy is a proxy on holdRoutes in front of a held upstream,
// whose /broken hangs up on every request it read, unheld.
func newHoldProxy(t *testing.T, wait time.Duration) (*itestutil.HeldUpstream, *testProxy, *Metrics) {
	t.Helper()
	up := itestutil.NewHeldUpstream(t, itestutil.HeldOptions{
		Hold: func(r *http.Request) bool { return r.URL.Path != "/broken" },
		Answer: func(w http.ResponseWriter, r *http.Request, n int) {
			if r.URL.Path == "/broken" {
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close()
				}
				return
			}
			itestutil.WriteCreated(w, r, n)
		},
	})
	m := NewMetrics(prometheus.NewRegistry(), "test", "")
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = holdRoutes(wait)
		o.Metrics = m
	})
	return up, tp, m
}

// wantUnknown checks that r is 409 idempotency_outcome_unknown without
// Retry-After.
func wantUnknown(t *testing.T, what string, r result) {
	t.Helper()
	if r.status != http.StatusConflict || problemCode(t, r) != "idempotency_outcome_unknown" {
		t.Fatalf("%s = %v; want 409 idempotency_outcome_unknown", what, r)
	}
	if ra := r.header.Get("Retry-After"); ra != "" {
		t.Errorf("%s: Retry-After %q; want none", what, ra)
	}
}

// TestHoldBroken: on a hold route, a write whose connection broke after
// it was sent is marked unknown at once: every retry gets 409
// idempotency_outcome_unknown and nothing runs, until a resolution: a
// complete replays, a release lets the next retry run once. Without hold
// (the old behaviour) the retry after the lease would run it again.
func TestHoldBroken(t *testing.T) {
	t.Parallel()
	up, tp, m := newHoldProxy(t, time.Minute)
	first := tp.do(t, "POST", "/broken", "k1", `{"amount":1}`)
	if first.status != http.StatusBadGateway || problemCode(t, first) != "upstream_broken" {
		t.Fatalf("first = %v; want 502 upstream_broken", first)
	}
	for i := range 3 {
		wantUnknown(t, "retry", tp.do(t, "POST", "/broken", "k1", `{"amount":1}`))
		if i == 0 {
			tp.clock.Advance(time.Hour) // long past the lease: still held
		}
	}
	if n := up.Count("k1"); n != 1 {
		t.Errorf("executions = %d; want 1", n)
	}
	if n := testutil.ToFloat64(m.unknowns.WithLabelValues("broken", "broken")); n != 1 {
		t.Errorf("idemgate_unknown_outcomes_total{cause=broken} = %v; want 1", n)
	}
	sk := tp.p.scope(httptestRequest(), "k1")
	logs := tp.logs.String()
	if !strings.Contains(logs, `"key_hash":"`+sk.String()+`"`) || !strings.Contains(logs, `"cause":"broken"`) ||
		!strings.Contains(logs, `"request_id":"`+first.header.Get("X-Request-Id")+`"`) || strings.Contains(logs, `"k1"`) {
		t.Errorf("want a log line with the key's hash, the cause and the request id, never the key:\n%s", logs)
	}
	if line := accessLine(logs, ""); line != nil {
		t.Errorf("an access-log line without a request id: %v", line)
	}
	rec, err := tp.store.Get(context.Background(), sk)
	if err != nil || rec.State != keystore.StateUnknown || rec.Info.Header.Get(keystore.InfoPath) != "/broken" {
		t.Fatalf("record = %+v, %v; want unknown with the original's path", rec, err)
	}
	// An operator completes it: the retry replays.
	if err := tp.store.Resolve(context.Background(), sk, rec.ClaimID, &keystore.Response{Status: 201, Body: []byte(`{"resolved":true}`)}); err != nil {
		t.Fatal(err)
	}
	if r := tp.do(t, "POST", "/broken", "k1", `{"amount":1}`); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry after complete = %v; want the replay", r)
	}
	// Another key, released: the next retry runs, once.
	if r := tp.do(t, "POST", "/pay", "k2", `{}`); r.status != http.StatusGatewayTimeout {
		t.Fatalf("k2 = %v; want 504", r)
	}
	up.Arrival(t, "k2")
	up.Open()
	itestutil.Eventually(t, 10*time.Second, "k2's late answer recorded", func() bool {
		return tp.do(t, "POST", "/pay", "k2", `{}`).status == http.StatusCreated
	})
}

// TestHoldLateTimeout: a kept call whose late wait ends without an answer
// is marked unknown (cause late_timeout); late_answer_wait 0 marks it at
// the timeout.
func TestHoldLateTimeout(t *testing.T) {
	t.Parallel()
	for _, wait := range []time.Duration{0, 200 * time.Millisecond} {
		up, tp, m := newHoldProxy(t, wait)
		if r := tp.do(t, "POST", "/pay", "k1", `{}`); r.status != http.StatusGatewayTimeout {
			t.Fatalf("late_answer_wait %v: first = %v; want 504", wait, r)
		}
		up.Arrival(t, "k1")
		var r result
		itestutil.Eventually(t, 10*time.Second, "the late wait to end", func() error {
			if r = tp.do(t, "POST", "/pay", "k1", `{}`); r.status == http.StatusConflict && problemCode(t, r) == "idempotency_in_progress" {
				return fmt.Errorf("still in progress: %v", r)
			}
			return nil
		})
		wantUnknown(t, "retry after the late wait", r)
		if n := testutil.ToFloat64(m.unknowns.WithLabelValues("pay", "late_timeout")); n != 1 {
			t.Errorf("late_answer_wait %v: unknown outcomes late_timeout = %v; want 1", wait, n)
		}
		up.Open()
		if n := up.Count("k1"); n != 1 {
			t.Errorf("executions = %d; want 1", n)
		}
	}
}

// TestHoldLapsed: a sent claim whose lease lapsed (its holder lost track,
// as one that died would) is marked unknown by the retry that finds it,
// never taken over; the holder's own late answer then resolves it, and
// the retry replays it. (A lapsed claim without the sent mark is taken
// over: keystore/storetest's LapsedWithoutSentMarkTakenOver.)
func TestHoldLapsed(t *testing.T) {
	t.Parallel()
	up, tp, m := newHoldProxy(t, time.Minute)
	first := tp.do(t, "POST", "/pay", "k1", `{}`)
	if first.status != http.StatusGatewayTimeout {
		t.Fatalf("first = %v; want 504", first)
	}
	up.Arrival(t, "k1")
	tp.clock.Advance(10 * time.Minute) // past the lease (120s): it lapsed
	wantUnknown(t, "retry of the lapsed sent claim", tp.do(t, "POST", "/pay", "k1", `{}`))
	wantUnknown(t, "second retry", tp.do(t, "POST", "/pay", "k1", `{}`))
	if n := testutil.ToFloat64(m.unknowns.WithLabelValues("pay", "lapsed")); n != 1 {
		t.Errorf("unknown outcomes lapsed = %v; want 1", n)
	}
	if !strings.Contains(tp.logs.String(), `"request_id":"`+first.header.Get("X-Request-Id")+`","route":"pay","cause":"lapsed"`) {
		t.Errorf("no log line of the lapsed outcome with the original's request id:\n%s", tp.logs.String())
	}
	up.Open()
	var r result
	itestutil.Eventually(t, 10*time.Second, "the holder's late answer to resolve it", func() error {
		if r = tp.do(t, "POST", "/pay", "k1", `{}`); r.status != http.StatusCreated {
			return fmt.Errorf("retry = %v", r)
		}
		return nil
	})
	if n := up.Count("k1"); n != 1 {
		t.Errorf("executions = %d; want 1", n)
	}
}

// TestHoldShutdown: at the shutdown's deadline a kept call on a hold route
// is marked unknown (cause shutdown).
func TestHoldShutdown(t *testing.T) {
	t.Parallel()
	up, tp, m := newHoldProxy(t, 30*time.Minute)
	if r := tp.do(t, "POST", "/pay", "k1", `{}`); r.status != http.StatusGatewayTimeout {
		t.Fatalf("first = %v; want 504", r)
	}
	up.Arrival(t, "k1")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	tp.p.Shutdown(ctx)
	rec, err := tp.store.Get(context.Background(), tp.p.scope(httptestRequest(), "k1"))
	if err != nil || rec.State != keystore.StateUnknown || rec.Cause != keystore.CauseShutdown {
		t.Errorf("record after shutdown = %+v, %v; want unknown, cause shutdown", rec, err)
	}
	if n := testutil.ToFloat64(m.unknowns.WithLabelValues("pay", "shutdown")); n != 1 {
		t.Errorf("unknown outcomes shutdown = %v; want 1", n)
	}
	up.Open()
}

// TestHoldWaiter: with in_progress: wait on a hold route, a waiter that
// finds the original's sent claim lapsed marks it unknown, as a retry
// does, and answers 409 idempotency_outcome_unknown at once, instead of
// claiming it.
func TestHoldWaiter(t *testing.T) {
	t.Parallel()
	up, tp, m := newHoldProxy(t, time.Minute)
	rs := holdRoutes(time.Minute)
	for i := range rs {
		if rs[i].Idempotent {
			rs[i].InProgress, rs[i].WaitTimeout, rs[i].Timeout = modes.InProgressWait, 20*time.Second, 30*time.Second
		}
	}
	st := tp.p.Policy()
	st.Routes = rs
	if err := tp.p.Apply(st); err != nil {
		t.Fatal(err)
	}
	// The original's claim, sent by a holder that then lost track of it.
	first := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("POST", tp.URL+"/pay", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "k1")
		req.Header.Set("Content-Type", "application/json")
		res, err := tp.Client().Do(req)
		if err != nil {
			first <- result{}
			return
		}
		first <- readResult(t, res)
	}()
	up.Arrival(t, "k1")
	waiter := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("POST", tp.URL+"/pay", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "k1")
		req.Header.Set("Content-Type", "application/json")
		res, err := tp.Client().Do(req)
		if err != nil {
			waiter <- result{}
			return
		}
		waiter <- readResult(t, res)
	}()
	sk := tp.p.scope(httptestRequest(), "k1")
	itestutil.Eventually(t, 10*time.Second, "the duplicate waiting", func() bool {
		tp.p.waiters.mu.Lock()
		defer tp.p.waiters.mu.Unlock()
		return tp.p.waiters.n[sk] == 1
	})
	tp.clock.Advance(10 * time.Minute) // the original's lease lapsed
	select {
	case r := <-waiter:
		wantUnknown(t, "the waiter", r)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not answer within 10s of the lapse")
	}
	if n := testutil.ToFloat64(m.unknowns.WithLabelValues("pay", "lapsed")); n != 1 {
		t.Errorf("unknown outcomes lapsed = %v; want 1", n)
	}
	up.Open()
	<-first
	if n := up.Count("k1"); n != 1 {
		t.Errorf("executions = %d; want 1", n)
	}
}
