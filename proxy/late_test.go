package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	itestutil "github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/session"
)

// lateTimeout is lateRoutes' timeout: long enough that a request reaches
// the upstream before it on a loaded CI machine (a route's timeout counts
// from arrival; at 300ms a clean-clone run once saw the 504 before the
// request was forwarded).
const lateTimeout = time.Second

// accessLine returns the access-log line of the request with id, or nil.
func accessLine(logs string, id string) map[string]any {
	for line := range strings.SplitSeq(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "request" && m[logRequestID] == id {
			return m
		}
	}
	return nil
}

// lateRoutes has a keyed write with a short timeout and a late wait, and a
// session route on the same carts.
func lateRoutes(wait time.Duration) []Route {
	return []Route{
		{Name: "pay", Method: "POST", Path: "/pay", Idempotent: true, Timeout: lateTimeout, LateAnswerWait: &wait},
		{Name: "update_cart", Method: "PUT", Path: "/carts/{id}", Idempotent: true, Timeout: lateTimeout, Session: Session{Param: "id"}, LateAnswerWait: &wait},
		{Name: "get_cart", Method: "GET", Path: "/carts/{id}", Session: Session{Param: "id"}},
	}
}

// TestLateAnswerKept is issue 26's first proof on the memory store: a
// write slower than its timeout answers its client 504 at the timeout, but
// runs on; its late answer is recorded, logged as late, and replayed to the
// retry, which runs nothing. Without a late wait (the old behaviour) the
// call is cancelled at the timeout and the answer is lost.
func TestLateAnswerKept(t *testing.T) {
	t.Parallel()
	up := itestutil.NewHeldUpstream(t, itestutil.HeldOptions{})
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "test", "")
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = lateRoutes(time.Minute)
		o.Metrics = m
	})
	start := time.Now()
	first := tp.do(t, "POST", "/pay", "k1", `{"amount":1}`)
	took := time.Since(start)
	if first.status != http.StatusGatewayTimeout || problemCode(t, first) != "upstream_timeout" {
		t.Fatalf("first = %v; want 504 upstream_timeout", first)
	}
	if took < lateTimeout || took > lateTimeout+5*time.Second {
		t.Errorf("the 504 came after %v; want it at the %v timeout", took, lateTimeout)
	}
	up.Arrival(t, "k1")
	if n := testutil.ToFloat64(m.lateKept); n != 1 {
		t.Errorf("idemgate_late_calls_kept = %v; want 1", n)
	}
	// Still running: a retry is told so, and runs nothing.
	if r := tp.do(t, "POST", "/pay", "k1", `{"amount":1}`); r.status != http.StatusConflict || problemCode(t, r) != "idempotency_in_progress" {
		t.Fatalf("retry while the call runs = %v; want 409 in progress", r)
	}
	up.Open()
	var retry result
	itestutil.Eventually(t, 10*time.Second, "the late answer replayed", func() error {
		if retry = tp.do(t, "POST", "/pay", "k1", `{"amount":1}`); retry.status != http.StatusCreated {
			return fmt.Errorf("retry = %v", retry)
		}
		return nil
	})
	if retry.header.Get("Idempotent-Replayed") != "true" || string(retry.body) != `{"key":"k1","execution":1}` {
		t.Errorf("retry = %v %v; want the late answer replayed", retry, retry.header)
	}
	if n := up.Count("k1"); n != 1 {
		t.Errorf("executions = %d; want 1", n)
	}
	var line map[string]any
	itestutil.Eventually(t, 10*time.Second, "the first request's access-log line", func() error {
		if line = accessLine(tp.logs.String(), first.header.Get("X-Request-Id")); line == nil {
			return fmt.Errorf("the log:\n%s", tp.logs.String())
		}
		return nil
	})
	if line[logOutcome] != OutcomeLate || line[logStatus] != float64(504) {
		t.Errorf("first request's log line = %v; want outcome late, status 504", line)
	}
	itestutil.Eventually(t, 10*time.Second, "the kept call counted as late, no longer as kept", func() bool {
		return testutil.ToFloat64(m.lateKept) == 0 && testutil.ToFloat64(m.requests.WithLabelValues("pay", OutcomeLate, "504")) == 1
	})
}

// TestLateAnswerZeroCancels: late_answer_wait 0 is revision 2's
// behaviour: the call is cancelled at the timeout.
func TestLateAnswerZeroCancels(t *testing.T) {
	t.Parallel()
	up := itestutil.NewHeldUpstream(t, itestutil.HeldOptions{})
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = lateRoutes(0)
	})
	if r := tp.do(t, "POST", "/pay", "k1", `{}`); r.status != http.StatusGatewayTimeout {
		t.Fatalf("first = %v; want 504", r)
	}
	up.Arrival(t, "k1")
	itestutil.Eventually(t, 10*time.Second, "the call cancelled", func() bool { return up.Cancelled() == 1 })
}

// TestLateAnswerKeepsSessionTurn: a kept call holds its session's turn
// until its late answer came: the next request of the session waits for
// it, although the first one's client got its 504 long ago.
func TestLateAnswerKeepsSessionTurn(t *testing.T) {
	t.Parallel()
	up := itestutil.NewHeldUpstream(t, itestutil.HeldOptions{})
	q, err := session.New(session.Options{QueueDepth: 4, QueueTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = lateRoutes(time.Minute)
		o.Stages.Sessions = q
	})
	if r := tp.do(t, "PUT", "/carts/c1", "k1", `{}`); r.status != http.StatusGatewayTimeout {
		t.Fatalf("first = %v; want 504", r)
	}
	up.Arrival(t, "k1")
	got := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("GET", tp.URL+"/carts/c1", nil)
		req.Header.Set("Idempotency-Key", "get")
		res, err := tp.Client().Do(req)
		if err != nil {
			got <- result{}
			return
		}
		got <- readResult(t, res)
	}()
	if key, ok := up.Next(300 * time.Millisecond); ok {
		t.Fatalf("request %q reached the upstream while the kept call held the session's turn", key)
	}
	up.Open()
	up.Arrival(t, "get")
	if r := <-got; r.status != http.StatusCreated {
		t.Errorf("the session's next request = %v; want 201", r)
	}
	if n := up.Count("k1"); n != 1 {
		t.Errorf("executions = %d; want 1", n)
	}
}

