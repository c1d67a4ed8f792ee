package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	itestutil "github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/keystore/metered"
	"github.com/idemgate/idemgate/limiter"
	"github.com/idemgate/idemgate/session"
)

// meteredProxy is a testProxy whose Proxy records Metrics on its own
// pedantic registry, with the memory store wrapped by Metrics.Store.
type meteredProxy struct {
	*testProxy
	reg *prometheus.Registry
	m   *Metrics
}

func newMeteredProxy(t *testing.T, up string, routes []Route, mod func(*Options, *Metrics)) *meteredProxy {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg, "v-test", "rev-test")
	clk := itestutil.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st := memstore.New(memstore.Options{Now: clk.Now})
	u, err := url.Parse(up)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	opts := Options{
		Upstream: u,
		Stages:   Stages{Routes: routes},
		Store:    metered.New(st, reg),
		Idempotency: Idempotency{
			IdentityHeaders: []string{"Authorization"},
			ReplayHeader:    "Idempotent-Replayed",
			ReleaseStatuses: []int{400, 404, 409, 422, 429, 503},
		},
		Logger:  slog.New(slog.NewJSONHandler(logs, nil)),
		Metrics: m,
	}
	if mod != nil {
		mod(&opts, m)
	}
	p, err := newOpts(opts)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.Close()
		p.Close()
		st.Close()
		p.deps.Transport.(*http.Transport).CloseIdleConnections()
	})
	return &meteredProxy{testProxy: &testProxy{Server: srv, p: p, store: st, clock: clk, logs: logs}, reg: reg, m: m}
}

// switchLimiter is a limiter that refuses every request while refuse is
// set, as a limiter over its budget would: 429 rate_limited.
type switchLimiter struct{ refuse atomic.Bool }

func (l *switchLimiter) AllowContext(context.Context, limiter.Key, time.Time) limiter.Decision {
	if l.refuse.Load() {
		return limiter.Decision{RetryAfter: time.Second}
	}
	return limiter.Decision{OK: true}
}

func (l *switchLimiter) Policy() limiter.Policy { return limiter.Policy{} }

// refusing runs f while l refuses.
func (l *switchLimiter) refusing(f func()) {
	l.refuse.Store(true)
	defer l.refuse.Store(false)
	f()
}

// TestMetrics drives real requests through a proxy and checks every family
// with testutil, then lints the whole registry.
func TestMetrics(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	arrived := make(chan string, 4)
	release := make(chan struct{})
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case r.Header.Get("X-Hold") != "":
			arrived <- r.Header.Get("Idempotency-Key") + r.URL.Path
			<-release
		case r.Header.Get("X-Break") != "":
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
			return
		case r.Header.Get("X-Status") == "404":
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"ok":true}`))
	}
	routes := []Route{
		{Name: "create_cart", Method: "POST", Path: "/ucp/v1/carts", Idempotent: true},
		{Name: "hold", Method: "POST", Path: "/hold", Idempotent: true},
		{Name: "get_cart", Method: "GET", Path: "/carts/{id}", Session: Session{Param: "id"}},
	}
	edge, route := &switchLimiter{}, &switchLimiter{}
	mp := newMeteredProxy(t, up.URL, routes, func(o *Options, m *Metrics) {
		o.Stages.Edge = edge
		o.Stages.RouteLimits = map[string]Limiter{"create_cart": route}
		q, err := session.New(session.Options{QueueDepth: 1, QueueTimeout: time.Minute, Metrics: m.Session()})
		if err != nil {
			t.Fatal(err)
		}
		o.Stages.Sessions = q
	})
	m := mp.m
	expect := func(what string, r result, status int) {
		t.Helper()
		if r.status != status {
			t.Fatalf("%s = %v; want %d", what, r, status)
		}
	}
	expect("first", mp.do(t, "POST", "/ucp/v1/carts", "k1", `{"a":1}`), 201)
	expect("retry", mp.do(t, "POST", "/ucp/v1/carts", "k1", `{"a":1}`), 201)
	expect("reuse", mp.do(t, "POST", "/ucp/v1/carts", "k1", `{"a":2}`), 409)
	expect("no key", mp.do(t, "POST", "/ucp/v1/carts", "", `{}`), 201)
	expect("bad key", mp.do(t, "POST", "/ucp/v1/carts", "bad key", `{}`), 400)
	expect("released", mp.do(t, "POST", "/ucp/v1/carts", "k404", `{}`, "X-Status", "404"), 404)
	expect("unmatched", mp.do(t, "GET", "/nowhere", "", ""), 201)
	edge.refusing(func() {
		expect("edge", mp.do(t, "POST", "/ucp/v1/carts", "k2", `{}`), 429)
		expect("edge unmatched", mp.do(t, "GET", "/nowhere", "", ""), 429)
	})
	route.refusing(func() { expect("route", mp.do(t, "POST", "/ucp/v1/carts", "k3", `{}`), 429) })
	expect("broken", mp.do(t, "POST", "/ucp/v1/carts", "kb", `{}`, "X-Break", "1"), 502)

	// A claim in progress, a duplicate, a takeover and the first holder's
	// late completion; requests in flight meanwhile.
	first := make(chan result, 1)
	go func() { first <- mp.do(t, "POST", "/hold", "h1", "", "X-Hold", "1") }()
	if got := <-arrived; got != "h1/hold" {
		t.Fatalf("arrived %q", got)
	}
	if n := testutil.ToFloat64(m.inFlight); n != 1 {
		t.Errorf("in flight = %v; want 1", n)
	}
	expect("in progress", mp.do(t, "POST", "/hold", "h1", ""), 409)
	mp.clock.Advance(time.Hour) // the first holder's lease ended (store clock)
	second := make(chan result, 1)
	go func() { second <- mp.do(t, "POST", "/hold", "h1", "", "X-Hold", "1") }()
	<-arrived

	// Session turns: one runs, one waits (the line holds one), one is
	// refused.
	sess := make(chan result, 1)
	go func() { sess <- mp.do(t, "GET", "/carts/c1", "k-ignored", "", "X-Hold", "1") }()
	<-arrived
	waiter := make(chan result, 1)
	go func() { waiter <- mp.do(t, "GET", "/carts/c1", "", "") }()
	itestutil.Eventually(t, 10*time.Second, "one request in the session queue", func() bool { return testutil.ToFloat64(m.queueDepth) == 1 })
	expect("session busy", mp.do(t, "GET", "/carts/c1", "", ""), 503)
	if n := testutil.ToFloat64(m.inFlight); n != 4 {
		t.Errorf("in flight = %v; want 4", n)
	}
	close(release)
	expect("held", <-first, 201)
	expect("takeover", <-second, 201)
	expect("session", <-sess, 201)
	expect("session waiter", <-waiter, 201)
	m.Session().Fallback() // needs a shared lock that is down; counted by the queue
	itestutil.Eventually(t, 10*time.Second, "a rejected late completion counted", func() bool {
		return itestutil.Gathered(t, mp.reg, "idemgate_idempotency_late_completions_rejected_total") == 1
	})
	itestutil.Eventually(t, 10*time.Second, "no request in flight", func() bool { return testutil.ToFloat64(m.inFlight) == 0 })

	// The store fails: closed.
	mp.store.Close()
	expect("store closed", mp.do(t, "POST", "/ucp/v1/carts", "k9", `{}`), 503)
	itestutil.Eventually(t, 10*time.Second, "no request in flight", func() bool { return testutil.ToFloat64(m.inFlight) == 0 }) // counted

	req := func(route, outcome, code string) float64 {
		return testutil.ToFloat64(m.requests.WithLabelValues(route, outcome, code))
	}
	for _, c := range []struct {
		route, outcome, code string
		want                 float64
	}{
		{"create_cart", OutcomeExecuted, "201", 1},
		{"create_cart", OutcomeReplayed, "201", 1},
		{"create_cart", OutcomeKeyReused, "409", 1},
		{"create_cart", OutcomeUnprotected, "201", 1},
		{"create_cart", OutcomeRejected, "400", 1},
		{"create_cart", OutcomeReleased, "404", 1},
		{"", OutcomePassthrough, "201", 1},
		{"", OutcomeRateLimited, "429", 2}, // edge: before the route match
		{"create_cart", OutcomeRateLimited, "429", 1},
		{"create_cart", OutcomeUpstreamError, "502", 1},
		{"create_cart", OutcomeUnavailable, "503", 1},
		{"hold", OutcomeExecuted, "201", 2},
		{"hold", OutcomeInProgress, "409", 1},
		{"get_cart", OutcomePassthrough, "201", 2},
		{"get_cart", OutcomeSessionBusy, "503", 1},
	} {
		if got := req(c.route, c.outcome, c.code); got != c.want {
			t.Errorf("idemgate_http_requests_total{route=%q,outcome=%q,code=%q} = %v; want %v", c.route, c.outcome, c.code, got, c.want)
		}
	}
	if n := counted(t, m.requests); n != 15 {
		t.Errorf("idemgate_http_requests_total has %d series above 0; want 15", n)
	}
	for _, c := range []struct {
		limiter, route string
		want           float64
	}{
		{LimiterEdge, "create_cart", 1}, // the route it would have matched
		{LimiterEdge, "", 1},
		{LimiterRoute, "create_cart", 1},
	} {
		if got := testutil.ToFloat64(m.limited.WithLabelValues(c.limiter, c.route)); got != c.want {
			t.Errorf("idemgate_limiter_rejections_total{limiter=%q,route=%q} = %v; want %v", c.limiter, c.route, got, c.want)
		}
	}
	if got := itestutil.Gathered(t, mp.reg, "idemgate_idempotency_takeovers_total", "route", "hold"); got != 1 {
		t.Errorf("takeovers{hold} = %v; want 1", got)
	}
	if got := itestutil.Gathered(t, mp.reg, "idemgate_store_errors_total", "op", "reserve", "kind", "closed"); got != 1 {
		t.Errorf("store errors{reserve,closed} = %v; want 1", got)
	}
	if got := testutil.ToFloat64(m.queueReject.WithLabelValues(string(session.ResultFull))); got != 1 {
		t.Errorf("session rejections{queue_full} = %v; want 1", got)
	}
	if got := testutil.ToFloat64(m.queueDepth); got != 0 {
		t.Errorf("session queue depth = %v; want 0", got)
	}
	// Histograms: one observation per request, per upstream attempt, per
	// store operation, per wait for a turn.
	counts := histogramCounts(t, mp.reg, "idemgate_http_request_duration_seconds", "route")
	if counts["create_cart"] != 9 || counts[""] != 3 || counts["hold"] != 3 || counts["get_cart"] != 3 {
		t.Errorf("request duration counts = %v; want create_cart 9, \"\" 3, hold 3, get_cart 3", counts)
	}
	counts = histogramCounts(t, mp.reg, "idemgate_upstream_request_duration_seconds", "route")
	if counts["create_cart"] != 4 || counts[""] != 1 || counts["hold"] != 2 || counts["get_cart"] != 2 {
		t.Errorf("upstream duration counts = %v; want create_cart 4, \"\" 1, hold 2, get_cart 2", counts)
	}
	counts = histogramCounts(t, mp.reg, "idemgate_session_wait_seconds", "result")
	if counts[string(session.ResultTurn)] != 1 {
		t.Errorf("session wait counts = %v; want turn 1", counts)
	}
	counts = histogramCounts(t, mp.reg, "idemgate_store_operation_duration_seconds", "op")
	// reserve: k1×3, k404, kb, h1×3, k9; complete_claim: k1, h1×2; release: k404.
	if counts["reserve"] != 9 || counts["complete_claim"] != 3 || counts["release"] != 1 {
		t.Errorf("store operation counts = %v; want reserve 9, complete_claim 3, release 1", counts)
	}

	err := testutil.GatherAndCompare(mp.reg, strings.NewReader(`