// TestLateAnswerMax: beyond late_answer_max kept calls, a timed-out call is
// cancelled as without a late wait, and counted.
func TestLateAnswerMax(t *testing.T) {
	t.Parallel()
	up := itestutil.NewHeldUpstream(t, itestutil.HeldOptions{})
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "test", "")
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = lateRoutes(time.Minute)
		o.Idempotency.LateAnswerMax = 1
		o.Metrics = m
	})
	if r := tp.do(t, "POST", "/pay", "k1", `{}`); r.status != http.StatusGatewayTimeout {
		t.Fatalf("first = %v; want 504", r)
	}
	up.Arrival(t, "k1")
	if r := tp.do(t, "POST", "/pay", "k2", `{}`); r.status != http.StatusGatewayTimeout || problemCode(t, r) != "upstream_timeout" {
		t.Fatalf("second = %v; want 504 upstream_timeout", r)
	}
	up.Arrival(t, "k2")
	itestutil.Eventually(t, 10*time.Second, "the call over late_answer_max cancelled", func() bool { return up.Cancelled() == 1 })
	if n := testutil.ToFloat64(m.lateDrop.WithLabelValues("pay")); n != 1 {
		t.Errorf("idemgate_late_calls_cancelled_total = %v; want 1", n)
	}
	up.Open()
	itestutil.Eventually(t, 10*time.Second, "k1's late answer replayed", func() bool {
		return tp.do(t, "POST", "/pay", "k1", `{}`).status == http.StatusCreated
	})
	// k2's outcome is unknown: its claim holds until its lease ends.
	if r := tp.do(t, "POST", "/pay", "k2", `{}`); r.status != http.StatusConflict {
		t.Errorf("k2's retry = %v; want 409 in progress", r)
	}
}

// TestLateAnswerShutdown: a kept call counts against the shutdown's grace:
// Shutdown waits for it, returns at the grace's end while the upstream
// still holds it, and extends its lease, by one fenced write, to the end of
// its late wait, so that no retry takes its key over before then.
func TestLateAnswerShutdown(t *testing.T) {
	t.Parallel()
	up := itestutil.NewHeldUpstream(t, itestutil.HeldOptions{})
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = lateRoutes(30 * time.Minute)
		o.Idempotency.Lease = time.Minute
	})
	first := tp.do(t, "POST", "/pay", "k1", `{}`)
	if first.status != http.StatusGatewayTimeout {
		t.Fatalf("first = %v; want 504", first)
	}
	up.Arrival(t, "k1")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	tp.p.Shutdown(ctx)
	if took := time.Since(start); took < 250*time.Millisecond || took > 5*time.Second {
		t.Errorf("Shutdown took %v; want the 300ms grace", took)
	}
	sk := tp.p.scope(httptestRequest(), "k1")
	rec, err := tp.store.Get(context.Background(), sk)
	if err != nil {
		t.Fatal(err)
	}
	if left := rec.LeaseEnd.Sub(tp.clock.Now()); left < 25*time.Minute {
		t.Errorf("lease left after shutdown = %v; want about the 30m late wait", left)
	}
	up.Open()
}

// httptestRequest is a request with no identity on the default host, for
// computing scopes.
func httptestRequest() *http.Request {
	r, _ := http.NewRequest("POST", "http://example/pay", nil)
	return r
}

// TestLateAnswerHoldsBody: a kept call keeps its body's share of
// max_buffered_bytes until it ends: with room for eight bodies, the ninth
// timed-out write's successor is refused 503 overloaded while eight are
// kept, and writes pass again once their late answers came.
func TestLateAnswerHoldsBody(t *testing.T) {
	t.Parallel()
	up := itestutil.NewHeldUpstream(t, itestutil.HeldOptions{})
	wait := time.Minute
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = []Route{{Name: "pay", Method: "POST", Path: "/pay", Idempotent: true, Timeout: 50 * time.Millisecond, LateAnswerWait: &wait}}
		o.MaxBufferedBytes, o.MaxBufferedBytesPerClient = 8<<10, 8<<10
	})
	body := strings.Repeat("x", 1000)
	send := func(key string) result {
		return tp.do(t, "POST", "/pay", key, body, "Content-Type", "application/octet-stream")
	}
	overloaded := -1
	for i := range 12 {
		r := send(fmt.Sprintf("k%d", i))
		if r.status == http.StatusServiceUnavailable && problemCode(t, r) == "overloaded" {
			overloaded = i
			break
		}
		if r.status != http.StatusGatewayTimeout {
			t.Fatalf("write %d = %v; want 504 (kept) or 503 overloaded", i, r)
		}
		up.Arrival(t, fmt.Sprintf("k%d", i))
	}
	if overloaded < 0 || overloaded > 8 {
		t.Fatalf("first 503 overloaded at write %d; want it once about 8 KiB of bodies are kept", overloaded)
	}
	up.Open()
	itestutil.Eventually(t, 10*time.Second, "writes accepted after the late answers", func() bool {
		return send("after").status == http.StatusCreated
	})
}