# HELP idemgate_idempotency_late_completions_rejected_total Answers not stored because the claim had been taken over, released or repaired by an operator while the request ran.
# TYPE idemgate_idempotency_late_completions_rejected_total counter
idemgate_idempotency_late_completions_rejected_total 1
# HELP idemgate_http_requests_in_flight Requests on the public listener being served now.
# TYPE idemgate_http_requests_in_flight gauge
idemgate_http_requests_in_flight 0
`), "idemgate_idempotency_late_completions_rejected_total", "idemgate_http_requests_in_flight")
	if err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(mustGauge(t, mp.reg, "idemgate_build_info")); got != 1 {
		t.Errorf("build info = %v; want 1", got)
	}
	problems, err := testutil.GatherAndLint(mp.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	// Every family was touched: lint saw them all.
	mfs, err := mp.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{
		"idemgate_build_info", "idemgate_http_requests_total", "idemgate_http_request_duration_seconds",
		"idemgate_http_requests_in_flight", "idemgate_upstream_request_duration_seconds",
		"idemgate_store_operation_duration_seconds", "idemgate_store_errors_total",
		"idemgate_limiter_rejections_total", "idemgate_idempotency_takeovers_total",
		"idemgate_idempotency_late_completions_rejected_total", "idemgate_session_queue_depth",
		"idemgate_session_rejections_total", "idemgate_session_wait_seconds", "idemgate_session_lock_fallbacks_total",
	} {
		if !have[name] {
			t.Errorf("family %s missing", name)
		}
	}
	if strings.Contains(dumpText(t, mp.reg), "k1") || strings.Contains(dumpText(t, mp.reg), "/nowhere") {
		t.Errorf("a key or a raw path became a label value")
	}
}

// histogramCounts returns the sample count of each series of a histogram
// family, by the value of label.
func histogramCounts(t *testing.T, g prometheus.Gatherer, name, label string) map[string]uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == label {
					out[lp.GetValue()] += mt.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}

func mustGauge(t *testing.T, g prometheus.Gatherer, name string) prometheus.Collector {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			v := mf.GetMetric()[0].GetGauge().GetValue()
			gg := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
			gg.Set(v)
			return gg
		}
	}
	t.Fatalf("%s not gathered", name)
	return nil
}

func dumpText(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				b.WriteString(lp.GetName() + "=" + lp.GetValue() + "\n")
			}
		}
	}
	return b.String()
}

// TestNilMetrics: a nil Metrics records nothing and gives the queue no-op
// hooks.
func TestNilMetrics(t *testing.T) {
	t.Parallel()
	var none *Metrics
	if _, ok := none.Session().(session.NopMetrics); !ok {
		t.Errorf("nil Metrics' Session() is not NopMetrics")
	}
}

// Issue 31: a route's request series are looked up once and kept. 8
// goroutines count requests of 6 outcome and status pairs (most new to the
// route, so that they race to add them) and time them: every series holds
// exactly its requests, in the series WithLabelValues names, and a request
// of a route that Apply did not see (no series kept) counts there too.
func TestRouteSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg, "test", "")
	rt := &route{Route: Route{Name: "carts"}}
	m.initRoutes([]*route{rt}, Policy{})
	if rt.series == nil {
		t.Fatal("initRoutes kept no series for the route")
	}
	pairs := []struct {
		outcome string
		status  int
	}{
		{OutcomeExecuted, 201}, {OutcomeExecuted, 200}, {OutcomeReplayed, 201},
		{OutcomeInProgress, 409}, {OutcomeUpstreamError, 502}, {OutcomePassthrough, statusClientClosed},
	}
	const workers, rounds = 8, 240
	req := httptest.NewRequest("POST", "/carts", nil)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				p := pairs[(w+i)%len(pairs)]
				m.observeRequest(req, &exchange{route: rt}, p.status, p.outcome, time.Millisecond)
			}
		}()
	}
	wg.Wait()
	other := &route{Route: Route{Name: "carts"}} // the same name, compiled without Apply
	m.observeRequest(req, &exchange{route: other}, 201, OutcomeExecuted, time.Millisecond)
	for range 3 { // no route matched: route ""
		m.observeRequest(req, &exchange{}, 200, OutcomePassthrough, time.Millisecond)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("", OutcomePassthrough, "200")); got != 3 {
		t.Errorf(`requests{route="", outcome=passthrough, code=200} = %v; want 3`, got)
	}

	perPair := workers * rounds / len(pairs)
	if workers*rounds%len(pairs) != 0 {
		t.Fatalf("the test's counts do not divide: %d requests over %d pairs", workers*rounds, len(pairs))
	}
	results := map[string]int{}
	for i, p := range pairs {
		want := perPair
		if i == 0 {
			want++ // the request of the route without kept series
		}
		if got := testutil.ToFloat64(m.requests.WithLabelValues("carts", p.outcome, statusLabel(p.status))); got != float64(want) {
			t.Errorf("requests{outcome=%s, code=%d} = %v; want %d", p.outcome, p.status, got, want)
		}
		results[resultOf(p.outcome, "", p.status)] += want
	}
	for res, want := range results {
		if got := sampleCount(t, m.duration.WithLabelValues("carts", res)); got != want {
			t.Errorf("duration{result=%s} count = %d; want %d", res, got, want)
		}
	}

	// The upstream's series, through the metered transport: attempts
	// answered 201 and 502, and attempts without an answer.
	tr := m.transport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		switch r.Header.Get("Answer") {
		case "201":
			return &http.Response{StatusCode: 201, Body: http.NoBody}, nil
		case "502":
			return &http.Response{StatusCode: 502, Body: http.NoBody}, nil
		}
		return nil, errors.New("connection refused")
	}))
	answers := []string{"201", "502", "none"}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				r := withExchange(httptest.NewRequest("POST", "/carts", nil), &exchange{route: rt})
				r.Header.Set("Answer", answers[(w+i)%len(answers)])
				if res, err := tr.RoundTrip(r); err == nil {
					res.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	for _, a := range answers {
		code := a
		if a == "none" {
			code = UpstreamCodeError
		}
		if got := testutil.ToFloat64(m.upstreamN.WithLabelValues("carts", code)); got != float64(workers*rounds/len(answers)) {
			t.Errorf("upstream requests{code=%s} = %v; want %d", code, got, workers*rounds/len(answers))
		}
	}
	if got := sampleCount(t, m.upstream.WithLabelValues("carts")); got != workers*rounds {
		t.Errorf("upstream duration count = %d; want %d", got, workers*rounds)
	}
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// sampleCount is the number of observations of a histogram series.
func sampleCount(t *testing.T, o prometheus.Observer) int {
	t.Helper()
	var d dto.Metric
	if err := o.(prometheus.Histogram).Write(&d); err != nil {
		t.Fatal(err)
	}
	return int(d.GetHistogram().GetSampleCount())
}

// BenchmarkMetricsPerRequest is what the metrics add to a keyed request:
// the request's series and histogram, and a timed store operation.
func BenchmarkMetricsPerRequest(b *testing.B) {
	m := NewMetrics(prometheus.NewRegistry(), "bench", "")
	st := memstore.New(memstore.Options{})
	b.Cleanup(func() { st.Close() })
	ms := metered.New(st, prometheus.NewRegistry())
	rt := &route{Route: Route{Name: "create_cart"}}
	rt.series = m.newRouteSeries(rt.Name) // as Apply makes them
	req := httptest.NewRequest("POST", "/ucp/v1/carts", nil)
	k := keystore.NewKey("bench")
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ex := &exchange{route: rt, pastEdge: true}
		for pb.Next() {
			m.inFlight.Inc()
			ms.Get(ctx, k)
			m.observeRequest(req, ex, 201, OutcomeReplayed, time.Millisecond)
			m.inFlight.Dec()
		}
	})
}

// counted is the number of c's counter series above 0 (the others were
// made at 0 in advance).
func counted(t *testing.T, c prometheus.Collector) int {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			if mt.GetCounter().GetValue() > 0 {
				n++
			}
		}
	}
	return n
}

func TestStatusLabel(t *testing.T) {
	for _, code := range []int{-1, 0, 7, 99, 100, 201, 499, 599, 600, 1000} {
		if got, want := statusLabel(code), strconv.Itoa(code); got != want {
			t.Errorf("statusLabel(%d) = %q, want %q", code, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = statusLabel(201) }); n != 0 {
		t.Errorf("statusLabel(201) allocates %v times, want 0", n)
	}
}
